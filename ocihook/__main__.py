"""``python -m ocihook``: the same as the ``ocihook`` command."""

import sys

from ._main import main

sys.exit(main())
