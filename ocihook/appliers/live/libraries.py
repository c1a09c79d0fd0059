"""The container's ``/etc/ld.so.cache`` rewritten with the driver libraries added
(:mod:`ocihook.linux.ldcache`), and CUDA forward compatibility: the image's ``cuda-compat``
libraries first when they are newer than the host's driver; for an image with a musl
loader, its ``/etc/ld-musl-<arch>.path`` extended with the libraries' directories
(:func:`write_loader_files`). Files are read inside the rootfs only, never executed."""

from __future__ import annotations

import os
import stat

from ...core.errors import ApplyError, OcihookError
from ...core.records import Record
from ...linux import ldcache
from ...plan.compat import CudaCompat

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc imports collections: milliseconds at start
    from collections.abc import Mapping, Sequence

    from ...linux.loaders import Loader


__all__ = [
    "LD_SO_CONF_DROP_IN",
    "MAX_COMPAT_LIBRARIES",
    "MAX_LDCACHE_BYTES",
    "MAX_MUSL_PATH_BYTES",
    "LoaderFile",
    "cuda_compat_entries",
    "file_stat",
    "ld_so_conf_dirs",
    "library_entries",
    "restore_loader_files",
    "restored_mode",
    "write_ld_so_conf",
    "write_ldcache",
    "write_loader_files",
    "write_musl_paths",
]


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


def _entry_from_fd(fd: int, path: str, directory: str) -> ldcache.CacheEntry:
    """The ``ld.so.cache`` entry of the ELF library open at ``fd`` (read with
    :mod:`ocihook.linux.elfscan`, never loaded), named ``directory/<soname>``; ``path``
    names it in errors."""
    from ...linux.elfscan import ELF_MACHINE_NAMES, dynamic_names, identify

    ident = identify(fd)
    names = dynamic_names(fd)
    machine = ELF_MACHINE_NAMES.get(ident[1]) if ident else None
    if ident is None or machine is None:
        raise ApplyError("not an ELF library of a known machine", path=path)
    soname = (names[0] if names else None) or os.path.basename(path)
    if "/" in soname or soname in (".", "..") or "\0" in soname:
        raise ApplyError("the library's soname is not a file name", path=path, value=soname)
    return ldcache.CacheEntry(soname, f"{directory}/{soname}", ldcache.abi_flags(ident[0], machine))


def _entry_for(root_fd: int, path: str, *, soname_dir: str | None = None) -> ldcache.CacheEntry:
    """The ``ld.so.cache`` entry of the library at container ``path`` (opened as a regular
    file inside the rootfs).

    Raises:
        ApplyError: missing, not an ELF library of a known machine, or a soname that is
            not a plain file name.
    """
    fd = _open_regular(root_fd, path)
    if fd is None:
        raise ApplyError("library not found in the container", path=path)
    try:
        return _entry_from_fd(fd, path, soname_dir or os.path.dirname(path))
    finally:
        os.close(fd)


