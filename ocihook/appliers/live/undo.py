"""Undo actions of hook mode: each step that changes the container registers how to take it
back; on failure they run in reverse, best effort."""

from __future__ import annotations

import os

from ...core.errors import OcihookError

TYPE_CHECKING = False  # not typing: this package is on the GPU container start path
if TYPE_CHECKING:
    from collections.abc import Callable

    #: One undo action: called with no argument, its result ignored; it may raise
    #: ``OSError`` or :class:`~ocihook.core.errors.OcihookError` (:func:`run_undo` ignores
    #: those).
    Undo = Callable[[], object]


def partial(fn: Callable[..., object], *args: object) -> Undo:
    """``fn`` bound to the positional ``args``: an :data:`Undo` that calls ``fn(*args)``
    (``functools.partial`` without importing ``functools``, which the container start path
    does not load). Raises nothing itself; the call raises what ``fn`` raises."""
    return lambda: fn(*args)


def run_undo(undo: list[Undo]) -> None:
    """Run the actions of ``undo`` last first (the reverse of the order the changes were
    made), then empty the list. Best effort: an action that raises ``OSError`` or
    :class:`~ocihook.core.errors.OcihookError` is skipped and the rest still run (after a
    failed hook the runtime tears the container down, OCI runtime-spec ``runtime.md``,
    "Lifecycle"); any other exception propagates."""
    for fn in reversed(undo):
        try:  # noqa: SIM105 (contextlib is not imported on this path)
            fn()
        except (OSError, OcihookError):
            pass  # best effort: the runtime tears the container down after a failed hook
    undo.clear()


def detach(root_fd: int, path: str) -> None:
    """Lazily unmount the mount at ``path`` inside the directory ``root_fd`` (the
    container's rootfs): ``path`` is resolved under the root without leaving it
    (:func:`ocihook.linux.pathsafe.open_in_root`), then ``umount2(2)`` with ``MNT_DETACH``
    on the ``O_PATH`` descriptor's ``/proc/self/fd`` link.

    Raises:
        ApplyError: ``path`` cannot be looked up under the root (``ENOENT``, ``ELOOP``,
            ...; the ``OSError`` is the ``__cause__``).
        OSError: ``umount2`` fails (``EINVAL``: not a mount point; ``EPERM``; ``EBUSY``).
    """
    from ...linux import pathsafe as ps
    from ...linux import syscalls as _linux

    fd = ps.open_in_root(root_fd, path, os.O_PATH | os.O_CLOEXEC)
    try:
        _linux.umount2(f"/proc/self/fd/{fd}", _linux.MNT_DETACH)
    finally:
        os.close(fd)
