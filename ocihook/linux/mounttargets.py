"""Bind-mount targets made in a container's root file system, many at once.

:func:`mount_targets_in_root` is :func:`ocihook.linux.pathsafe.create_file_in_root` and
:func:`~ocihook.linux.pathsafe.makedirs_in_root` for a batch of targets, with the same
in-root lookups, refusals and messages, and each parent directory resolved once.
"""

from __future__ import annotations

from ..core.errors import ApplyError
from .pathsafe import close_quietly, create_file_at, create_file_in_root, makedirs_in_root

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["mount_targets_in_root"]


def mount_targets_in_root(
    root_fd: int,
    targets: Sequence[tuple[str, bool]],
    *,
    created: list[str] | None = None,
) -> None:
    """Make each ``(path, is_dir)`` of ``targets`` a bind-mount target inside the root
    ``root_fd``, in order: a directory as by :func:`~ocihook.linux.pathsafe.makedirs_in_root`,
    else a regular file as by :func:`~ocihook.linux.pathsafe.create_file_in_root` (an
    existing regular file is used as it is; a link or anything else is refused), with the
    parent directory of the files resolved (and made) inside the root once per directory
    rather than once per file: the driver's 50-odd mount targets live in a few
    directories. Only directories and regular files are made, so a parent resolved once
    stays what it resolved to. No descriptor is kept.

    Raises:
        ApplyError: as those two functions (same messages), for the first target that
            fails; what was made before it stays, listed in ``created``.
    """
    parents: dict[str, int] = {}
    try:
        for path, is_dir in targets:
            if is_dir:
                close_quietly(makedirs_in_root(root_fd, path, created=created))
                continue
            head, _, name = path.rpartition("/")
            parent = head or "/"
            if name in ("", ".", ".."):  # refused before any lookup, with its message
                close_quietly(create_file_in_root(root_fd, path, created=created))
                continue
            parent_fd = parents.get(parent)
            if parent_fd is None:
                try:
                    parent_fd = parents[parent] = makedirs_in_root(root_fd, parent, created=created)
                except ApplyError:
                    # made one by one it fails the same way, with a message naming the file
                    close_quietly(create_file_in_root(root_fd, path, created=created))
                    continue
            close_quietly(create_file_at(parent_fd, parent, name, created=created))
    finally:
        for fd in parents.values():
            close_quietly(fd)