def _entry_for_host(host_path: str, path: str) -> ldcache.CacheEntry:
    """The ``ld.so.cache`` entry for the container library ``path`` whose file is the host
    driver file ``host_path`` (to be bind-mounted there): its ELF header read on the host.

    Raises:
        ApplyError: the host file is missing, not a regular file, or not an ELF library.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    try:
        fd = os.open(host_path, flags)
    except OSError as e:
        raise ApplyError(f"cannot read a driver library: {e.strerror}", path=host_path) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ApplyError("a driver library is not a regular file", path=host_path)
        return _entry_from_fd(fd, host_path, os.path.dirname(path))
    finally:
        os.close(fd)


def _known_entry(path: str, flags: int) -> ldcache.CacheEntry:
    """The ``ld.so.cache`` entry of the container library ``path`` (its file name is its
    soname) with the ``flags`` the host's ``ld.so.cache`` gave it.

    Raises:
        ApplyError: ``path`` is not absolute or its file name is not a plain name.
    """
    directory, _, soname = path.rpartition("/")
    if not path.startswith("/") or soname in ("", ".", "..") or "\0" in path:
        raise ApplyError("not a library path", path=path)
    return ldcache.CacheEntry(soname, f"{directory}/{soname}", flags)


#: The most libraries read from an image's CUDA compat directory (NVIDIA's cuda-compat
#: packages ship fewer than ten): an image must not make the hook do unbounded work.
MAX_COMPAT_LIBRARIES = 64


def cuda_compat_entries(root_fd: int, compat: CudaCompat) -> list[ldcache.CacheEntry]:
    """``ld.so.cache`` entries for the image's CUDA forward-compatibility libraries, when
    :meth:`CudaCompat.decide <ocihook.plan.compat.CudaCompat.decide>` says its newest
    ``libcuda.so.<version>`` is to be used (NVIDIA CUDA compatibility guide: forward
    compatibility needs a newer user-mode driver than the kernel one). Empty otherwise.
    Each entry names the soname link when the image has one, else the file.

    The decision reads the library's ``.note.cuda.fwd_compatibility`` note when it has one
    (:func:`ocihook.linux.elfscan.cuda_compat_note`: bounded reads of a regular file opened
    inside the rootfs, links resolved within it) and falls back to the version in the file
    name when the note is missing or malformed. The decision is logged at debug level.
    """

    from ...linux import pathsafe

    try:
        dir_fd = pathsafe.open_in_root(
            root_fd, compat.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
        )
    except ApplyError:
        return []  # most images: no compat directory, nothing to log or parse
    from ...core import log
    from ...core.vocab import version_tuple

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
            parsed = version_tuple(n[len("libcuda.so.") :])
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
        from ...linux.elfscan import cuda_compat_note

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


def library_entries(
    root_fd: int,
    libraries: Sequence[str],
    sources: Mapping[str, str] | None = None,
    known: Mapping[str, int] | None = None,
) -> list[ldcache.CacheEntry]:
    """The ``ld.so.cache`` entries of ``libraries`` (container paths), in order: from
    ``known`` flags, else the host file of ``sources``, else the file in the rootfs (see
    :func:`write_ldcache` for the arguments).

    Raises:
        ApplyError: as :func:`write_ldcache` for a library.
    """
    return [
        _known_entry(lib, known[lib])
        if known and lib in known
        else _entry_for_host(sources[lib], lib)
        if sources and lib in sources
        else _entry_for(root_fd, lib)
        for lib in libraries
    ]


def write_ldcache(
    root_fd: int,
    libraries: Sequence[str],
    compat: CudaCompat | None = None,
    sources: Mapping[str, str] | None = None,
    known: Mapping[str, int] | None = None,
    *,
    entries: Sequence[ldcache.CacheEntry] | None = None,
) -> bytes | None:
    """Enter ``libraries`` in the container's ``/etc/ld.so.cache``, keeping its entries.

    Args:
        root_fd: ``O_PATH`` fd of the container rootfs.
        libraries: container paths of libraries (soname links or files) to add; each is
            opened inside the rootfs as a regular file and its soname, class and machine
            read with :mod:`ocihook.linux.elfscan` (never loaded or executed).
        compat: CUDA forward compatibility to apply (:func:`cuda_compat_entries`).
        sources: container library path -> host driver file, for libraries not yet
            mounted (spec mode's edit before the container exists): their ELF headers are
            read from the host files instead (:func:`_entry_for_host`).
        known: container library path -> ``ld.so.cache`` flags, for libraries whose
            soname is the path's file name and whose flags discovery already read from
            the host's ``ld.so.cache`` (:attr:`ContainerEdits.ldcache_flags
            <ocihook.plan.edits.ContainerEdits.ldcache_flags>`): entered as they are, no file
            read.
        entries: the entries of ``libraries`` made already (:func:`library_entries`);
            ``libraries``, ``sources`` and ``known`` are then not read.

    Returns:
        The previous cache bytes (``None`` when there was none), for rollback.

    Raises:
        ApplyError: a library cannot be opened, is not an ELF shared object of a known
            machine or has a soname that is not a plain file name, or the cache cannot be
            written. An existing cache that is not a regular file of sane size is refused
            (an image can plant a FIFO or a link to ``/proc/kmsg``); a malformed one is
            replaced, not merged.
    """
    if entries is None:
        entries = library_entries(root_fd, libraries, sources, known)
    return _write_ldcache(root_fd, compat, entries).previous or None


def _write_ldcache(
    root_fd: int, compat: CudaCompat | None, entries: Sequence[ldcache.CacheEntry]
) -> LoaderFile:
    """:func:`write_ldcache` of the library ``entries``; the cache written, with its
    bytes and :func:`file_stat` from before (``previous``: ``b""`` for an empty file)."""
    from ...linux import pathsafe

    added = list(entries)
    if compat is not None:  # after the host's: the same sonames are replaced
        added += cuda_compat_entries(root_fd, compat)
    old: bytes | None = None
    before = None
    fd = _open_regular(root_fd, "/etc/ld.so.cache")
    if fd is not None:
        try:
            st = os.fstat(fd)
            if st.st_size > MAX_LDCACHE_BYTES:
                raise ApplyError(
                    "the container's ld.so.cache is implausibly large",
                    path="/etc/ld.so.cache",
                    value=st.st_size,
                )
            # Exactly st_size bytes: an empty file, and /proc files (size 0; reading
            # /proc/kmsg as root would consume the host's kernel log), are not read.
            old = os.pread(fd, st.st_size, 0) if st.st_size else b""
            before = file_stat(st)
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
    return LoaderFile("/etc/ld.so.cache", old, None, before)


#: The drop-in :func:`write_ld_so_conf` writes (``00-``: read before the image's own, as
#: the toolkit's ``00-nvcr-*.conf``).
LD_SO_CONF_DROP_IN = "/etc/ld.so.conf.d/00-ocihook.conf"


_LD_SO_CONF_MAX_FILES = 64


_LD_SO_CONF_MAX_BYTES = 64 * 1024


def _read_in_root(root_fd: int, path: str) -> bytes | None:
    """A small regular file of the rootfs (at most 64 KiB read), ``None`` when absent or
    not a regular file; never follows a link out of the root."""
    try:
        fd = _open_regular(root_fd, path)
    except OcihookError:
        return None
    if fd is None:
        return None
    try:
        return os.pread(fd, _LD_SO_CONF_MAX_BYTES, 0)
    finally:
        os.close(fd)


def _list_in_root(root_fd: int, path: str) -> list[str] | None:
    """The names in a directory of the rootfs, ``None`` when it is not one."""
    from ...linux import pathsafe

    try:
        fd = pathsafe.open_in_root(root_fd, path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OcihookError:
        return None
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def _glob_match(name: str, pattern: str) -> bool:
    """:func:`fnmatch.fnmatchcase`: a pattern of literal characters and ``*`` (the usual
    ``include /etc/ld.so.conf.d/*.conf``) is matched here, since importing :mod:`fnmatch`
    imports :mod:`re` (milliseconds on a container's start); one with ``?`` or ``[`` goes
    to :mod:`fnmatch`."""
    if "?" in pattern or "[" in pattern:
        import fnmatch

        return fnmatch.fnmatchcase(name, pattern)
    parts = pattern.split("*")
    if len(parts) == 1:
        return name == pattern
    head, tail = parts[0], parts[-1]
    if len(name) < len(head) + len(tail) or not name.startswith(head) or not name.endswith(tail):
        return False
    pos, end = len(head), len(name) - len(tail)
    for middle in parts[1:-1]:  # leftmost placement of each is enough for '*' alone
        at = name.find(middle, pos, end)
        if at < 0:
            return False
        pos = at + len(middle)
    return True


def ld_so_conf_dirs(root_fd: int, skip: str = LD_SO_CONF_DROP_IN) -> set[str]:
    """The directories the image's ``/etc/ld.so.conf`` names, following ``include``
    lines (glob patterns, relative ones from the including file's directory, as glibc's
    ``ldconfig`` ``parse_conf``); ``hwcap`` lines and comments ignored, an old-style
    ``=TYPE`` suffix dropped. Files are read inside the rootfs (at most 64, 64 KiB each);
    ``skip`` (ocihook's own drop-in) is not read. Never raises: what cannot be read
    counts as naming nothing."""
    import posixpath

    found: set[str] = set()
    todo = ["/etc/ld.so.conf"]
    seen: set[str] = set()
    while todo and len(seen) < _LD_SO_CONF_MAX_FILES:
        path = posixpath.normpath(todo.pop(0))
        if path in seen or path == skip:
            continue
        seen.add(path)
        data = _read_in_root(root_fd, path)
        if data is None:
            continue
        for raw in data.decode("utf-8", "replace").splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("include") and line[7:8] in (" ", "\t"):
                for pattern in line[7:].split():
                    if not pattern.startswith("/"):
                        pattern = posixpath.join(posixpath.dirname(path), pattern)
                    directory, name = posixpath.split(pattern)
                    for entry in _list_in_root(root_fd, directory) or ():
                        if _glob_match(entry, name):
                            todo.append(posixpath.join(directory, entry))
                continue
            if line.startswith("hwcap"):
                continue
            for word in line.replace(",", " ").replace(":", " ").split():
                word = word.split("=", 1)[0]
                if word.startswith("/"):
                    found.add(posixpath.normpath(word))
    return found


def write_ld_so_conf(root_fd: int, libraries: Sequence[str]) -> tuple[bool, bytes | None]:
    """List the directories of ``libraries`` that the image's ``ld.so.conf`` does not
    name (:func:`ld_so_conf_dirs`) in :data:`LD_SO_CONF_DROP_IN`, one per line, mode
    0644, so that an ``ldconfig`` the image runs later keeps them in its cache (what the
    NVIDIA Container Toolkit's ``update-ldcache`` hook does with ``ld.so.conf.d``). Done
    only when the image has ``/etc/ld.so.conf.d`` (else its ``ldconfig`` would not read
    the file); nothing is written when every directory is named already.

    Returns:
        ``(written, previous)``: whether the file was written, and its previous bytes
        (``None``: there was none), for rollback.

    Raises:
        ApplyError: the file cannot be written (a hostile ``ld.so.conf.d``).
    """
    import posixpath

    from ...linux import pathsafe

    wanted = list(dict.fromkeys(posixpath.dirname(lib) for lib in libraries))
    known = ld_so_conf_dirs(root_fd)
    missing = [d for d in wanted if d and d not in known]
    if not missing or _list_in_root(root_fd, "/etc/ld.so.conf.d") is None:
        return False, None
    previous = _read_in_root(root_fd, LD_SO_CONF_DROP_IN)
    text = "# written by ocihook: driver library directories of this container\n"
    text += "".join(f"{d}\n" for d in missing)
    pathsafe.write_file_in_root(root_fd, LD_SO_CONF_DROP_IN, text.encode(), 0o644)
    return True, previous


class LoaderFile(Record):
    """A file written in the rootfs for an image's loader, and how to take it back.

    Attributes:
        path: its container path (``/etc/ld.so.cache``, ``/etc/ld-musl-x86_64.path``).
        previous: its bytes before (``None``: there was no file).
        written: the bytes written (the poststop hook restores ``previous`` only while
            the file still holds them); ``None`` for ``/etc/ld.so.cache``, which keeps
            ocihook's entries (their files are gone with the container's mounts).
        previous_stat: the file before: its permission bits (``st_mode & 0o7777``), owner
            and group, which a rollback gives the restored file (the new one is written
            0644 and owned by the writer, as ``ldconfig`` writes it); ``None`` when there
            was no file.
    """

    path: str
    previous: bytes | None
    written: bytes | None
    previous_stat: tuple[int, int, int] | None = None


def file_stat(st: os.stat_result) -> tuple[int, int, int]:
    """A file's permission bits (``st_mode & 0o7777``), owner and group: what
    :attr:`LoaderFile.previous_stat` keeps."""
    return (st.st_mode & 0o7777, st.st_uid, st.st_gid)


def restored_mode(previous_stat: tuple[int, int, int] | None) -> tuple[int, tuple[int, int] | None]:
    """The permission bits and ``(uid, gid)`` owner a restored loader file gets from its
    :attr:`LoaderFile.previous_stat`; ``0o644`` and the writer's own without one."""
    if previous_stat is None:
        return 0o644, None
    mode, uid, gid = previous_stat
    return mode, (uid, gid)


#: Largest musl path file read (musl's own are a few lines).
MAX_MUSL_PATH_BYTES = 64 * 1024


def _read_loader_file(
    root_fd: int, path: str, limit: int
) -> tuple[bytes | None, tuple[int, int, int] | None]:
    """The bytes of the regular file ``path`` in the rootfs and its :func:`file_stat`
    (``(None, None)``: absent).

    Raises:
        ApplyError: not a regular file, or larger than ``limit`` bytes.
    """
    fd = _open_regular(root_fd, path)
    if fd is None:
        return None, None
    try:
        st = os.fstat(fd)
        if st.st_size > limit:
            raise ApplyError(
                "the container's file is implausibly large", path=path, value=st.st_size
            )
        return (os.pread(fd, st.st_size, 0) if st.st_size else b""), file_stat(st)
    finally:
        os.close(fd)


def write_musl_paths(
    root_fd: int, loaders: Sequence[Loader], entries: Sequence[ldcache.CacheEntry]
) -> list[LoaderFile]:
    """Make each musl loader of ``loaders`` search the directories of the ``entries``
    of its ABI: append them to its ``/etc/ld-musl-<arch>.path``, made with musl's default
    search path first when absent (:func:`ocihook.linux.loaders.musl_path_with`), through
    in-root descriptor operations. A loader whose ABI ``ld.so.cache`` flags are unknown,
    or whose directories are searched already, gets nothing written.

    Returns:
        The files written, in order, each with its previous bytes (for rollback and the
        poststop record).

    Raises:
        ApplyError: a path file that is not a regular file or larger than
            :data:`MAX_MUSL_PATH_BYTES`, or that cannot be written.
    """
    from ...linux import pathsafe
    from ...linux.elfscan import ELF_MACHINE_NAMES
    from ...linux.loaders import musl_path_with

    out: list[LoaderFile] = []
    for loader in loaders:
        path = loader.path_file
        machine = ELF_MACHINE_NAMES.get(loader.machine)
        if path is None or machine is None:
            continue
        try:
            abi = ldcache.abi_flags(loader.elf_class, machine) & ldcache.FLAG_REQUIRED_MASK
        except ValueError:
            continue
        dirs = [
            os.path.dirname(e.path)
            for e in entries
            if e.flags & ldcache.FLAG_REQUIRED_MASK == abi and e.path.startswith("/")
        ]
        previous, before = _read_loader_file(root_fd, path, MAX_MUSL_PATH_BYTES)
        try:
            new = musl_path_with(previous, dirs)
        except ValueError as e:
            raise ApplyError(str(e), path=path) from None
        if new is None:
            continue
        pathsafe.write_file_in_root(root_fd, path, new, 0o644)
        out.append(LoaderFile(path, previous, new, before))
    return out


def write_loader_files(
    root_fd: int,
    rootfs: str,
    libraries: Sequence[str],
    compat: CudaCompat | None = None,
    sources: Mapping[str, str] | None = None,
    known: Mapping[str, int] | None = None,
) -> list[LoaderFile]:
    """Make every loader of the image at ``rootfs`` (:func:`ocihook.linux.loaders.
    find_loaders`) find ``libraries``: their entries in ``/etc/ld.so.cache``
    (:func:`write_ldcache`, always: glibc reads it, and tools in any image may), then
    each musl loader's path file (:func:`write_musl_paths`). Arguments as
    :func:`write_ldcache`; ``root_fd`` is ``rootfs`` opened with
    :func:`ocihook.linux.pathsafe.open_root`.

    Returns:
        The files written (the cache first), each with its previous bytes. When a step
        fails, the files written before it are put back before the error is raised.

    Raises:
        ApplyError: see :func:`write_ldcache` and :func:`write_musl_paths`.
    """
    from ...linux.loaders import find_loaders

    entries = library_entries(root_fd, libraries, sources, known)
    done = [_write_ldcache(root_fd, compat, entries)]
    try:
        done += write_musl_paths(root_fd, find_loaders(rootfs), entries)
    except BaseException:
        restore_loader_files(root_fd, done)
        raise
    return done


def restore_loader_files(root_fd: int, files: Sequence[LoaderFile]) -> None:
    """Put back what :func:`write_loader_files` replaced, newest first: each file's
    previous bytes, permission bits, owner and group (:attr:`LoaderFile.previous_stat`),
    or remove a file that was not there. Best effort (rollback)."""
    from ...linux import pathsafe

    for f in reversed(files):
        try:
            if f.previous is None:
                pathsafe.remove_in_root(root_fd, f.path)
            else:
                mode, owner = restored_mode(f.previous_stat)
                pathsafe.write_file_in_root(root_fd, f.path, f.previous, mode, owner=owner)
        except (OSError, OcihookError):
            pass
