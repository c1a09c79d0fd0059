"""Hook mode: apply a plan to a container that the runtime is creating.

:func:`inject` runs as a ``prestart`` or ``createRuntime`` hook (runtime namespaces, host
pid of the container init in the state JSON), and does what libnvidia-container's
``nvidia-container-cli configure`` does:

1. adds cgroup v1 ``devices.allow`` rules for exactly the planned device nodes;
2. in the host mount namespace, clones each driver library into a detached mount
   (``open_tree(OPEN_TREE_CLONE)``) and makes it read-only, nosuid, nodev
   (``mount_setattr``) — the sources are resolved on the host, never in the container;
3. enters the container's mount namespace (``setns``) and, with every path resolved
   *inside* the rootfs (``openat2(RESOLVE_IN_ROOT)``, see :mod:`ocihook.linux.pathsafe`):
   creates the device nodes, attaches the library mounts onto new empty files
   (``move_mount``), creates the soname links and rewrites ``/etc/ld.so.cache`` with the
   libraries added (:mod:`ocihook.linux.ldcache`) — nothing from the container's rootfs is ever
   executed, and the container's environment is never used;
4. returns to the host mount namespace.

If any step fails, everything done so far is undone (mounts detached, nodes, links and
files removed, ``ld.so.cache`` restored, cgroup rules denied again) and
:class:`~ocihook.core.errors.ApplyError` is raised; the runtime then aborts the start.

:func:`create_symlinks_hook` and :func:`update_ldcache_hook` are the ``createContainer``
hooks that spec mode registers; they run in the container's mount namespace already.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Sequence

from ..core.errors import ApplyError, OcihookError
from ..core.hostroot import HostRoot
from ..linux import ldcache
from ..oci.bundle import Bundle, State
from ..plan import CgroupRule, CudaCompat, Plan, ProcMask
from ..request import Request

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ..request import DrmRequest
    from .spec import Options

__all__ = [
    "capability_files",
    "caps_minors",
    "create_container_hook",
    "create_symlinks_hook",
    "device_cgroup_dir",
    "gpu_dirs_of_devices",
    "inject",
    "update_ldcache_hook",
    "write_ldcache",
]

_Undo = Callable[[], object]


def _partial(fn: Callable[..., object], *args: object) -> _Undo:
    """``fn`` bound to ``args`` (functools.partial without importing functools)."""
    return lambda: fn(*args)


def _proc_path(root: HostRoot, pid: int, name: str) -> str:
    return root.proc(f"{pid}/{name}")


def device_cgroup_dir(pid: int, *, proc: str = "/proc") -> str:
    """Host directory of the cgroup v1 ``devices`` controller that ``pid`` belongs to.

    Reads ``<proc>/<pid>/cgroup`` (the ``devices`` line) and ``<proc>/self/mountinfo``
    (where the ``devices`` hierarchy is mounted; ``proc(5)``).

    Raises:
        ApplyError: no cgroup v1 ``devices`` controller (a pure cgroup v2 host, which needs
            the eBPF device program support of a later version; use spec mode or
            ``--no-cgroups``), or the files cannot be read.
    """
    cgroup_file = f"{proc}/{pid}/cgroup"
    try:
        with open(cgroup_file) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ApplyError(
            f"cannot read the container's cgroup: {e.strerror}", path=cgroup_file
        ) from None
    rel = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "devices" in parts[1].split(","):
            rel = parts[2]
            break
    if rel is None:
        raise ApplyError(
            "the container has no cgroup v1 devices controller",
            path=cgroup_file,
            hint="on a cgroup v2 host use spec mode (ocihook edit), or --no-cgroups",
        )
    mountinfo = f"{proc}/self/mountinfo"
    try:
        with open(mountinfo) as f:
            mounts = f.read().splitlines()
    except OSError as e:
        raise ApplyError(f"cannot read mountinfo: {e.strerror}", path=mountinfo) from None
    for line in mounts:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        fstype, _source, *opts = right.split()
        if fstype == "cgroup" and opts and "devices" in opts[0].split(","):
            mount_root, mount_point = fields[3], fields[4]
            # The hierarchy's root seen through this mount is mount_root.
            if rel.startswith(mount_root.rstrip("/") + "/") or rel == mount_root:
                rel_in = rel[len(mount_root.rstrip("/")) :]
            else:
                rel_in = rel
            return os.path.normpath(mount_point + "/" + rel_in.lstrip("/"))
    raise ApplyError(
        "the cgroup v1 devices hierarchy is not mounted",
        path=mountinfo,
        hint="use --no-cgroups, or spec mode (ocihook edit)",
    )


def _rule_text(rule: CgroupRule) -> str:
    major = "*" if rule.major is None else str(rule.major)
    minor = "*" if rule.minor is None else str(rule.minor)
    return f"{rule.type} {major}:{minor} {rule.access}"


def _write_cgroup(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _list_permits(listing: Sequence[str], rule: CgroupRule) -> bool:
    """Whether a cgroup v1 ``devices.list`` (lines ``c 195:0 rw``, ``a *:* rwm``) already
    allows ``rule``'s access (kernel ``security/device_cgroup.c``: the list shows the
    allowed exceptions, or ``a *:* rwm`` for a cgroup that allows everything)."""
    for line in listing:
        parts = line.split()
        if len(parts) != 3:
            continue
        kind, numbers, access = parts
        major, _, minor = numbers.partition(":")
        if kind not in ("a", rule.type):
            continue
        if kind != "a":
            if major != "*" and (rule.major is None or major != str(rule.major)):
                continue
            if minor != "*" and (rule.minor is None or minor != str(rule.minor)):
                continue
        if set(rule.access) <= set(access):
            return True
    return False


def _allow_devices(cgroup_dir: str, rules: Sequence[CgroupRule], undo: list[_Undo]) -> None:
    """Allow ``rules`` in the cgroup v1 ``devices`` directory of the container.

    A rule the cgroup already allows is not written (and so never denied again on undo:
    the undo must not take away access the container had before ocihook ran). The
    hierarchy's root is refused: a container in the root devices cgroup would make these
    writes change every process's device access.

    Raises:
        ApplyError: the cgroup is the hierarchy root, or a write failed.
    """
    allow = os.path.join(cgroup_dir, "devices.allow")
    deny = os.path.join(cgroup_dir, "devices.deny")
    if not os.path.exists(os.path.join(cgroup_dir, "..", "devices.list")):
        raise ApplyError(
            "the container process is in the root devices cgroup",
            path=cgroup_dir,
            hint="a container must have a cgroup of its own; is the state's pid a container?",
        )
    try:
        with open(os.path.join(cgroup_dir, "devices.list")) as f:
            listing = f.read().splitlines()
    except OSError as e:
        raise ApplyError(f"cannot read the device cgroup: {e.strerror}", path=cgroup_dir) from None
    for rule in rules:
        if _list_permits(listing, rule):
            continue
        text = _rule_text(rule)
        try:
            _write_cgroup(allow, text)
        except OSError as e:
            raise ApplyError(f"cannot allow device {text!r}: {e.strerror}", path=allow) from None
        undo.append(_partial(_write_cgroup, deny, text))


def _own_v1_cgroup(v1: str) -> bool:
    """Whether ``v1`` is a cgroup v1 devices directory of the container's own: it exists
    and is not the hierarchy's root."""
    return os.path.isfile(os.path.join(v1, "devices.list")) and os.path.isfile(
        os.path.join(v1, "..", "devices.list")
    )


