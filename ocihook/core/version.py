"""ocihook's version, in one place below every layer.

``ocihook.__version__``, the commands' version output (``ocihook --version``,
``ocihook-runtime --version``, ``nvidia-container-runtime-hook -version``) and what
ocihook records in the files it writes all read :data:`VERSION`; it equals the version in
``pyproject.toml`` (``tests/contract/test_packaging.py`` checks both).
"""

from __future__ import annotations

__all__ = ["VERSION", "version_line"]

#: The version of this ocihook (PEP 440).
VERSION = "0.1.0"


def version_line(program: str) -> str:
    """The first line of every command's version output, in the NVIDIA Container Toolkit's
    form (``NVIDIA Container Runtime version 1.17.0``): ``"<program> version <VERSION>"``."""
    return f"{program} version {VERSION}"
