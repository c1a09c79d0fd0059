"""The ``ocihook-runtime`` console entry point (``ocihook.runtime:main``, written into
engine configurations on installed hosts, so its name is stable). The wrapper itself is
:mod:`ocihook.commands.runtime`."""

from __future__ import annotations

from .commands.runtime import main

__all__ = ["main"]

if __name__ == "__main__":  # pragma: no cover
    import sys

    sys.exit(main())
