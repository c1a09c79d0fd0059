"""Undo actions of hook mode: each step that changes the container registers how to take it
back; on failure they run in reverse, best effort."""

from __future__ import annotations

import os

from ...core.errors import OcihookError

TYPE_CHECKING = False  # not typing: this package is on the GPU container start path
if TYPE_CHECKING:
    from collections.abc import Callable

    Undo = Callable[[], object]


def partial(fn: Callable[..., object], *args: object) -> Undo:
    """``fn`` bound to ``args`` (functools.partial without importing functools)."""
    return lambda: fn(*args)


def run_undo(undo: list[Undo]) -> None:
    for fn in reversed(undo):
        try:  # noqa: SIM105 (contextlib is not imported on this path)
            fn()
        except (OSError, OcihookError):
            pass  # best effort: the runtime tears the container down after a failed hook
    undo.clear()


def detach(root_fd: int, path: str) -> None:
    from ...linux import pathsafe as ps
    from ...linux import syscalls as _linux

    fd = ps.open_in_root(root_fd, path, os.O_PATH | os.O_CLOEXEC)
    try:
        _linux.umount2(f"/proc/self/fd/{fd}", _linux.MNT_DETACH)
    finally:
        os.close(fd)
