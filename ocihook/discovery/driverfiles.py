"""The user-space driver files of each driver capability, found in the driver root.

What each capability brings follows libnvidia-container (``src/nvc_info.c``: libraries,
binaries, IPC paths, firmware) and, for the graphics configuration files the C library does
not mount, the NVIDIA Container Toolkit (``internal/discover/graphics.go``):

========== ==================================================================================
utility    libnvidia-ml, libnvidia-cfg, libnvidia-nscq; nvidia-smi, nvidia-debugdump,
           nvidia-persistenced, nv-fabricmanager; the persistenced and fabricmanager sockets
compute    libcuda, libcudadebugger, libnvidia-opencl, -gpucomp, -ptxjitcompiler,
           -fatbinaryloader, -allocator, -compiler, -pkcs11, -pkcs11-openssl3, -nvvm,
           -tileiras; nvidia-cuda-mps-control, nvidia-cuda-mps-server; the MPS pipe
           directory; the OpenCL ICD file
video      libvdpau_nvidia, libnvidia-encode, libnvidia-opticalflow, libnvcuvid
graphics   libnvidia-eglcore, -glcore, -tls, -glsi, -fbc, -ifr, -rtcore, -vulkan-producer,
           libnvoptix, and the GLVND libraries (libGLX_nvidia, libEGL_nvidia,
           libGLESv2_nvidia, libGLESv1_CM_nvidia, libnvidia-glvkspirv, libnvidia-cbl) — or,
           with ``glvnd=False``,
           the non-GLVND libGL, libEGL, libGLESv1_CM, libGLESv2 when they link
           libnvidia-glcore/eglcore; EGL, Vulkan and X11 configuration, nvoptix.bin, the
           application profile
ngx        libnvidia-ngx
all        the GSP firmware ``/lib/firmware/nvidia/<version>/gsp*.bin``
========== ==================================================================================

``display`` brings the graphics files (and ``/dev/nvidia-modeset``); ``video`` brings the
compute libraries too; ``compat32`` selects the 32-bit variants of the libraries of the other
requested capabilities (see :func:`select_libraries`).

Rules:

* a library is an ``ld.so.cache`` entry whose soname starts with a capability's prefix
  followed by ``.``; its path, resolved *inside* the driver root (absolute links re-rooted),
  must name a regular ELF file of the right class and machine whose name ends with the
  driver version — anything else (an older driver's file left behind) is skipped with a
  warning. Libraries the cache does not list are looked for in the fallback directories
  (:data:`FALLBACK_LIBRARY_DIRS`, e.g. Debian's ``nvidia/current``, ``lib64`` of a GKE/COS
  tree) and in the directories the user gives. A driver root without ``ld.so.cache``, or
  whose cache lists no driver library, is searched that way alone, with one warning; a
  driver root without cache where that finds no library either fails, naming
  ``--driver-root`` and ``--library-path``;
* ``libnvidia-tls`` is kept only if its ``.note.ABI-tag`` says Linux 2.3.99;
* binaries are searched in :data:`BINARY_DIRS` of the driver root, first match wins;
* a library or binary that exists but cannot be read (``EACCES``, ``EIO``, ``EMFILE``...)
  is an error (:class:`~ocihook.core.errors.DiscoveryError`, exit 6) naming the file and
  the reason — never skipped: the container would start without ``libcuda`` and nobody
  would know why. Only a file that does not exist (a stale cache entry) is passed over.

Nothing here writes anything. The TLS note, DT_NEEDED and DT_SONAME are read with
:mod:`ocihook.linux.elfscan` (not pyelftools, whose import costs more than a container start).
"""

from __future__ import annotations

import os
import stat