def _allow_in_cgroups(pid: int, rules: Sequence[CgroupRule], undo: list[_Undo]) -> None:
    """Let the container of ``pid`` use the devices of ``rules`` on both cgroup versions.

    cgroup v1 (its ``devices`` controller): ``devices.allow`` (:func:`_allow_devices`).
    cgroup v2: the eBPF device program(s) attached to the container's cgroup get allow
    rules prepended (:func:`ocihook.linux.cgroupv2.add_device_rules`: the new program is
    attached before the old one is detached). On the hybrid layout both apply — the
    kernel runs the cgroup2 programs, then the v1 check — and whichever has nothing
    (no v1 controller, or no program attached) is skipped. A cgroup2 root is never
    touched.

    Raises:
        ApplyError: neither version controls the process's devices, or a step failed.
    """
    from ..linux import cgroupv2

    cg2 = cgroupv2.container_cgroup2_dir(pid)
    if cg2 is not None and not os.path.exists(os.path.join(cg2, "..", "cgroup.controllers")):
        cg2 = None  # the hierarchy's root: not the container's own cgroup
    try:
        v1: str | None = device_cgroup_dir(pid)
    except ApplyError:
        if cg2 is None:
            raise
        v1 = None
    if v1 is not None and cg2 is not None and not _own_v1_cgroup(v1):
        v1 = None  # a cgroup2 container whose v1 membership is the host's root: leave it
    if v1 is not None:
        _allow_devices(v1, rules, undo)
    if cg2 is not None:
        undo.append(cgroupv2.add_device_rules(cg2, rules))


def _run_undo(undo: list[_Undo]) -> None:
    for fn in reversed(undo):
        try:  # noqa: SIM105 (contextlib is not imported on this path)
            fn()
        except (OSError, OcihookError):
            pass  # best effort: the runtime tears the container down after a failed hook
    undo.clear()


#: Largest container ``/etc/ld.so.cache`` read (glibc's own caches are far smaller).
MAX_LDCACHE_BYTES = 64 << 20


