"""The ``ocihook-runtime`` console entry point (``ocihook.runtime:main``, written into
engine configurations on installed hosts, so its name is stable). The wrapper itself is
:mod:`ocihook.commands.runtime`."""

from __future__ import annotations

from .core.stdio import run_one_shot, tolerant_stderr

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn

__all__ = ["main", "run"]


def main(argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None) -> int:
    """``ocihook-runtime ARGS...`` (:func:`ocihook.commands.runtime.main`), with a message
    that cannot be written to stderr dropped instead of failing the wrapper
    (:func:`ocihook.core.stdio.tolerant_stderr`): a ``config.json`` edited for a container is
    still handed to the real runtime.

    Returns:
        The exit code when the real runtime is not exec'ed.
    """
    from .commands.runtime import main as wrapper_main

    restore = tolerant_stderr()
    try:
        return wrapper_main(argv, environ=environ)
    finally:
        restore()


def run() -> NoReturn:
    """The ``ocihook-runtime`` program (``packaging/bin/ocihook-runtime``): :func:`main`
    with the process's arguments through :func:`ocihook.core.stdio.run_one_shot` (the
    wrapper is on the start path: it execs the runtime, or ends without the interpreter's
    finalization), its modules from the start path's module image when there is one
    (:func:`ocihook.core.modimage.install`: root's, else the user's own,
    :func:`ocihook.linux.cachestore.install_user_module_image`)."""
    from .core import modimage

    if not modimage.install() and not modimage.host_root():  # the user's own
        from .linux.cachestore import install_user_module_image

        install_user_module_image()
    run_one_shot(main)


if __name__ == "__main__":  # pragma: no cover
    run()