from ..core.errors import DiscoveryError, OcihookError
from ..core.hostroot import HostRoot
from ..core.vocab import DRIVER_CAPABILITIES, IMPLIED_CAPABILITIES, IPC_PATHS
from ..linux import ldcache
from ..linux.pathsafe import resolve_in_root
from .records import DriverFile, DriverLibrary, select_libraries

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "ALL_DRIVER_CAPABILITIES",
    "BINARY_DIRS",
    "CAPABILITY_BINARIES",
    "CAPABILITY_LIBRARIES",
    "FALLBACK_LIBRARY_DIRS",
    "NON_GLVND_LIBRARIES",
    "DriverFile",
    "DriverLibrary",
    "find_binaries",
    "find_config_files",
    "find_firmware",
    "find_ipcs",
    "find_libraries",
    "searched_dirs",
    "select_libraries",
    "unreadable",
]

#: Library soname prefixes per driver capability (libnvidia-container ``src/nvc_info.c``).
CAPABILITY_LIBRARIES: dict[str, tuple[str, ...]] = {
    "utility": ("libnvidia-ml.so", "libnvidia-cfg.so", "libnvidia-nscq.so"),
    "compute": (
        "libcuda.so",
        "libcudadebugger.so",
        "libnvidia-opencl.so",
        "libnvidia-gpucomp.so",
        "libnvidia-ptxjitcompiler.so",
        "libnvidia-fatbinaryloader.so",
        "libnvidia-allocator.so",
        "libnvidia-compiler.so",
        "libnvidia-pkcs11.so",
        "libnvidia-pkcs11-openssl3.so",
        "libnvidia-nvvm.so",
        "libnvidia-tileiras.so",
    ),
    "video": (
        "libvdpau_nvidia.so",
        "libnvidia-encode.so",
        "libnvidia-opticalflow.so",
        "libnvcuvid.so",
    ),
    "graphics": (
        "libnvidia-eglcore.so",
        "libnvidia-glcore.so",
        "libnvidia-tls.so",
        "libnvidia-glsi.so",
        "libnvidia-fbc.so",
        "libnvidia-ifr.so",
        "libnvidia-rtcore.so",
        "libnvoptix.so",
        # GLVND vendor libraries (the default)
        "libGLX_nvidia.so",
        "libEGL_nvidia.so",
        "libGLESv2_nvidia.so",
        "libGLESv1_CM_nvidia.so",
        "libnvidia-glvkspirv.so",
        "libnvidia-cbl.so",
        # the Vulkan WSI producer (no soname; the toolkit mounts it by file pattern)
        "libnvidia-vulkan-producer.so",
    ),
    "ngx": ("libnvidia-ngx.so",),
}
#: Non-GLVND OpenGL libraries, considered with ``glvnd=False`` only, and kept only when
#: their DT_NEEDED names libnvidia-glcore or libnvidia-eglcore (the NVIDIA build, not Mesa).
NON_GLVND_LIBRARIES = ("libGL.so", "libEGL.so", "libGLESv1_CM.so", "libGLESv2.so")

#: Every driver capability name (NVIDIA Container Toolkit ``internal/config/image``).
ALL_DRIVER_CAPABILITIES = DRIVER_CAPABILITIES
#: Capabilities whose libraries another capability brings as well.
_IMPLIED = IMPLIED_CAPABILITIES

#: Binaries per capability (libnvidia-container ``src/nvc_info.c``).
CAPABILITY_BINARIES: dict[str, tuple[str, ...]] = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}
#: Where binaries are searched in the driver root, in order (a ``PATH`` of the host's own,
#: never the container's); Debian keeps the real files in ``/usr/lib/nvidia/current``.
BINARY_DIRS = (
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/usr/lib/nvidia/current",
    "/usr/local/nvidia/bin",
)