def _open_regular(root_fd: int, path: str) -> int | None:
    """Open a regular file inside the rootfs without blocking (a FIFO planted by the image
    must not hang the hook); ``None`` when nothing is there.

    Raises:
        ApplyError: it exists but is not a regular file, or cannot be opened.
    """
    import stat

    from ..linux import pathsafe

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
    from ..linux.elfscan import ELF_MACHINE_NAMES, dynamic_names, identify

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
    import stat

    from ..core import log
    from ..linux import pathsafe
    from ..linux.elfscan import cuda_compat_note
    from ..plan import _version_tuple

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
    from ..linux import pathsafe

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
    from ..linux import pathsafe

    try:
        fd = pathsafe.open_in_root(root_fd, path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OcihookError:
        return None
    try:
        return sorted(os.listdir(fd))
    finally:
        os.close(fd)


def ld_so_conf_dirs(root_fd: int, skip: str = LD_SO_CONF_DROP_IN) -> set[str]:
    """The directories the image's ``/etc/ld.so.conf`` names, following ``include``
    lines (glob patterns, relative ones from the including file's directory, as glibc's
    ``ldconfig`` ``parse_conf``); ``hwcap`` lines and comments ignored, an old-style
    ``=TYPE`` suffix dropped. Files are read inside the rootfs (at most 64, 64 KiB each);
    ``skip`` (ocihook's own drop-in) is not read. Never raises: what cannot be read
    counts as naming nothing."""
    import fnmatch
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
                        if fnmatch.fnmatchcase(entry, name):
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

    from ..linux import pathsafe

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


def _parse_links(links: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for spec in links:
        target, sep, link = spec.partition("::")
        if not sep or not target or not link.startswith("/"):
            raise ApplyError(
                "a link must be TARGET::LINK with an absolute LINK", field="--link", value=spec
            )
        out.append((target, link))
    return out


def create_container_hook(
    bundle: Bundle,
    links: Sequence[str] = (),
    libraries: Sequence[str] = (),
    proc_mask: ProcMask | None = None,
    cuda_compat: CudaCompat | None = None,
    ld_so_conf: bool = False,
) -> None:
    """createContainer hook: create ``TARGET::LINK`` links inside the bundle's rootfs, then
    enter ``libraries`` in its ``/etc/ld.so.cache`` (with ``ld_so_conf``, also list their
    directories in an ``ld.so.conf.d`` drop-in: :func:`write_ld_so_conf`); if a step
    fails, the links made, the drop-in and the cache are restored before
    :class:`ApplyError` is raised.

    Runs in the container's mount namespace before ``pivot_root``, so the rootfs is at
    its host path. Every link is made relative to an in-root directory descriptor. Last,
    with ``proc_mask``, ``/proc/driver/nvidia`` is masked (:func:`mask_proc_driver`).

    Raises:
        ApplyError: malformed ``--link``, a link that cannot be created (a directory in the
            way, a hostile path), or see :func:`write_ldcache`.
    """
    from ..linux import pathsafe

    pairs = _parse_links(links)
    root_fd = pathsafe.open_root(bundle.rootfs)
    created: list[str] = []
    replaced: list[tuple[str, str]] = []
    undo: list[_Undo] = []
    gpu_fds: dict[str, int] = {}
    try:
        for target, link in pairs:
            previous = pathsafe.symlink_in_root(root_fd, link, target, created=created)
            if previous is not None:
                replaced.append((link, previous))
        if libraries and ld_so_conf:
            written, before = write_ld_so_conf(root_fd, libraries)
            if written and before is None:
                undo.append(_partial(pathsafe.remove_in_root, root_fd, LD_SO_CONF_DROP_IN))
            elif written:
                undo.append(
                    _partial(
                        pathsafe.write_file_in_root, root_fd, LD_SO_CONF_DROP_IN, before, 0o644
                    )
                )
        if libraries:
            old = write_ldcache(root_fd, libraries, cuda_compat)
            if old is None:
                undo.append(_partial(pathsafe.remove_in_root, root_fd, "/etc/ld.so.cache"))
            else:
                undo.append(
                    _partial(pathsafe.write_file_in_root, root_fd, "/etc/ld.so.cache", old, 0o644)
                )
        if proc_mask is not None:
            gpu_fds = clone_gpu_proc_dirs(proc_mask)
            devices = _config_devices(bundle.config)
            minors = caps_minors([(d.get("path"), d.get("minor")) for d in devices])
            files = read_proc_files(proc_mask.host_dir, minors)
            mask_proc_driver(root_fd, files, gpu_fds, undo)
    except (OSError, OcihookError) as e:
        _run_undo(undo)
        for link, previous in reversed(replaced):
            try:  # noqa: SIM105 (contextlib is not imported on this path)
                pathsafe.symlink_in_root(root_fd, link, previous)
            except (OSError, OcihookError):
                pass
        for path in reversed(created):
            try:  # noqa: SIM105
                pathsafe.remove_in_root(root_fd, path)
            except (OSError, OcihookError):
                pass
        if isinstance(e, OcihookError):
            raise
        raise ApplyError(f"cannot change the container: {e.strerror}", path=bundle.rootfs) from None
    finally:
        for fd in gpu_fds.values():
            os.close(fd)
        os.close(root_fd)


def create_symlinks_hook(bundle: Bundle, links: Sequence[str]) -> None:
    """createContainer hook: create ``TARGET::LINK`` links (see
    :func:`create_container_hook`)."""
    create_container_hook(bundle, links, ())


def update_ldcache_hook(bundle: Bundle, libraries: Sequence[str]) -> None:
    """createContainer hook: add ``libraries`` to the rootfs's ``/etc/ld.so.cache`` (see
    :func:`write_ldcache`)."""
    create_container_hook(bundle, (), libraries)


def _status_field(name: str) -> list[str]:
    """A field of ``/proc/self/status`` as words (``proc(5)``)."""
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == name:
                return value.split()
    return []


def _parent_pid() -> int:
    """The host pid of the hook's parent: in ``createContainer`` the runtime's process
    inside the new container, whose host pid the state does not give (runc says 1, crun
    0). ``os.getppid()`` would answer in the container's pid namespace; the ``PPid`` of
    ``/proc/self/status`` answers in the namespace of the procfs mounted at ``/proc``,
    which before ``pivot_root`` is still the host's."""
    words = _status_field("PPid")
    return int(words[0]) if words and words[0].isdigit() else 0


def inject(
    state: State,
    bundle: Bundle,
    request: Request,
    root: HostRoot,
    *,
    cgroups: bool = True,
    stage: str = "prestart",
    options: Options | None = None,
    drm_requests: Sequence[DrmRequest] = (),
) -> Plan:
    """Hook mode: give the container being created what ``request`` asks for.

    Args:
        state: the state JSON the runtime wrote on stdin.
        bundle: the container's bundle.
        request: what it asks for (not void).
        root: the host to read.
        cgroups: add device cgroup rules (off for rootless containers).
        stage: ``prestart`` or ``createRuntime`` (runtime namespaces; ``state.pid`` is the
            host pid of the container init, whose mount namespace is entered), or
            ``createContainer`` (already in the container's mount namespace, before
            ``pivot_root``; the host pid is the hook's parent — runc reports 1 and crun 0
            in the state; OCI runtime-spec ``config.md`` "POSIX-platform Hooks").
        options: the operator's settings.
        drm_requests: the container's AMD and Intel requests
            (:func:`ocihook.request.drm_requests_from_spec`).

    Returns:
        The plan that was applied. A live process's supplementary groups cannot change:
        when the plan's ``additional_gids`` are not all among the process user's groups in
        ``config.json`` (a non-root user), a warning says so.

    Raises:
        StateError: no usable container process (see :func:`_check_container_pid`).
        RequestError, DiscoveryError: as in planning.
        ApplyError: a step failed; everything done was undone first.
    """
    from ..core.errors import StateError
    from ..linux import pathsafe
    from ..linux import syscalls as _linux
    from .spec import Options, plan_for_bundle

    if not os.path.isdir(bundle.rootfs):
        raise ApplyError(
            "the container rootfs is not a directory",
            path=bundle.rootfs,
            hint="check root.path in the bundle's config.json",
        )
    inside = stage == "createContainer"
    if inside:
        pid = _parent_pid()
        _check_inside_container(pid)
    else:
        pid = state.pid
        if pid <= 1:
            raise StateError(
                "the state has no host pid of the container process",
                path="<stdin>",
                field="pid",
                value=pid,
                hint="use the createContainer stage with this runtime, or prestart",
            )
        _check_container_pid(pid)
    plan = plan_for_bundle(
        bundle, request, root, options or Options(), f"hook {stage}", drm_requests
    )
    plan = _check_groups(bundle, plan)
    edits = plan.edits
    root_ids = None if inside else _container_root_ids(pid)
    undo: list[_Undo] = []
    tree_fds: list[int] = []
    node_fds: list[int] | None = None
    gpu_fds: dict[str, int] = {}
    proc_files: dict[str, bytes] = {}
    host_ns = -1
    root_fd = -1
    try:
        if cgroups and edits.cgroup_rules:
            _allow_in_cgroups(pid, edits.cgroup_rules, undo)
        if edits.proc_mask is not None:
            minors = caps_minors([(n.path, n.minor) for n in edits.device_nodes])
            proc_files = read_proc_files(edits.proc_mask.host_dir, minors)
            gpu_fds = clone_gpu_proc_dirs(edits.proc_mask)
        for m in edits.mounts:
            try:
                tree_fds.append(
                    _linux.bind_mount_detached(
                        m.source,
                        readonly="ro" in m.options,
                        nosuid="nosuid" in m.options,
                        nodev="nodev" in m.options,
                        noexec="noexec" in m.options,
                    )
                )
            except OSError as e:
                raise ApplyError(f"cannot clone driver file: {e.strerror}", path=m.source) from None
        if root_ids is not None:
            node_fds = []
            for n in edits.device_nodes:
                try:
                    node_fds.append(
                        _linux.bind_mount_detached(
                            n.host_path, readonly=False, nosuid=True, nodev=False, noexec=True
                        )
                    )
                except OSError as e:
                    raise ApplyError(
                        f"cannot clone the host device node: {e.strerror}",
                        path=n.host_path,
                        hint="a container with a user namespace gets the host's nodes "
                        "bind-mounted; they must exist under the dev root",
                    ) from None
        if not inside:
            host_ns = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            ns_path = _proc_path(HostRoot(), pid, "ns/mnt")
            try:
                ns_fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                raise ApplyError(
                    f"cannot open the container's mount namespace: {e.strerror}", path=ns_path
                ) from None
            try:
                _linux.setns(ns_fd, _linux.CLONE_NEWNS)
            except OSError as e:
                raise ApplyError(
                    f"cannot enter mount namespace: {e.strerror}", path=ns_path
                ) from None
            finally:
                os.close(ns_fd)
            undo.append(lambda: _linux.setns(host_ns, _linux.CLONE_NEWNS))
        root_fd = pathsafe.open_root(bundle.rootfs)
        if root_ids is not None:  # files the container's user namespace can own
            old_ids = _linux.set_fs_ids(*root_ids)
            try:
                _apply_in_container(root_fd, bundle.rootfs, plan, tree_fds, undo, node_fds)
            finally:
                _linux.set_fs_ids(*old_ids)
        else:
            _apply_in_container(root_fd, bundle.rootfs, plan, tree_fds, undo)
        if edits.proc_mask is not None:
            mask_proc_driver(root_fd, proc_files, gpu_fds, undo)
        if not inside:  # success: back to the host namespace, keep the changes
            _linux.setns(host_ns, _linux.CLONE_NEWNS)
        undo.clear()
    except BaseException as e:
        _run_undo(undo)
        from ..core import log

        log.error("hook failed, changes undone", error=str(e) or type(e).__name__)
        raise
    finally:
        for fd in (*tree_fds, *gpu_fds.values(), *(node_fds or ())):
            os.close(fd)
        if root_fd >= 0:
            os.close(root_fd)
        if host_ns >= 0:
            os.close(host_ns)
    return plan


def _check_groups(bundle: Bundle, plan: Plan) -> Plan:
    """``plan`` with a warning added when its ``additional_gids`` are not all groups of the
    container's process user (``process.user`` of ``config.json``): the runtime has set
    the groups from the file it read before the hook ran, so the hook cannot add them, and
    a non-root user will not open the nodes. uid 0 needs none of them."""
    process = bundle.config.get("process")
    user = process.get("user") if isinstance(process, dict) else None
    user = user if isinstance(user, dict) else {}
    if not plan.edits.additional_gids or user.get("uid", 0) == 0:
        return plan
    have = {user.get("gid", 0)}
    extra = user.get("additionalGids")
    if isinstance(extra, list):
        have.update(extra)
    missing = [g for g in plan.edits.additional_gids if g not in have]
    if not missing:
        return plan
    warning = (
        f"the container user {user.get('uid')} lacks the groups {missing} of its GPU nodes and "
        "a hook cannot add groups to a created container: use spec mode (ocihook edit) or "
        "list them in process.user.additionalGids"
    )
    from ..core import log

    log.info("warning", text=warning)
    return Plan(
        plan.driver_version,
        plan.gpus,
        plan.capabilities,
        plan.edits,
        (*plan.warnings, warning),
        plan.drm_gpus,
    )


def _container_root_ids(pid: int) -> tuple[int, int] | None:
    """The host uid and gid of the container's root when the container has a user
    namespace of its own (``/proc/<pid>/uid_map``, ``gid_map``: ``inside outside count``
    lines, ``user_namespaces(7)``), else ``None``.

    Raises:
        ApplyError: the namespace maps no root.
    """
    try:
        if os.stat(f"/proc/{pid}/ns/user").st_ino == os.stat("/proc/self/ns/user").st_ino:
            return None
        ids = []
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}") as f:
                for line in f:
                    inside, outside, _count = (int(x) for x in line.split())
                    if inside == 0:
                        ids.append(outside)
                        break
    except (OSError, ValueError) as e:
        raise ApplyError(f"cannot read the container's user namespace: {e}") from None
    if len(ids) != 2:
        raise ApplyError("the container's user namespace maps no root user", value=pid)
    return ids[0], ids[1]


def _check_inside_container(pid: int) -> None:
    """For ``createContainer``: ocihook must already be in the container's namespaces —
    its parent's mount namespace, and a pid namespace of the container's own (``NSpid``
    of ``/proc/self/status`` has two levels or more) — never in the host's.

    Raises:
        StateError: run outside a container's createContainer stage, or for a container
            that shares the host's pid namespace (use prestart for those).
    """
    from ..core.errors import StateError

    try:
        ours = os.stat("/proc/self/ns/mnt").st_ino
        parent = os.stat(f"/proc/{pid}/ns/mnt").st_ino
        levels = len(_status_field("NSpid"))
    except OSError as e:
        raise StateError(
            f"cannot inspect the container process: {e.strerror}", field="pid", value=pid
        ) from None
    if pid <= 1 or ours != parent or levels < 2:
        raise StateError(
            "ocihook hook createContainer must run as a container's createContainer hook, "
            "in the container's own pid namespace",
            field="pid",
            value=pid,
            hint="register it under hooks.createContainer, or use the prestart stage",
        )


PROC_DRIVER = "/proc/driver/nvidia"
#: The files of /proc/driver/nvidia copied into the mask (libnvidia-container).
PROC_FILES = ("params", "version", "registry")


def _read_small(path: str) -> bytes | None:
    """Up to 64 KiB of a host procfs file (no links followed, never blocking), or ``None``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return None
    finally:
        os.close(fd)


def capability_files(host_dir: str, minors: set[int]) -> dict[str, bytes]:
    """The MIG capability files under ``host_dir``'s ``capabilities/`` (the host's
    ``/proc/driver/nvidia/capabilities``: ``gpu<N>/mig/gi<G>/access``,
    ``gpu<N>/mig/gi<G>/ci<C>/access``, ``mig/config``, ``mig/monitor``) whose
    ``DeviceFileMinor`` is one of ``minors`` — the ``/dev/nvidia-caps/nvidia-cap<minor>``
    nodes the container gets — by path relative to ``host_dir``, with their contents.
    NVML in the container reads them to find the capability node to open (libnvidia-container
    ``src/nvc_mount.c`` mounts the same files). Directories are walked without following
    links, at most 6 levels and 4096 entries; unreadable parts are skipped."""
    out: dict[str, bytes] = {}
    if not minors:
        return out
    budget = [4096]

    def walk(rel: str, depth: int) -> None:
        try:
            entries = sorted(os.scandir(os.path.join(host_dir, rel)), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                return
            sub = f"{rel}/{entry.name}"
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < 6:
                        walk(sub, depth + 1)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue
            data = _read_small(os.path.join(host_dir, sub))
            value = _info_value(data, "DeviceFileMinor")
            if value.isascii() and value.isdigit() and len(value) <= 9 and int(value) in minors:
                out[sub] = data or b""

    walk("capabilities", 1)
    return out


def caps_minors(nodes: Sequence[tuple[object, object]]) -> set[int]:
    """Minors of the ``/dev/nvidia-caps/nvidia-cap<minor>`` nodes among ``(path, minor)``
    pairs (``minor`` ``None`` when not given: read from the path); malformed items are
    skipped."""
    out: set[int] = set()
    prefix = "/dev/nvidia-caps/nvidia-cap"
    for path, minor in nodes:
        if not isinstance(path, str) or not path.startswith(prefix):
            continue
        if type(minor) is int and 0 <= minor < 1 << 20:
            out.add(minor)
        elif minor is None:
            number = path[len(prefix) :]
            if number.isascii() and number.isdigit() and len(number) <= 7:
                out.add(int(number))
    return out


def read_proc_files(host_dir: str, cap_minors: set[int] | None = None) -> dict[str, bytes]:
    """Contents for the masked ``/proc/driver/nvidia``, by path relative to it: the host's
    ``params`` with ``ModifyDeviceFiles: 0`` (the driver inside must not recreate device
    files; NVIDIA driver ``nv-procfs``), ``version`` and ``registry`` as they are, and the
    MIG capability files of ``cap_minors`` (:func:`capability_files`). Missing files are
    left out."""
    out: dict[str, bytes] = {}
    for name in PROC_FILES:
        data = _read_small(os.path.join(host_dir, name))
        if data is None:
            continue
        if name == "params":
            lines = [
                b"ModifyDeviceFiles: 0" if ln.startswith(b"ModifyDeviceFiles:") else ln
                for ln in data.splitlines()
            ]
            data = b"\n".join(lines) + b"\n"
        out[name] = data
    out.update(capability_files(host_dir, cap_minors or set()))
    return out


def _info_value(data: bytes | None, key: str) -> str:
    """The value of ``key`` in a driver procfs file of ``Key: value`` lines (as
    :func:`ocihook.discovery.gpus.parse_gpu_information` reads them), ``""`` if absent."""
    from ..discovery.gpus import parse_gpu_information

    return parse_gpu_information((data or b"").decode("utf-8", "replace")).get(key, "")


def _config_devices(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The character device entries of ``config``'s ``linux.devices`` (malformed ones
    left out)."""
    linux = config.get("linux")
    devices = linux.get("devices") if isinstance(linux, dict) else None
    return [
        d
        for d in (devices if isinstance(devices, list) else ())
        if isinstance(d, dict) and d.get("type", "c") == "c"
    ]


