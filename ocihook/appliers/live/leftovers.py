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
keeps ocihook's entries (a rewritten file, not a made one). A musl loader's path file
(``/etc/ld-musl-<arch>.path``, :func:`.libraries.write_musl_paths`) is recorded with the
bytes written and those it had before: the poststop hook puts the earlier bytes back (or
removes a file ocihook made) only while the file still holds exactly what ocihook wrote.
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

    from .libraries import LoaderFile

__all__ = ["RECORD_NAME", "record_created", "remove_recorded"]

#: The record's file name in the bundle directory.
RECORD_NAME = ".ocihook-created.json"
#: The record is ours and small: a larger file is not read.
_MAX_RECORD = 1 << 20
_SKIPPED = ("/dev", "/proc", "/sys")


def record_created(
    bundle: Bundle,
    paths: Sequence[str],
    links: Mapping[str, str],
    files: Sequence[LoaderFile] = (),
) -> str | None:
    """Write the record of ``paths`` (container paths made, in the order made), the
    targets of the links among them, and the loader ``files`` written (those with their
    ``written`` bytes: the bytes as latin-1 text, a lossless round trip). Returns a
    warning when it cannot be written (the container starts anyway; its files are then
    left behind), else ``None``."""
    kept = [p for p in paths if not any(p == d or p.startswith(d + "/") for d in _SKIPPED)]
    written = {
        f.path: {
            "written": f.written.decode("latin-1"),
            "previous": None if f.previous is None else f.previous.decode("latin-1"),
            "previous_stat": None if f.previous_stat is None else list(f.previous_stat),
        }
        for f in files
        if f.written is not None
    }
    if not kept and not written:
        return None
    doc: dict[str, object] = {
        "version": 1,
        "paths": kept,
        "links": {p: links[p] for p in kept if p in links},
    }
    if written:
        doc["files"] = written
    where = os.path.join(bundle.path, RECORD_NAME)
    try:
        # not durable: the bundle goes with the container; no fsync, and no guardian
        # for the instant before the rename (see oci.bundle.write_bytes_atomic)
        write_json_atomic(where, doc, indent=None, durable=False)
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
    files = doc.get("files", {}) if isinstance(doc, dict) else {}
    if not isinstance(files, dict):
        return [], [f"{where} is not a record ocihook wrote; nothing removed"]
    removed: list[str] = []
    kept: list[str] = []
    root_fd = pathsafe.open_root(bundle.rootfs)
    try:
        for path, entry in files.items():
            _restore_file(root_fd, path, entry, removed, kept)
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


def _previous_stat(entry: object) -> tuple[int, int, int] | None:
    """A record's ``previous_stat`` (``[mode, uid, gid]``) as
    :attr:`~.libraries.LoaderFile.previous_stat`; ``None`` for a record without a
    well-formed one."""
    st = entry.get("previous_stat") if isinstance(entry, dict) else None
    if (
        isinstance(st, list)
        and len(st) == 3
        and all(type(v) is int for v in st)
        and 0 <= st[0] <= 0o7777
        and all(0 <= v < 0xFFFFFFFF for v in st[1:])
    ):
        return st[0], st[1], st[2]
    return None


def _restore_file(
    root_fd: int, path: object, entry: object, removed: list[str], kept: list[str]
) -> None:
    """Put back the loader file ``path`` of the record (``entry``: ``written`` and
    ``previous``, latin-1 text, and ``previous_stat``, its permission bits, owner and
    group, where the record has them) when it still holds exactly ``written``; else keep
    it and say so in ``kept``. A removed file's path goes to ``removed``."""
    from .libraries import MAX_MUSL_PATH_BYTES, restored_mode

    written = entry.get("written") if isinstance(entry, dict) else None
    previous = entry.get("previous") if isinstance(entry, dict) else None
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or not isinstance(written, str)
        or not (previous is None or isinstance(previous, str))
    ):
        kept.append(f"{path!r}: not a file record ocihook wrote: kept")
        return
    flags = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = pathsafe.open_in_root(root_fd, path, flags)
    except ApplyError:
        return  # gone already
    try:
        st = os.fstat(fd)
        same = stat.S_ISREG(st.st_mode) and st.st_size <= MAX_MUSL_PATH_BYTES
        if same:  # a regular file: reopened for reading through the checked descriptor
            data_fd = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                same = os.pread(data_fd, MAX_MUSL_PATH_BYTES + 1, 0) == written.encode("latin-1")
            finally:
                os.close(data_fd)
    except OSError:
        same = False
    finally:
        os.close(fd)
    if not same:
        kept.append(f"{path} changed since ocihook wrote it: kept")
        return
    try:
        if previous is None:
            if pathsafe.remove_in_root(root_fd, path):
                removed.append(path)
        else:
            mode, owner = restored_mode(_previous_stat(entry))
            data = previous.encode("latin-1")
            pathsafe.write_file_in_root(root_fd, path, data, mode, owner=owner)
    except ApplyError as e:
        kept.append(f"{path}: {e.message}: kept")