#: Directories searched for libraries the ld.so.cache does not list, after the cache (and
#: instead of it when the driver root has none: GKE/COS ``/home/kubernetes/bin/nvidia``
#: keeps its libraries in ``lib64``, driver containers in ``usr/lib/<triplet>``). The
#: toolkit's library locator (``internal/lookup/library.go``) searches the same kind of
#: list; a file of the wrong ELF class in ``/lib`` or ``/usr/lib`` is passed over.
FALLBACK_LIBRARY_DIRS = {
    64: (
        "/usr/lib/x86_64-linux-gnu/nvidia/current",
        "/usr/lib/aarch64-linux-gnu/nvidia/current",
        "/usr/lib64",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/lib64",
        "/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu/nvidia",
        "/usr/lib/aarch64-linux-gnu/nvidia",
        "/lib",
        "/usr/lib",
        "/usr/local/nvidia/lib64",
    ),
    32: (
        "/usr/lib/i386-linux-gnu/nvidia/current",
        "/usr/lib/arm-linux-gnueabihf/nvidia/current",
        "/usr/lib32",
        "/usr/lib/i386-linux-gnu",
        "/usr/lib/arm-linux-gnueabihf",
        "/lib32",
        "/lib/i386-linux-gnu",
        "/lib/arm-linux-gnueabihf",
        "/usr/lib/i386-linux-gnu/nvidia",
        "/usr/lib/arm-linux-gnueabihf/nvidia",
        "/lib",
        "/usr/lib",
    ),
}

#: Graphics configuration files, relative to the data directories (:data:`CONFIG_DIRS`):
#: (capability, relative path or glob-free prefix, match by prefix?).
CONFIG_FILES = (
    ("graphics", "glvnd/egl_vendor.d/10_nvidia.json"),
    ("graphics", "egl/egl_external_platform.d/*nvidia*"),
    ("graphics", "vulkan/icd.d/nvidia_icd.json"),
    ("graphics", "vulkan/icd.d/nvidia_icd.x86_64.json"),
    ("graphics", "vulkan/implicit_layer.d/nvidia_layers.json"),
    ("graphics", "nvidia/nvoptix.bin"),
    ("compute", "OpenCL/vendors/nvidia.icd"),
)
#: Where configuration files are searched, in order (the XDG data and config dirs).
CONFIG_DIRS = ("/etc", "/usr/local/share", "/usr/share")
#: X11 driver files, with the directories they are searched in.
X11_FILES = (
    (
        "nvidia_drv.so",
        (
            "/usr/lib/xorg/modules/drivers",
            "/usr/lib64/xorg/modules/drivers",
            "/usr/lib/x86_64-linux-gnu/xorg/modules/drivers",
            "/usr/lib/nvidia/current",
        ),
    ),
    (
        "libglxserver_nvidia.so.{version}",
        (
            "/usr/lib/xorg/modules/extensions",
            "/usr/lib64/xorg/modules/extensions",
            "/usr/lib/x86_64-linux-gnu/nvidia/xorg",
            "/usr/lib/nvidia/current",
        ),
    ),
)
#: Firmware directories (the kernel's firmware search path, ``drivers/base/firmware_loader``).
FIRMWARE_DIRS = ("/lib/firmware", "/usr/lib/firmware")

# ld.so.cache flags and ELF machines per host machine (glibc dl-cache.h, System V gABI).
_ABI_FLAGS = {
    "x86_64": {64: (0x0303,), 32: (0x0003, 0x0001)},
    "aarch64": {64: (0x0A03,), 32: (0x0903, 0x0001)},
    "ppc64le": {64: (0x0503,), 32: ()},
}
_ELF_MACHINES = {"x86_64": {64: 62, 32: 3}, "aarch64": {64: 183, 32: 40}, "ppc64le": {64: 21}}


def unreadable(host_path: str, err: OSError, what: str = "driver library") -> DiscoveryError:
    """The error for a driver file that exists but cannot be read (``err`` from ``open``,
    ``fstat`` or ``pread``)."""
    return DiscoveryError(
        f"cannot read {what}: {err.strerror or err}",
        path=host_path,
        hint="the file exists but cannot be read (permissions, a failing disk, too many "
        "open files); without it the container would lack the driver — fix the file, or "
        "remove it and refresh the driver root's ld.so.cache",
    )


