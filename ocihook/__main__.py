"""``python -m ocihook``: the same as the ``ocihook`` command."""

from ._main import run

run()