def gpu_dirs_of_devices(host_dir: str, config: dict[str, Any]) -> tuple[str, ...]:
    """The ``gpus/`` entries of ``host_dir`` (the host's ``/proc/driver/nvidia``) of the GPUs
    whose node is in ``config``'s ``linux.devices`` — the GPUs a CDI spec gave the
    container: character devices ``195:<minor>`` (below 254, the modeset and control nodes),
    or, for entries without a number, paths ``/dev/nvidia<minor>`` — matched by the
    ``Device Minor`` line of each entry's ``information`` file (NVIDIA driver
    ``nv-procfs``). Sorted by name; unreadable or malformed entries and malformed
    ``linux.devices`` items are skipped, never raised."""
    minors: set[str] = set()
    for d in _config_devices(config):
        major, minor = d.get("major"), d.get("minor")
        if major is not None or minor is not None:
            # the node's number decides, whatever its name in the container
            if major == 195 and type(minor) is int and 0 <= minor < 254:
                minors.add(str(minor))
            continue
        path = d.get("path")
        if isinstance(path, str) and path.startswith("/dev/nvidia"):
            number = path[len("/dev/nvidia") :]
            if number.isascii() and number.isdigit() and len(number) <= 3:
                minors.add(str(int(number)))
    if not minors:
        return ()
    gpus = os.path.join(host_dir, "gpus")
    try:
        names = sorted(os.listdir(gpus))
    except OSError:
        return ()
    out = []
    for name in names:
        data = _read_small(os.path.join(gpus, name, "information"))
        if _info_value(data, "Device Minor") in minors:
            out.append(name)
    return tuple(out)