def _elf_header(path: str, what: str = "driver library") -> tuple[int, int] | None:
    """(class, e_machine) of an ELF file from its first 20 bytes, or ``None`` when it is
    missing, not a regular file, not ELF, or big-endian: every host machine of
    :data:`_ELF_MACHINES` is little-endian (``EI_DATA`` 1, System V gABI), and a big-endian
    file of the same ``e_machine`` (``aarch64_be``) cannot be loaded there.

    Cheap on purpose: runs for every candidate file on every container start.

    Raises:
        DiscoveryError: the file exists but cannot be read (:func:`unreadable`).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise unreadable(path, e, what) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.pread(fd, 20, 0)
    except OSError as e:
        raise unreadable(path, e, what) from None
    finally:
        os.close(fd)
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] != 1:
        return None
    return (64 if head[4] == 2 else 32), head[18] | head[19] << 8


def _rel(root: HostRoot, host_path: str) -> str:
    base = root.driver_root.rstrip("/")
    if base and host_path.startswith(base + "/"):
        return host_path[len(base) :]
    return host_path


def _is_regular(path: str, what: str = "driver library") -> bool:
    """Whether ``path`` is a regular file (``False`` when it does not exist).

    Raises:
        DiscoveryError: it exists but ``stat`` failed (:func:`unreadable`).
    """
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise unreadable(path, e, what) from None


def _listdir(host_dir: str, what: str) -> list[str] | None:
    """The names in ``host_dir``, or ``None`` when it does not exist.

    Raises:
        DiscoveryError: it exists but cannot be listed (:func:`unreadable`).
    """
    try:
        return os.listdir(host_dir)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise unreadable(host_dir, e, what) from None


def _plain_name(name: str) -> bool:
    """A file name that can name a link in a directory: no ``/``, NUL, ``.`` or ``..``."""
    return bool(name) and "/" not in name and "\0" not in name and name not in (".", "..")


def _pick_soname(keys: list[str], name: str) -> str:
    """The soname among cache keys that all resolve to the file ``name``: a versioned key
    that is not the file name itself (``libcuda.so.1``, not ``libcuda.so`` or
    ``libcuda.so.535.261.03``), else the file name."""
    versioned = [k for k in keys if ".so." in k]
    for k in versioned:
        if k != name:
            return k
    return versioned[0] if versioned else keys[0]


def _tls_note_ok(host_path: str) -> bool:
    """libnvidia-tls is kept only when its ``.note.ABI-tag`` says Linux (0) 2.3.99
    (libnvidia-container ``src/nvc_info.c``): other builds need a different kernel ABI."""
    from ..linux.elfscan import abi_tag

    try:
        return abi_tag(host_path, strict=True) == (0, 2, 3, 99)
    except OSError as e:
        raise unreadable(host_path, e) from None


def _links_to_nvidia_core(host_path: str) -> bool:
    """A non-GLVND library is NVIDIA's when its DT_NEEDED names libnvidia-glcore or
    libnvidia-eglcore (libnvidia-container ``src/nvc_info.c``)."""
    from ..linux.elfscan import dynamic_names

    try:
        names = dynamic_names(host_path, strict=True)
    except OSError as e:
        raise unreadable(host_path, e) from None
    needed = names[1] if names else ()
    return any(n.startswith(("libnvidia-glcore.so", "libnvidia-eglcore.so")) for n in needed)


def _soname_outside_cache(directory: str, name: str, prefix: str) -> str:
    """Soname of a library found by directory search: the name of a link beside it that
    points at it (``libnvidia-cfg.so.1 -> libnvidia-cfg.so.535.261.03``), else its
    DT_SONAME (pyelftools), else its file name."""
    try:
        entries = os.listdir(directory)
    except OSError:
        entries = []
    for entry in sorted(entries):
        if entry != name and entry.startswith(prefix + ".") and entry.count(".so.") == 1:
            try:
                if os.readlink(os.path.join(directory, entry)) == name:
                    return entry
            except OSError:
                continue
    from ..linux.elfscan import dynamic_names

    path = os.path.join(directory, name)
    try:
        names = dynamic_names(path, strict=True)
    except OSError as e:
        raise unreadable(path, e) from None
    soname = names[0] if names else None
    return soname if soname and _plain_name(soname) else name


def find_libraries(
    root: HostRoot,
    version: str,
    *,
    machine: str,
    capabilities: Iterable[str] | None = None,
    glvnd: bool = True,
    search_dirs: Sequence[str] = (),
    elf_classes: Iterable[int] = (64, 32),
    searched: set[str] | None = None,
) -> tuple[tuple[DriverLibrary, ...], list[str]]:
    """Find the driver libraries of ``capabilities`` (default: all) in the driver root.

    Args:
        root: the host.
        version: the driver version every library file name must end with.
        machine: ``uname -m`` of the host (x86_64, aarch64, ppc64le).
        capabilities: capability names (the keys of :data:`CAPABILITY_LIBRARIES`).
        glvnd: look for GLVND vendor libraries (default) rather than non-GLVND ones.
        search_dirs: extra directories (driver-root terms) searched before the fallbacks.
        elf_classes: which word sizes to look for.
        searched: where to add the directories (driver-root terms) searched for a library
            the cache does not list, whether it was found there or not.

    Returns:
        ``(libraries, warnings)``; libraries in capability, prefix, class order.

    Raises:
        DiscoveryError: the driver root's ``ld.so.cache`` is unreadable, or a library it
            lists (or a fallback directory holds) exists but cannot be read; or the cache
            is missing (a warning, and the standard directories are searched; likewise for
            a cache that lists no driver library) and no library of ``capabilities``
            (which include ``utility`` or ``compute``) is found in any directory.
        LdCacheError: it is malformed.
    """
    warnings: list[str] = []
    cache_path = root.driver(root.ldcache)
    entries = _read_cache(cache_path)
    caps = list(CAPABILITY_LIBRARIES) if capabilities is None else list(capabilities)
    no_cache: str | None = None  # why the cache cannot be used, when it cannot
    entries_missing = entries is None
    if entries is None:
        no_cache = f"no ld.so.cache in the driver root ({cache_path})"
        entries = []
    elif not _lists_driver_libraries(entries):
        no_cache = f"the driver root's ld.so.cache ({cache_path}) lists no NVIDIA driver library"
    flags_by_class = _ABI_FLAGS.get(machine, {})
    sought = any(CAPABILITY_LIBRARIES.get(c) for c in caps) and any(
        flags_by_class.get(c) for c in elf_classes
    )
    if no_cache is not None and sought:
        warnings.append(
            f"{no_cache}: driver libraries searched in the standard library directories "
            "of the driver root (lib64, lib, usr/lib64, usr/lib/<triplet>, ...)"
        )
    machines = _ELF_MACHINES.get(machine, {})
    suffix = "." + version
    out: list[DriverLibrary] = []
    seen: set[str] = set()
    index = _DirIndex(root)
    for capability in caps:
        prefixes = list(CAPABILITY_LIBRARIES.get(capability, ()))
        if capability == "graphics" and not glvnd:
            prefixes = [p for p in prefixes if "_nvidia" not in p and "glvkspirv" not in p]
            prefixes += NON_GLVND_LIBRARIES
        for prefix in prefixes:
            for elf_class in elf_classes:
                want_flags = flags_by_class.get(elf_class)
                if not want_flags:
                    continue
                found = _from_cache(root, entries, prefix, want_flags)
                if not found:
                    found = _from_dirs(index, prefix, elf_class, suffix, search_dirs)
                for host_path, (keys, where) in found.items():
                    name = os.path.basename(host_path)
                    if host_path in seen:
                        continue
                    if not name.endswith(suffix):
                        warnings.append(
                            f"{where} resolves to {name}, not a {version} library; skipped"
                        )
                        continue
                    header = _elf_header(host_path)
                    if header != (elf_class, machines.get(elf_class)) or not _is_regular(host_path):
                        warnings.append(
                            f"{host_path} is not a {elf_class}-bit {machine} ELF file; skipped"
                        )
                        continue
                    if prefix == "libnvidia-tls.so" and not _tls_note_ok(host_path):
                        warnings.append(f"{host_path}: TLS ABI note is not Linux 2.3.99; skipped")
                        continue
                    if prefix in NON_GLVND_LIBRARIES and not _links_to_nvidia_core(host_path):
                        continue  # Mesa's or another vendor's library, not the driver's
                    seen.add(host_path)
                    out.append(
                        DriverLibrary(
                            capability=capability,
                            soname=_pick_soname(keys, name),
                            name=name,
                            host_path=host_path,
                            cache_path=where,
                            abi_flags=want_flags[0],
                            elf_class=elf_class,
                            path=_rel(root, host_path),
                        )
                    )
    if searched is not None:
        searched.update(index.looked())
    # every driver has libnvidia-ml and libcuda: finding neither of what was asked for
    # means the driver root is wrong (a graphics-only request may just find nothing)
    core = any(c in ("utility", "compute") for c in caps)
    if entries_missing and sought and core and not out:
        dirs = ", ".join((*search_dirs, "/lib64", "/lib", "/usr/lib64", "/usr/lib/<triplet>"))
        raise DiscoveryError(
            f"{no_cache}, and no NVIDIA {version} driver library is in {dirs} or the other "
            "standard directories",
            path=root.driver_root,
            hint="set --driver-root (driver-root in config.toml) to the driver's tree, "
            "e.g. /home/kubernetes/bin/nvidia or /run/nvidia/driver, or name its library "
            "directory with --library-path (library-path)",
        )
    return tuple(out), warnings


def _read_cache(cache_path: str) -> list[ldcache.CacheEntry] | None:
    """The entries of the ``ld.so.cache`` at ``cache_path`` (a host path), or ``None`` when
    there is no such file (GKE/COS driver trees, driver containers: the caller searches
    the standard directories instead).

    Raises:
        DiscoveryError: it is not a regular file, or cannot be read.
        LdCacheError: it is malformed.
    """
    try:
        fd = os.open(cache_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise DiscoveryError(
                    "ld.so.cache is not a regular file",
                    path=cache_path,
                    hint="fix the file, or point --ldcache (ldcache) at the cache",
                )
            data = f.read(256 << 20)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DiscoveryError(f"cannot read ld.so.cache: {e.strerror}", path=cache_path) from None
    return list(ldcache.parse(data, path=cache_path))


def _lists_driver_libraries(entries: Sequence[ldcache.CacheEntry]) -> bool:
    """Whether any entry's soname is one of :data:`CAPABILITY_LIBRARIES`' prefixes + ``.``."""
    prefixes = tuple(p + "." for ps in CAPABILITY_LIBRARIES.values() for p in ps)
    return any(e.soname.startswith(prefixes) for e in entries)


def _from_cache(
    root: HostRoot, entries: Sequence[ldcache.CacheEntry], prefix: str, flags: tuple[int, ...]
) -> dict[str, tuple[list[str], str]]:
    """Cache entries of ``prefix`` with one of ``flags``: resolved host path -> (keys, the
    entry's path)."""
    found: dict[str, tuple[list[str], str]] = {}
    for entry in entries:
        if entry.hwcap or entry.flags not in flags or not entry.soname.startswith(prefix):
            continue
        if not _plain_name(entry.soname):
            continue  # a soname is a file name; "/" or ".." would become a container path
        rest = entry.soname[len(prefix) :]
        if rest and not rest.startswith("."):
            continue  # libnvidia-pkcs11.so must not match libnvidia-pkcs11-openssl3.so
        try:
            host_path = resolve_in_root(root.driver_root, entry.path)
        except OcihookError:
            continue
        if host_path in found:
            found[host_path][0].append(entry.soname)
        else:
            found[host_path] = ([entry.soname], entry.path)
    return found


class _DirIndex:
    """Directory listings of the driver root, each resolved and read once per discovery
    (the fallback search asks the same ten directories for every missing library)."""

    def __init__(self, root: HostRoot) -> None:
        self.root = root
        self._dirs: dict[str, tuple[str, frozenset[str]] | None] = {}

    def looked(self) -> list[str]:
        """The directories (driver-root terms) asked about so far, found or not."""
        return list(self._dirs)

    def get(self, directory: str) -> tuple[str, frozenset[str]] | None:
        """(host path, names) of ``directory`` (driver-root terms), or ``None`` when it
        does not exist.

        Raises:
            DiscoveryError: it exists but cannot be listed.
        """
        if directory not in self._dirs:
            try:
                host_dir = resolve_in_root(self.root.driver_root, directory)
            except OcihookError:
                self._dirs[directory] = None
                return None
            names = _listdir(host_dir, "library directory")
            self._dirs[directory] = None if names is None else (host_dir, frozenset(names))
        return self._dirs[directory]


def _from_dirs(
    index: _DirIndex, prefix: str, elf_class: int, suffix: str, extra: Sequence[str]
) -> dict[str, tuple[list[str], str]]:
    """Search directories for ``<prefix><suffix>`` (the versioned file) when the cache has
    no entry: the user's directories first, then :data:`FALLBACK_LIBRARY_DIRS`."""
    name = prefix + suffix
    for directory in (*extra, *FALLBACK_LIBRARY_DIRS[elf_class]):
        listing = index.get(directory)
        if listing is None or name not in listing[1]:
            continue
        candidate = os.path.join(listing[0], name)
        if not _is_regular(candidate):
            continue
        header = _elf_header(candidate)
        if header is None or header[0] != elf_class:
            continue
        soname = _soname_outside_cache(listing[0], name, prefix)
        return {candidate: ([soname], f"{directory}/{name}")}
    return {}


def searched_dirs(root: HostRoot, dirs: Iterable[str]) -> list[str]:
    """The host directories that tell whether a file appeared in one of ``dirs``
    (driver-root terms: directories discovery looked in, whether or not it found anything
    there), sorted, without duplicates: each resolved inside the driver root
    (:func:`~ocihook.linux.pathsafe.resolve_in_root`) when it is a directory, else its
    deepest existing ancestor, where the missing directory, or a link on the way to it,
    would be made. A file, directory or link made in one changes its mtime, and so makes
    an entry that lists it stale (:func:`ocihook.linux.cachestore.dir_identities`;
    :func:`ocihook.discovery.nvidia.discovery_dirs`)."""
    top = os.path.abspath(root.driver_root)
    out: set[str] = set()
    for d in dirs:
        try:
            host = resolve_in_root(top, d)
        except OcihookError:  # a file or a link loop on the way: watch where it is
            host = root.driver(d)
        while host != top and not os.path.isdir(host):
            host = os.path.dirname(host)
        out.add(host)
    return sorted(out)


def find_binaries(
    root: HostRoot,
    *,
    machine: str,
    capabilities: Iterable[str] | None = None,
    searched: set[str] | None = None,
) -> tuple[tuple[DriverFile, ...], list[str]]:
    """Find the binaries of ``capabilities`` (default: all) in :data:`BINARY_DIRS` of the
    driver root; the first regular ELF file of this machine wins. Missing ones are not an
    error (``nv-fabricmanager`` exists only on NVSwitch systems). The directories looked
    in (driver-root terms) are added to ``searched``, when given.

    Raises:
        DiscoveryError: a binary exists but cannot be read (:func:`unreadable`).
    """
    caps = list(CAPABILITY_BINARIES) if capabilities is None else list(capabilities)
    native = _ELF_MACHINES.get(machine, {}).get(64)
    out: list[DriverFile] = []
    warnings: list[str] = []
    for capability in caps:
        for name in CAPABILITY_BINARIES.get(capability, ()):
            for directory in BINARY_DIRS:
                if searched is not None:
                    searched.add(directory)
                path = f"{directory}/{name}"
                try:
                    host_path = resolve_in_root(root.driver_root, path)
                except OcihookError:
                    continue
                if not _is_regular(host_path, "driver binary"):
                    continue
                header = _elf_header(host_path, "driver binary")
                if header is None or header[1] != native:
                    warnings.append(f"{host_path} is not a {machine} ELF binary; skipped")
                    continue
                out.append(DriverFile("binary", capability, path, host_path, header[0]))
                break
    return tuple(out), warnings


def find_firmware(
    root: HostRoot, version: str, searched: set[str] | None = None
) -> tuple[DriverFile, ...]:
    """The GSP firmware files ``<firmware dir>/nvidia/<version>/gsp*.bin`` (every GPU
    container gets them on drivers that use GSP; none on WSL). The directories looked in
    (driver-root terms) are added to ``searched``, when given.

    Raises:
        DiscoveryError: a firmware directory or file exists but cannot be read.
    """
    out: list[DriverFile] = []
    seen: set[str] = set()
    for directory in FIRMWARE_DIRS:
        rel_dir = f"{directory}/nvidia/{version}"
        if searched is not None:
            searched.add(rel_dir)
        try:
            host_dir = resolve_in_root(root.driver_root, rel_dir)
        except OcihookError:
            continue
        listed = _listdir(host_dir, "firmware directory")
        if listed is None:
            continue
        names = sorted(listed)
        for name in names:
            if not (name.startswith("gsp") and name.endswith(".bin")):
                continue
            host_path = resolve_in_root(root.driver_root, f"{rel_dir}/{name}")
            if host_path in seen or not _is_regular(host_path, "firmware file"):
                continue
            seen.add(host_path)
            out.append(DriverFile("firmware", "all", f"{rel_dir}/{name}", host_path))
    return tuple(out)


def find_ipcs(root: HostRoot, capabilities: Iterable[str] | None = None) -> tuple[DriverFile, ...]:
    """The IPC sockets and directories of ``capabilities`` that exist in the driver root
    (libnvidia-container ``src/nvc_info.c``): the persistenced and fabricmanager sockets
    (utility) and the MPS pipe directory (compute)."""
    caps = set(CAPABILITY_LIBRARIES) if capabilities is None else set(capabilities)
    out: list[DriverFile] = []
    for capability, path, kind in IPC_PATHS:
        if capability not in caps:
            continue
        try:
            host_path = resolve_in_root(root.driver_root, path)
            mode = os.stat(host_path).st_mode
        except (OcihookError, OSError):
            continue
        if (kind == "socket" and stat.S_ISSOCK(mode)) or (
            kind == "directory" and stat.S_ISDIR(mode)
        ):
            out.append(DriverFile("ipc", capability, path, host_path))
    return tuple(out)


def find_config_files(
    root: HostRoot,
    version: str,
    capabilities: Iterable[str] | None = None,
    searched: set[str] | None = None,
) -> tuple[DriverFile, ...]:
    """Graphics configuration files (EGL vendor and external platforms, Vulkan ICD and
    layers, nvoptix.bin), the OpenCL ICD (compute), the X11 driver files and the
    application profile, found in the driver root (NVIDIA Container Toolkit
    ``internal/discover/graphics.go``). The directories looked in (driver-root terms) are
    added to ``searched``, when given."""
    looked: set[str] = set() if searched is None else searched
    caps = set(ALL_DRIVER_CAPABILITIES) if capabilities is None else set(capabilities)
    if "display" in caps:
        caps.add("graphics")
    out: list[DriverFile] = []
    seen: set[str] = set()

    def add(kind: str, capability: str, path: str) -> None:
        looked.add(path.rpartition("/")[0])
        try:
            host_path = resolve_in_root(root.driver_root, path)
        except OcihookError:
            return
        if host_path not in seen and _is_regular(host_path, "driver configuration file"):
            seen.add(host_path)
            out.append(DriverFile(kind, capability, path, host_path))

    for capability, rel in CONFIG_FILES:
        if capability not in caps:
            continue
        for directory in CONFIG_DIRS:
            if "*" in rel:
                sub, _, pattern = rel.rpartition("/")
                needle = pattern.strip("*")
                looked.add(f"{directory}/{sub}")
                try:
                    names = sorted(
                        os.listdir(resolve_in_root(root.driver_root, f"{directory}/{sub}"))
                    )
                except (OcihookError, OSError):
                    continue
                for name in names:
                    if needle in name:
                        add("config", capability, f"{directory}/{sub}/{name}")
            else:
                add("config", capability, f"{directory}/{rel}")
    if "graphics" in caps:
        for pattern, directories in X11_FILES:
            name = pattern.format(version=version)
            for directory in directories:
                before = len(out)
                add("config", "graphics", f"{directory}/{name}")
                if len(out) > before:
                    break
        add("profile", "graphics", f"/usr/share/nvidia/nvidia-application-profiles-{version}-rc")
    return tuple(out)
