"""What hook mode leaves in a container's root file system, and its removal.

Hook mode makes its bind-mount targets (empty files, directories) and the soname links
in the container's root file system; they outlive the container when the root is reused
(a plain ``runc`` bundle, a rootfs directory shared by successive containers). After a
successful injection :func:`record_created` writes what was made to
``<bundle>/.ocihook-created.json``; the ``poststop`` hook (``ocihook hook poststop``,
registered next to the injecting hook) calls :func:`remove_recorded`, which removes
exactly those paths, newest first, and only while each is still what ocihook made: an
empty regular file, a link with the target ocihook wrote, an empty directory. Anything
else is kept and named. Paths under ``/dev``, ``/proc`` and ``/sys`` are not recorded:
they are in file systems that go with the container. The container's ``ld.so.cache``
keeps ocihook's entries (a rewritten file, not a made one).
"""

from __future__ import annotations

import os
import stat

from ...core import jsonfast
from ...core.errors import ApplyError
from ...linux import pathsafe
from ...oci.bundle import Bundle, write_json_atomic

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["RECORD_NAME", "record_created", "remove_recorded"]

#: The record's file name in the bundle directory.
RECORD_NAME = ".ocihook-created.json"
#: The record is ours and small: a larger file is not read.
_MAX_RECORD = 1 << 20
_SKIPPED = ("/dev", "/proc", "/sys")


def record_created(bundle: Bundle, paths: Sequence[str], links: Mapping[str, str]) -> str | None:
    """Write the record of ``paths`` (container paths made, in the order made) and the
    targets of the links among them. Returns a warning when it cannot be written (the
    container starts anyway; its files are then left behind), else ``None``."""
    kept = [p for p in paths if not any(p == d or p.startswith(d + "/") for d in _SKIPPED)]
    if not kept:
        return None
    doc = {
        "version": 1,
        "paths": kept,
        "links": {p: links[p] for p in kept if p in links},
    }
    where = os.path.join(bundle.path, RECORD_NAME)
    try:
        write_json_atomic(where, doc, indent=None)
    except OSError as e:
        return f"cannot write {where} ({e.strerror}): what ocihook made stays in the rootfs"
    return None


def _is_ours(root_fd: int, path: str, link_target: str | None) -> bool:
    parent, _, name = path.rpartition("/")
    try:
        parent_fd = pathsafe.open_in_root(root_fd, parent or "/", os.O_PATH | os.O_DIRECTORY)
    except ApplyError:
        return False
    try:
        st = os.lstat(name, dir_fd=parent_fd)
        if stat.S_ISLNK(st.st_mode):
            return link_target is not None and os.readlink(name, dir_fd=parent_fd) == link_target
    except OSError:
        return False
    finally:
        os.close(parent_fd)
    if stat.S_ISREG(st.st_mode):
        return link_target is None and st.st_size == 0
    return stat.S_ISDIR(st.st_mode) and link_target is None  # rmdir keeps a full one


def remove_recorded(bundle: Bundle) -> tuple[list[str], list[str]]:
    """Remove what :func:`record_created` recorded for ``bundle`` from its root file
    system, then the record. No record: nothing to do.

    Returns:
        ``(removed, kept)``: container paths removed, and messages for those kept (changed
        since, not empty, in use) or for a record that could not be read.
    """
    where = os.path.join(bundle.path, RECORD_NAME)
    try:
        fd = os.open(where, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return [], []
    except OSError as e:
        return [], [f"cannot read {where}: {e.strerror}"]
    try:
        data = os.read(fd, _MAX_RECORD + 1) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    finally:
        os.close(fd)
    try:
        doc = jsonfast.loads(data.decode()) if len(data) <= _MAX_RECORD else None
    except (ValueError, RecursionError):
        doc = None
    paths = doc.get("paths") if isinstance(doc, dict) else None
    links = doc.get("links") if isinstance(doc, dict) else None
    if (
        not isinstance(paths, list)
        or not all(isinstance(p, str) and p.startswith("/") for p in paths)
        or not isinstance(links, dict)
    ):
        return [], [f"{where} is not a record ocihook wrote; nothing removed"]
    removed: list[str] = []
    kept: list[str] = []
    root_fd = pathsafe.open_root(bundle.rootfs)
    try:
        for path in reversed(paths):
            target = links.get(path)
            if not _is_ours(root_fd, path, target if isinstance(target, str) else None):
                if _exists(root_fd, path):
                    kept.append(f"{path} changed since ocihook made it: kept")
                continue
            try:
                if pathsafe.remove_in_root(root_fd, path):
                    removed.append(path)
            except ApplyError as e:  # a directory the container filled, a mount point
                kept.append(f"{path}: {e.message}: kept")
    finally:
        os.close(root_fd)
    try:
        os.unlink(where)
    except OSError as e:
        kept.append(f"cannot remove {where}: {e.strerror}")
    return removed, kept


def _exists(root_fd: int, path: str) -> bool:
    try:
        os.close(pathsafe.open_in_root(root_fd, path, os.O_PATH | os.O_NOFOLLOW))
    except ApplyError:
        return False
    return True
