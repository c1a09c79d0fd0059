"""The container's ``/etc/ld.so.cache`` rewritten with the driver libraries added
(:mod:`ocihook.linux.ldcache`), and CUDA forward compatibility: the image's ``cuda-compat``
libraries first when they are newer than the host's driver. Files are read inside the rootfs
only, never executed."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence

from ...core.errors import ApplyError, OcihookError
from ...linux import ldcache
from ...plan import CudaCompat

TYPE_CHECKING = False
if TYPE_CHECKING:
    pass


__all__ = ["MAX_COMPAT_LIBRARIES", "MAX_LDCACHE_BYTES", "cuda_compat_entries", "write_ldcache"]


#: Largest container ``/etc/ld.so.cache`` read (glibc's own caches are far smaller).
MAX_LDCACHE_BYTES = 64 << 20


def _open_regular(root_fd: int, path: str) -> int | None:
    """Open a regular file inside the rootfs without blocking (a FIFO planted by the image
    must not hang the hook); ``None`` when nothing is there.

    Raises:
        ApplyError: it exists but is not a regular file, or cannot be opened.
    """

    from ...linux import pathsafe

    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = pathsafe.open_in_root(root_fd, path, flags)
    except ApplyError as e:
        if isinstance(e.__cause__, FileNotFoundError):
            return None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise ApplyError(
            "not a regular file in the container", path=path, hint="the image is malformed"
        )
    return fd


def _entry_for(root_fd: int, path: str, *, soname_dir: str | None = None) -> ldcache.CacheEntry:
    """The ``ld.so.cache`` entry of the library at container ``path`` (read as a regular
    file inside the rootfs with :mod:`ocihook.linux.elfscan`, never loaded).

    Raises:
        ApplyError: missing, not an ELF library of a known machine, or a soname that is
            not a plain file name.
    """
    from ...linux.elfscan import ELF_MACHINE_NAMES, dynamic_names, identify

    fd = _open_regular(root_fd, path)
    if fd is None:
        raise ApplyError("library not found in the container", path=path)
    try:
        ident = identify(fd)
        names = dynamic_names(fd)
    finally:
        os.close(fd)
    machine = ELF_MACHINE_NAMES.get(ident[1]) if ident else None
    if ident is None or machine is None:
        raise ApplyError("not an ELF library of a known machine", path=path)
    soname = (names[0] if names else None) or os.path.basename(path)
    if "/" in soname or soname in (".", "..") or "\0" in soname:
        raise ApplyError("the library's soname is not a file name", path=path, value=soname)
    directory = soname_dir or os.path.dirname(path)
    return ldcache.CacheEntry(soname, f"{directory}/{soname}", ldcache.abi_flags(ident[0], machine))


#: The most libraries read from an image's CUDA compat directory (NVIDIA's cuda-compat
#: packages ship fewer than ten): an image must not make the hook do unbounded work.
MAX_COMPAT_LIBRARIES = 64


def cuda_compat_entries(root_fd: int, compat: CudaCompat) -> list[ldcache.CacheEntry]:
    """``ld.so.cache`` entries for the image's CUDA forward-compatibility libraries, when
    :meth:`CudaCompat.decide <ocihook.plan.CudaCompat.decide>` says its newest
    ``libcuda.so.<version>`` is to be used (NVIDIA CUDA compatibility guide: forward
    compatibility needs a newer user-mode driver than the kernel one). Empty otherwise.
    Each entry names the soname link when the image has one, else the file.

    The decision reads the library's ``.note.cuda.fwd_compatibility`` note when it has one
    (:func:`ocihook.linux.elfscan.cuda_compat_note`: bounded reads of a regular file opened
    inside the rootfs, links resolved within it) and falls back to the version in the file
    name when the note is missing or malformed. The decision is logged at debug level.
    """

    from ...core import log
    from ...linux import pathsafe
    from ...linux.elfscan import cuda_compat_note
    from ...plan import _version_tuple

    try:
        dir_fd = pathsafe.open_in_root(
            root_fd, compat.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        )
    except ApplyError:
        return []
    try:
        names = sorted(os.listdir(dir_fd))
        regular = {
            n
            for n in names
            if stat.S_ISREG(os.stat(n, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        }
    finally:
        os.close(dir_fd)
    versions = {}
    for n in regular:
        if n.startswith("libcuda.so."):
            parsed = _version_tuple(n[len("libcuda.so.") :])
            if parsed is not None:
                versions[n] = parsed
    if not versions:
        log.debug(
            "cuda compat: not used", reason="no libcuda.so.<version> file", dir=compat.directory
        )
        return []
    newest = max(versions, key=lambda n: (versions[n], n))
    note = None
    try:
        fd = _open_regular(root_fd, f"{compat.directory}/{newest}")
    except ApplyError:
        fd = None
    if fd is not None:
        try:
            note = cuda_compat_note(fd)
        finally:
            os.close(fd)
    used, why = compat.decide(newest[len("libcuda.so.") :], note)
    log.debug(
        "cuda compat: " + ("used" if used else "not used"),
        reason=why,
        library=f"{compat.directory}/{newest}",
        host_driver=compat.host_driver or compat.host_major,
    )
    if not used:
        return []
    out = []
    candidates = [n for n in sorted(regular) if n.startswith("lib") and ".so." in n]
    for n in candidates[:MAX_COMPAT_LIBRARIES]:
        try:
            entry = _entry_for(root_fd, f"{compat.directory}/{n}")
        except ApplyError:
            continue  # not a library ld.so could use: the image's business, skipped
        if entry.soname not in names:  # no soname link in the image: the file itself
            entry = ldcache.CacheEntry(n, f"{compat.directory}/{n}", entry.flags)
        out.append(entry)
    return out


def write_ldcache(
    root_fd: int, libraries: Sequence[str], compat: CudaCompat | None = None
) -> bytes | None:
    """Enter ``libraries`` in the container's ``/etc/ld.so.cache``, keeping its entries.

    Args:
        root_fd: ``O_PATH`` fd of the container rootfs.
        libraries: container paths of libraries (soname links or files) to add; each is
            opened inside the rootfs as a regular file and its soname, class and machine
            read with :mod:`ocihook.linux.elfscan` (never loaded or executed).
        compat: CUDA forward compatibility to apply (:func:`cuda_compat_entries`).

    Returns:
        The previous cache bytes (``None`` when there was none), for rollback.

    Raises:
        ApplyError: a library cannot be opened, is not an ELF shared object of a known
            machine or has a soname that is not a plain file name, or the cache cannot be
            written. An existing cache that is not a regular file of sane size is refused
            (an image can plant a FIFO or a link to ``/proc/kmsg``); a malformed one is
            replaced, not merged.
    """
    from ...linux import pathsafe

    added = [_entry_for(root_fd, lib) for lib in libraries]
    if compat is not None:  # after the host's: the same sonames are replaced
        added += cuda_compat_entries(root_fd, compat)
    old: bytes | None = None
    fd = _open_regular(root_fd, "/etc/ld.so.cache")
    if fd is not None:
        try:
            size = os.fstat(fd).st_size
            if size > MAX_LDCACHE_BYTES:
                raise ApplyError(
                    "the container's ld.so.cache is implausibly large",
                    path="/etc/ld.so.cache",
                    value=size,
                )
            # Exactly st_size bytes: an empty file, and /proc files (size 0; reading
            # /proc/kmsg as root would consume the host's kernel log), are not read.
            old = os.pread(fd, size, 0) if size else None
        finally:
            os.close(fd)
    existing: tuple[ldcache.CacheEntry, ...] = ()
    if old:
        try:
            existing = ldcache.parse(old, path="/etc/ld.so.cache")
        except OcihookError:
            existing = ()
    # entries our writer cannot represent (a glibc-hwcaps flag without its subdirectory,
    # only found in damaged caches) are dropped rather than failing the start
    kept = [e for e in existing if not (e.hwcap >> 62 & 1 and e.hwcaps_subdir is None)]
    data = ldcache.build(ldcache.merge(kept, added))
    pathsafe.write_file_in_root(root_fd, "/etc/ld.so.cache", data, 0o644)
    return old