def clone_gpu_proc_dirs(mask: ProcMask) -> dict[str, int]:
    """Detached read-only, nosuid, nodev, noexec clones of the selected GPUs' host
    ``gpus/<bus id>`` directories (``open_tree``), by name; made where the host paths are
    visible (the host namespace, or the container's before ``pivot_root``)."""
    from ..linux import syscalls as _linux

    fds: dict[str, int] = {}
    try:
        for name in mask.gpu_dirs:
            path = os.path.join(mask.host_dir, "gpus", name)
            if os.path.isdir(path):
                fds[name] = _linux.bind_mount_detached(
                    path, readonly=True, nosuid=True, nodev=True, noexec=True
                )
    except OSError as e:
        for fd in fds.values():
            os.close(fd)
        raise ApplyError(f"cannot clone a GPU's proc directory: {e.strerror}", path=path) from None
    return fds


def _mask_size(files: dict[str, bytes]) -> int:
    """Bytes for the mask's tmpfs: every file and directory takes at least a page, so
    1 MiB plus a page per file and per directory level (tmpfs allocates as written)."""
    pages = sum(1 + f.count("/") + len(data) // 4096 for f, data in files.items())
    return (1 << 20) + pages * 4096


def _write_nested(top: int, rel: str, data: bytes) -> None:
    """Create ``rel`` (``a/b/file``, directories made as needed, 0555) with ``data`` (0444)
    below the directory ``top``, never following a link."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ApplyError("a /proc/driver/nvidia file name is malformed", value=rel)
    fds: list[int] = []
    here = top
    try:
        for part in parts[:-1]:
            try:  # noqa: SIM105 (contextlib is not imported on this path)
                os.mkdir(part, 0o555, dir_fd=here)
            except FileExistsError:
                pass
            here = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
            fds.append(here)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(parts[-1], flags, 0o444, dir_fd=here)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)


def mask_proc_driver(
    root_fd: int, files: dict[str, bytes], gpu_fds: dict[str, int], undo: list[_Undo]
) -> bool:
    """Mask the container's ``/proc/driver/nvidia`` (see :class:`ocihook.plan.ProcMask`):
    a tmpfs mounted on it (resolved inside the rootfs), the ``files`` written there, the
    ``gpu_fds`` clones attached under ``gpus/``, then the tmpfs made read-only. Runs in the
    container's mount namespace. Returns False (nothing done) when the container's procfs
    has no ``/proc/driver/nvidia`` (no driver to hide).

    Raises:
        ApplyError: a step failed (the undo list detaches the tmpfs).
    """
    from ..linux import pathsafe as ps
    from ..linux import syscalls as _linux

    directory = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        target = ps.open_in_root(root_fd, PROC_DRIVER, directory)
    except ApplyError as e:
        if isinstance(e.__cause__, (FileNotFoundError, NotADirectoryError)):
            return False
        raise
    try:
        parent = ps.open_in_root(root_fd, os.path.dirname(PROC_DRIVER), directory)
    except ApplyError:
        os.close(target)
        raise
    try:
        masked = os.fstat(target).st_dev != os.fstat(parent).st_dev
    finally:
        os.close(parent)
    if masked and os.path.exists(f"/proc/self/fd/{target}/params"):
        os.close(target)  # a tmpfs of ours is there already (the hook ran twice)
        return False
    try:
        _linux.mount(
            "tmpfs",
            f"/proc/self/fd/{target}",
            "tmpfs",
            _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC,
            f"mode=0555,size={_mask_size(files)}",
        )
    except OSError as e:
        raise ApplyError(f"cannot mask {PROC_DRIVER}: {e.strerror}", path=PROC_DRIVER) from None
    finally:
        os.close(target)
    undo.append(_partial(_detach, root_fd, PROC_DRIVER))
    top = ps.open_in_root(root_fd, PROC_DRIVER, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name, data in files.items():
            _write_nested(top, name, data)
        if gpu_fds:
            os.mkdir("gpus", 0o555, dir_fd=top)
            gpus = os.open("gpus", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
            try:
                for name, tree in gpu_fds.items():
                    os.mkdir(name, 0o555, dir_fd=gpus)
                    point = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=gpus)
                    try:
                        _linux.attach_mount(tree, point)
                    finally:
                        os.close(point)
            finally:
                os.close(gpus)
        _linux.mount(
            None,
            f"/proc/self/fd/{top}",
            None,
            _linux.MS_REMOUNT
            | _linux.MS_BIND
            | _linux.MS_RDONLY
            | _linux.MS_NOSUID
            | _linux.MS_NODEV
            | _linux.MS_NOEXEC,
            None,
        )
    except OSError as e:
        raise ApplyError(f"cannot mask {PROC_DRIVER}: {e.strerror}", path=PROC_DRIVER) from None
    finally:
        os.close(top)
    return True


def _check_container_pid(pid: int) -> None:
    """The state's pid must be a process in a mount namespace of its own (the container
    init the runtime is creating): a pid in ocihook's own namespace would make it mount
    into the host and open the device cgroup of an unrelated process.

    Raises:
        StateError: no such process, or it shares ocihook's mount namespace.
    """
    from ..core.errors import StateError

    try:
        theirs = os.stat(f"/proc/{pid}/ns/mnt").st_ino
        ours = os.stat("/proc/self/ns/mnt").st_ino
    except OSError as e:
        raise StateError(
            f"cannot inspect the container process: {e.strerror}", field="pid", value=pid
        ) from None
    if theirs == ours:
        raise StateError(
            "the state's pid is not in a container's mount namespace",
            field="pid",
            value=pid,
            hint="run ocihook hook prestart/createRuntime from the runtime, with its state",
        )


def _apply_in_container(
    root_fd: int,
    rootfs: str,
    plan: Plan,
    tree_fds: Sequence[int],
    undo: list[_Undo],
    node_fds: Sequence[int] | None = None,
) -> None:
    """The container-side steps of :func:`inject`; runs inside the container's mount
    namespace and records undo actions (run in reverse order) for every change.

    ``node_fds`` (a container with a user namespace): detached clones of the host's device
    nodes, bind-mounted onto new files in the container's ``/dev`` instead of ``mknod``,
    which a user namespace's ``/dev`` does not allow (runc does the same for such
    containers)."""
    from ..linux import pathsafe as ps
    from ..linux import syscalls as _linux

    edits = plan.edits
    created: list[str] = []

    def remove_created() -> None:
        for path in reversed(created):
            ps.remove_in_root(root_fd, path)

    undo.append(remove_created)
    try:
        if node_fds is not None:
            for node, tree in zip(edits.device_nodes, node_fds, strict=True):
                parent, _, name = node.path.rpartition("/")
                parent_fd = ps.makedirs_in_root(root_fd, parent or "/", created=created)
                try:
                    target = ps.create_file_at(parent_fd, parent, name, 0o644, created=created)
                finally:
                    os.close(parent_fd)
                try:
                    _linux.attach_mount(tree, target)
                finally:
                    os.close(target)
                undo.append(_partial(_detach, root_fd, node.path))
        for node in () if node_fds is not None else edits.device_nodes:
            ps.mknod_in_root(
                root_fd,
                node.path,
                stat.S_IFCHR | node.file_mode,
                node.major,
                node.minor,
                created=created,
            )
            if node.uid or node.gid:  # the host node's owner, e.g. the video group
                parent_fd = ps.makedirs_in_root(root_fd, os.path.dirname(node.path))
                try:
                    os.chown(
                        os.path.basename(node.path),
                        node.uid,
                        node.gid,
                        dir_fd=parent_fd,
                        follow_symlinks=False,
                    )
                finally:
                    os.close(parent_fd)
        parents: dict[str, int] = {}  # one in-root lookup per target directory
        try:
            for m, tree_fd in zip(edits.mounts, tree_fds, strict=True):
                parent, _, name = m.destination.rpartition("/")
                parent = parent or "/"
                if stat.S_ISDIR(os.fstat(tree_fd).st_mode):  # a directory (MPS pipes, udev)
                    target_fd = ps.makedirs_in_root(root_fd, m.destination, created=created)
                else:
                    if parent not in parents:
                        parents[parent] = ps.makedirs_in_root(root_fd, parent, created=created)
                    target_fd = ps.create_file_at(parents[parent], parent, name, created=created)
                try:
                    if _same_file(target_fd, tree_fd):
                        continue  # mounted there already (the hook ran twice): idempotent
                    _linux.attach_mount(tree_fd, target_fd)
                finally:
                    os.close(target_fd)
                undo.append(_partial(_detach, root_fd, m.destination))
        finally:
            for fd in parents.values():
                os.close(fd)
        for s in edits.symlinks:
            previous = ps.symlink_in_root(root_fd, s.link, s.target, created=created)
            if previous is not None:
                undo.append(_partial(ps.symlink_in_root, root_fd, s.link, previous))
        if edits.ldcache_libraries:
            old = write_ldcache(root_fd, edits.ldcache_libraries, edits.cuda_compat)
            if old is None:
                undo.append(lambda: ps.remove_in_root(root_fd, "/etc/ld.so.cache"))
            else:
                undo.append(lambda: ps.write_file_in_root(root_fd, "/etc/ld.so.cache", old, 0o644))
    except OSError as e:
        raise ApplyError(
            f"cannot change the container: {e.strerror}",
            path=e.filename if isinstance(e.filename, str) else rootfs,
        ) from None


def _same_file(a: int, b: int) -> bool:
    """Whether two descriptors name the same file (a bind mount shows its source's
    device and inode)."""
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _detach(root_fd: int, path: str) -> None:
    from ..linux import pathsafe as ps
    from ..linux import syscalls as _linux

    fd = ps.open_in_root(root_fd, path, os.O_PATH | os.O_CLOEXEC)
    try:
        _linux.umount2(f"/proc/self/fd/{fd}", _linux.MNT_DETACH)
    finally:
        os.close(fd)
