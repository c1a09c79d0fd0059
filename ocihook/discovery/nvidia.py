"""NVIDIA host discovery: driver version, GPUs, device nodes and driver libraries.

Everything is read through a :class:`~ocihook.core.hostroot.HostRoot`:

* driver version — ``<proc>/driver/nvidia/version`` (the ``NVRM version:`` line);
* GPUs — ``<proc>/driver/nvidia/gpus/<bus id>/information`` (one directory per GPU);
* character device majors — ``<proc>/devices`` ("Character devices:" section);
* device nodes — ``<dev root>/dev/nvidiactl``, ``nvidia-uvm``, ``nvidia-uvm-tools``,
  ``nvidia<minor>``;
* libraries — the driver root's ``ld.so.cache``, matched by soname prefix per driver
  capability, each resolved *inside* the driver root and required to end with the driver
  version (libnvidia-container ``src/nvc_info.c``);
* the CUDA version the driver supports — from NVML when the GPUs were enumerated with it,
  else the ``"CUDA Version"`` of the ``.note.cuda.fwd_compatibility`` note of the driver's
  64-bit ``libcuda.so`` (when one was discovered and carries it), else the driver-branch
  table (:func:`host_cuda_version`).

The result is an immutable :class:`NvidiaHost`; nothing here writes anything.
"""

from __future__ import annotations

import os

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot, read_text
from ..core.records import Record
from ..core.vocab import DRIVER_CAPABILITIES, with_implied

# Only the records at import: a container's start with a warm discovery cache
# (:func:`discover_cached`) needs no discovery code, and its modules cost milliseconds.
# The functions that discover import what they use.
from .records import DriverFile, DriverLibrary, Gpu, GpuInventory, HostDeviceNode, select_libraries

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from .records import DriDevices, WslDevices

__all__ = [
    "BACKENDS",
    "NVIDIA_MAJOR",
    "SUPPORTED_CAPABILITIES",
    "DriverLibrary",
    "Gpu",
    "HostDeviceNode",
    "NvidiaHost",
    "discover",
    "enumerate_gpus",
    "host_cuda_version",
]

#: Major number of ``/dev/nvidia*`` (fixed by the driver, ``nvidia.ko``).
NVIDIA_MAJOR = 195
#: Minor of ``/dev/nvidiactl`` and ``/dev/nvidia-modeset``.
NVIDIACTL_MINOR = 255
NVIDIA_MODESET_MINOR = 254

#: The driver capabilities this version of ocihook puts in a plan; discovery finds the
#: files of every capability (see :mod:`ocihook.discovery.driverfiles`).
SUPPORTED_CAPABILITIES = DRIVER_CAPABILITIES


class NvidiaHost(Record):
    """Everything discovery found on an NVIDIA host. Immutable; safe to share.

    Attributes:
        root: where it was read from.
        driver_version: ``"535.261.03"``.
        gpus: the GPUs in index (PCI bus) order.
        majors: character device majors by driver name from ``/proc/devices``.
        control_nodes: ``/dev/nvidiactl``, ``/dev/nvidia-uvm``, ``/dev/nvidia-uvm-tools``
            (the uvm ones only when the ``nvidia-uvm`` module is loaded).
        gpu_nodes: ``/dev/nvidia<minor>`` per GPU minor.
        libraries: the driver libraries (64- and 32-bit) of the discovered capabilities.
        warnings: what was skipped and why (stale libraries, missing nodes).
        files: binaries, firmware, IPC paths, configuration files and the application
            profile of the discovered capabilities.
        modeset: ``/dev/nvidia-modeset`` (display capability), when graphics or display
            files were discovered.
        dri: the DRM card and render nodes and by-path links of each GPU, by bus id, when
            graphics or display files were discovered.
        wsl: the WSL2 devices and libraries when ``/dev/dxg`` exists, else ``None``. A
            WSL2 host (``/dev/dxg`` and no ``/proc/driver/nvidia``) has no ``gpus``,
            control nodes or ``libraries``: what a container gets is in ``wsl``.
        cuda_version: the CUDA version the driver supports (``"12.2"``), or ``None`` when
            no source knows it (see :func:`host_cuda_version`).
        gpu_backend: the GPU enumeration backend that was used (``"wsl"`` on WSL2: none).
        cuda_source: where ``cuda_version`` came from: ``"nvml"``, ``"elf-note"`` or
            ``"driver-branch"`` (:mod:`ocihook.core.cudaversion`); ``None`` with
            ``cuda_version``.
        searched: the host directories discovery looked in for binaries, firmware,
            configuration files, libraries the ``ld.so.cache`` does not list and WSL driver
            files, whether it found anything there or not (for a missing one, its deepest
            existing ancestor: :func:`ocihook.discovery.driverfiles.searched_dirs`), sorted: a
            file that appears in one changes what discovery finds (:func:`discovery_dirs`).
    """

    root: HostRoot
    driver_version: str
    gpus: tuple[Gpu, ...]
    majors: Mapping[str, int]
    control_nodes: tuple[HostDeviceNode, ...]
    gpu_nodes: Mapping[int, HostDeviceNode]
    libraries: tuple[DriverLibrary, ...]
    warnings: tuple[str, ...] = ()
    files: tuple[DriverFile, ...] = ()
    modeset: HostDeviceNode | None = None
    dri: Mapping[str, DriDevices] = {}
    wsl: WslDevices | None = None
    cuda_version: str | None = None
    gpu_backend: str = "procfs"
    cuda_source: str | None = None
    searched: tuple[str, ...] = ()

    def libraries_for(self, capabilities: Iterable[str]) -> tuple[DriverLibrary, ...]:
        """The libraries a container with ``capabilities`` gets (see
        :func:`~ocihook.discovery.driverfiles.select_libraries`), in discovery order."""
        return select_libraries(self.libraries, capabilities)

    def files_for(
        self, capabilities: Iterable[str], kinds: Iterable[str] | None = None
    ) -> tuple[DriverFile, ...]:
        """The non-library files a container with ``capabilities`` gets (firmware always),
        optionally only of ``kinds``."""
        wanted = set(capabilities) | {"all"}
        if "display" in wanted:
            wanted.add("graphics")
        want_kinds = None if kinds is None else set(kinds)
        return tuple(
            f
            for f in self.files
            if f.capability in wanted and (want_kinds is None or f.kind in want_kinds)
        )


# -- discovery (reads files) ---------------------------------------------------------------


def _device_file_defaults(root: HostRoot, warnings: list[str]) -> tuple[int, int, int]:
    """The driver's ``DeviceFileMode``/``UID``/``GID`` (``/proc/driver/nvidia/params``),
    or the module defaults with a warning when the file is unreadable or malformed."""
    from .procfs import DEVICE_FILE_DEFAULTS, parse_device_file_params

    path = root.proc("driver/nvidia/params")
    try:
        parsed = parse_device_file_params(read_text(path, what="NVIDIA driver parameters"))
    except DiscoveryError as e:
        warnings.append(f"{e.message}: new device nodes get mode 0666, owner root")
        return DEVICE_FILE_DEFAULTS
    if parsed is None:
        warnings.append(f"{path}: malformed DeviceFile* values; new nodes get mode 0666, root")
        return DEVICE_FILE_DEFAULTS
    return parsed


def discover(
    root: HostRoot | None = None,
    *,
    machine: str | None = None,
    capabilities: Iterable[str] | None = None,
    glvnd: bool = True,
    library_dirs: Sequence[str] = (),
    gpu_backend: str = "procfs",
) -> NvidiaHost:
    """Discover the NVIDIA driver, GPUs, device nodes and driver files of a host.

    Args:
        root: where to read from (default: the real host, ``/``).
        machine: ``uname -m`` value to select files for (default: this machine).
        capabilities: the driver capabilities whose files to look for (default: all);
            spec and hook mode pass what the container asked for, so that a compute
            container pays for nothing else.
        glvnd: look for the GLVND vendor libraries (default) or the non-GLVND ones.
        library_dirs: extra library directories (driver-root terms), searched for libraries
            the ``ld.so.cache`` does not list.
        gpu_backend: ``"procfs"`` (default: no dependency, cheapest on a container's start
            path), ``"nvml"`` (nvidia-ml-py: adds brand, architecture, CUDA version, MIG
            UUIDs) or ``"auto"`` (NVML when it works on this host, else procfs); see
            :func:`~ocihook.discovery.nvidia.enumerate_gpus`.

    Returns:
        An :class:`NvidiaHost`. A host with a driver but no GPU has ``gpus == ()``.

    A WSL2 host (``/dev/dxg`` under the dev root, no ``/proc/driver/nvidia/version``) is
    discovered as such: see :func:`_discover_wsl`.

    Every path is resolved inside the driver root once per directory
    (:class:`~ocihook.linux.pathsafe.RememberedResolutions`).

    Raises:
        DiscoveryError: no driver (``/proc/driver/nvidia/version`` missing), a malformed
            procfs file, a host device node that is not the device it should be, or a
            missing/malformed ``ld.so.cache`` in the driver root.
    """
    from ..linux.pathsafe import RememberedResolutions
    from .devices import device_node, with_driver_defaults
    from .driverfiles import (
        CAPABILITY_LIBRARIES,
        find_binaries,
        find_config_files,
        find_firmware,
        find_ipcs,
        find_libraries,
        searched_dirs,
    )
    from .procfs import parse_devices, parse_driver_version

    with RememberedResolutions():  # each driver-root directory walked once
        root = root or HostRoot()
        machine = machine or os.uname().machine
        for name, directory in (("driver root", root.driver_root), ("dev root", root.dev_root)):
            if not os.path.isdir(directory):
                raise DiscoveryError(
                    f"the {name} does not exist or is not a directory",
                    path=directory,
                    hint=f"check --{name.replace(' ', '-')}",
                )
        version_path = root.proc("driver/nvidia/version")
        if not os.path.exists(version_path) and os.path.lexists(root.dev("/dev/dxg")):
            return _discover_wsl(root, gpu_backend)
        version = parse_driver_version(
            read_text(
                version_path,
                what="NVIDIA driver version file",
                missing_hint="is the NVIDIA kernel driver loaded? check --dev-root",
            ),
            path=version_path,
        )
        majors = parse_devices(read_text(root.proc("devices"), what="/proc/devices"))
        inventory = enumerate_gpus(root, majors, backend=gpu_backend)
        gpus = inventory.gpus
        warnings = list(inventory.warnings)
        # The nvidia driver's major is fixed (nvidia.ko registers 195); a /proc/devices that
        # says otherwise is not trusted with the number of any device node.
        listed = majors.get("nvidia", majors.get("nvidia-frontend", NVIDIA_MAJOR))
        if listed != NVIDIA_MAJOR:
            raise DiscoveryError(
                f"the nvidia driver's major must be {NVIDIA_MAJOR}",
                path=root.proc("devices"),
                field="nvidia",
                value=listed,
            )
        nvidia_major = NVIDIA_MAJOR
        for g in gpus:
            if g.minor > NVIDIA_MODESET_MINOR - 1:
                raise DiscoveryError(
                    "GPU device minor out of range (0-253; 254 and 255 are modeset and nvidiactl)",
                    path=os.path.join(g.proc_dir, "information"),
                    field="Device Minor",
                    value=g.minor,
                )
        control = [device_node(root, "/dev/nvidiactl", nvidia_major, NVIDIACTL_MINOR)]
        uvm_major = majors.get("nvidia-uvm")
        if uvm_major is not None:
            control.append(device_node(root, "/dev/nvidia-uvm", uvm_major, 0))
            control.append(device_node(root, "/dev/nvidia-uvm-tools", uvm_major, 1))
        else:
            warnings.append("nvidia-uvm is not loaded (/proc/devices): no /dev/nvidia-uvm")
        gpu_nodes = {g.minor: device_node(root, g.device_path, nvidia_major, g.minor) for g in gpus}
        for node in (*control, *gpu_nodes.values()):
            if not node.present:
                warnings.append(f"{node.host_path} does not exist; the container gets a new node")
        if not all(n.present for n in (*control, *gpu_nodes.values())):
            # a node the container gets new is made as the driver makes its own nodes
            defaults = _device_file_defaults(root, warnings)
            control = [with_driver_defaults(n, defaults) for n in control]
            gpu_nodes = {m: with_driver_defaults(n, defaults) for m, n in gpu_nodes.items()}
        caps = set(CAPABILITY_LIBRARIES) if capabilities is None else set(capabilities)
        caps = with_implied(caps)
        lib_caps = [c for c in CAPABILITY_LIBRARIES if c in caps]
        classes = (64, 32) if capabilities is None or "compat32" in caps else (64,)
        looked: set[str] = set()  # directories searched, driver-root terms
        libraries, lib_warnings = find_libraries(
            root,
            version,
            machine=machine,
            capabilities=lib_caps,
            glvnd=glvnd,
            search_dirs=(*library_dirs, *root.library_dirs),
            elf_classes=classes,
            searched=looked,
        )
        warnings.extend(lib_warnings)
        binaries, bin_warnings = find_binaries(
            root, machine=machine, capabilities=lib_caps, searched=looked
        )
        warnings.extend(bin_warnings)
        files = (
            *binaries,
            *find_firmware(root, version, looked),
            *find_ipcs(root, lib_caps),
            *find_config_files(root, version, caps, looked),
        )
        modeset = None
        dri: dict[str, DriDevices] = {}
        if "graphics" in caps:
            from .devices import dri_nodes, modeset_node

            modeset = modeset_node(root, majors)
            dri = {g.bus_id: dri_nodes(root, g.bus_id) for g in gpus}
        wsl = None
        if os.path.lexists(root.dev("/dev/dxg")):  # WSL2 (the devices module on demand)
            from .devices import wsl_devices

            wsl = wsl_devices(root, looked)
        cuda, cuda_source = host_cuda_version(version, libraries, inventory.cuda_version)
        return NvidiaHost(
            root=root,
            driver_version=version,
            gpus=gpus,
            majors=majors,
            control_nodes=tuple(control),
            gpu_nodes=gpu_nodes,
            libraries=libraries,
            warnings=tuple(warnings),
            files=files,
            modeset=modeset,
            dri=dri,
            wsl=wsl,
            cuda_version=cuda,
            gpu_backend=inventory.backend,
            cuda_source=cuda_source,
            searched=tuple(searched_dirs(root, looked)),
        )


def host_cuda_version(
    driver_version: str, libraries: Sequence[DriverLibrary], nvml_version: str | None = None
) -> tuple[str | None, str | None]:
    """The CUDA version driver ``driver_version`` supports, from the cheapest source that
    is right, and the source's name (:mod:`ocihook.core.cudaversion`).

    Args:
        driver_version: the kernel module's version, ``"535.261.03"``.
        libraries: the discovered driver libraries; the first 64-bit ``libcuda.so.1``
            among them is read (a discovery without the ``compute`` libraries has none).
        nvml_version: what NVML reported (``nvmlSystemGetCudaDriverVersion``), if it ran.

    Returns:
        ``(version, source)``: ``(nvml_version, "nvml")`` when given; else the
        ``"CUDA Version"`` of the library's ``.note.cuda.fwd_compatibility`` note
        (:func:`ocihook.linux.elfscan.cuda_compat_note`: a few small reads of the
        library, never an exception), ``"elf-note"``; else the driver-branch table
        (:func:`ocihook.core.cudaversion.cuda_for_driver`), ``"driver-branch"``; else
        ``(None, None)``: a driver older or newer than the table knows, without note.
    """
    from ..core import cudaversion

    if nvml_version:
        return nvml_version, cudaversion.SOURCE_NVML
    libcuda = next(
        (lib for lib in libraries if lib.soname == "libcuda.so.1" and lib.elf_class == 64), None
    )
    if libcuda is not None:
        from ..linux.elfscan import cuda_compat_note

        note = cuda_compat_note(libcuda.host_path)
        if note is not None and note.cuda_version is not None:
            major, minor = note.cuda_version
            return f"{major}.{minor}", cudaversion.SOURCE_ELF_NOTE
    table = cudaversion.cuda_for_driver(driver_version)
    if table is not None:
        return table, cudaversion.SOURCE_DRIVER_BRANCH
    return None, None


def _discover_wsl(root: HostRoot, gpu_backend: str = "procfs") -> NvidiaHost:
    """A WSL2 host: ``/dev/dxg`` and the Windows driver's files, no procfs driver files.

    What a container gets follows the NVIDIA Container Toolkit's WSL mode
    (``pkg/nvcdi/lib-wsl.go``, ``driver-wsl.go``): ``/dev/dxg`` as the one device of every
    GPU, and the driver store files of :func:`~ocihook.discovery.devices.wsl_devices`.
    GPUs are not enumerated (``gpus == ()``): dxg does not give them one node each
    (``gpu_backend="nvml"`` says so in a warning). The
    driver version comes from the driver store's INF file
    (:func:`~ocihook.discovery.devices.wsl_driver_version`); ``""`` with a warning when it
    does not tell.

    Raises:
        DiscoveryError: ``/dev/dxg`` is not the dxg misc device, or none of the driver's
            files is in :data:`~ocihook.discovery.devices.WSL_LIB_DIR` or a driver store.
    """
    from .devices import WSL_DRIVERS_DIR, WSL_LIB_DIR, wsl_devices, wsl_driver_version
    from .driverfiles import searched_dirs
    from .procfs import parse_devices

    looked: set[str] = set()
    wsl = wsl_devices(root, looked)
    if wsl is None:  # pragma: no cover - removed between the two looks
        raise DiscoveryError("/dev/dxg disappeared while reading it", path=root.dev("/dev/dxg"))
    if not wsl.driver_files:
        raise DiscoveryError(
            f"a WSL2 host (/dev/dxg) without the NVIDIA driver files: none in {WSL_LIB_DIR} "
            f"or the driver stores of {WSL_DRIVERS_DIR}",
            path=wsl.lib_dir,
            hint="install the NVIDIA driver on Windows (WSL maps it into /usr/lib/wsl), or "
            "set --driver-root (driver-root) to the tree that holds usr/lib/wsl",
        )
    warnings = list(wsl.warnings)
    if gpu_backend == "nvml":
        warnings.append("GPUs are not enumerated on WSL2 (--gpu-backend nvml not used)")
    if wsl.missing:
        warnings.append("WSL driver files not found: " + ", ".join(wsl.missing))
    version, source = wsl_driver_version(root, wsl)
    if not version:
        warnings.append(
            f"the WSL driver version is unknown ({source}): CUDA forward compatibility and "
            "NVIDIA_REQUIRE_DRIVER checks are not applied"
        )
    devices_path = root.proc("devices")
    majors = (
        parse_devices(read_text(devices_path, what="/proc/devices"))
        if os.path.exists(devices_path)
        else {}
    )
    return NvidiaHost(
        root=root,
        driver_version=version,
        gpus=(),
        majors=majors,
        control_nodes=(),
        gpu_nodes={},
        libraries=(),
        warnings=tuple(warnings),
        wsl=wsl,
        gpu_backend="wsl",
        searched=tuple(searched_dirs(root, looked)),
    )


def discover_cached(
    root: HostRoot | None = None,
    *,
    capabilities: Iterable[str] | None = None,
    cache_dir: str | None = None,
    warm: bool = False,
) -> NvidiaHost:
    """:func:`discover` (procfs backend, this machine, GLVND) through the root-owned store
    :mod:`ocihook.linux.cachestore` in ``cache_dir`` (default
    :func:`~ocihook.linux.cachestore.store_dir`), keyed by
    :func:`ocihook.discovery.cache.host_key`: a result found for the host's current
    driver identity is used as is, otherwise the host is discovered and the result stored
    — when the directory exists, or is created when ``warm`` (``ocihook cdi generate
    --warm-cache``). ``warm`` always discovers and replaces the entry: the boot unit and
    the refresh rules run it after the host changed in ways no key may see.
    The same errors as :func:`discover`; the cache itself never makes it fail."""
    from ..linux import cachestore
    from . import cache

    root = root or HostRoot()
    directory = cache_dir or cachestore.store_dir()
    caps = None if capabilities is None else sorted(set(capabilities))
    try:
        key = cache.discovery_key(root, caps)
    except OSError:
        return discover(root, capabilities=caps)
    found = None if warm else cachestore.lookup(key, _CACHED_TYPES, directory, prefix=cache.PREFIX)
    if isinstance(found, NvidiaHost) and found.root == root:
        return found
    host = discover(root, capabilities=caps)
    if warm or os.path.isdir(directory):
        dirs = discovery_dirs(host)
        cachestore.store(key, host, dirs, directory, create=warm, prefix=cache.PREFIX)
    return host


def discovery_dirs(host: NvidiaHost) -> list[str]:
    """The host directories ``host`` was read from (sorted parents of its libraries, files
    and WSL driver files, the dev root's ``/dev``, the library directories) and those it
    looked in without finding anything (:attr:`NvidiaHost.searched`): a change in one
    makes a stored value computed from ``host`` stale (:mod:`ocihook.linux.cachestore`)."""
    from . import cache

    root = host.root
    paths = [lib.host_path for lib in host.libraries]
    paths += [root.driver(lib.cache_path) for lib in host.libraries if lib.cache_path]
    paths += [f.host_path for f in host.files]
    paths += [root.driver(f.path) for f in host.files]
    if host.wsl is not None:
        wsl_files = (*host.wsl.libraries, *host.wsl.driver_files)
        paths += [f.host_path for f in wsl_files]
        paths += [root.driver(f.path) for f in wsl_files]
    dirs = [*cache.source_dirs(paths), root.dev("/dev"), *host.searched]
    return dirs + [root.driver(d) for d in root.library_dirs]


#: The record classes a cached :class:`NvidiaHost` is made of.
_CACHED_TYPES: dict[str, type[Record]] = {}


#: The values :func:`enumerate_gpus` accepts for ``backend``.
BACKENDS = ("auto", "procfs", "nvml")


def enumerate_gpus(
    root: HostRoot, majors: Mapping[str, int], *, backend: str = "auto"
) -> GpuInventory:
    """Enumerate the host's GPUs and their MIG devices.

    Args:
        root: where to read procfs and device nodes from.
        majors: character majors by driver name (``parse_devices`` of ``/proc/devices``);
            ``nvidia-caps`` is needed for MIG device nodes (a warning without it).
        backend: ``"procfs"``; ``"nvml"`` (needs ``pynvml``: ``pip install
            'ocihook[nvml]'``); or ``"auto"``: NVML when ``import pynvml`` works and
            ``nvmlInit`` succeeds, else procfs — silently when pynvml is not installed,
            with a warning when NVML fails or describes other GPUs than procfs under
            ``root`` (NVML always describes the machine it runs on: a simulated root is
            enumerated from procfs).

    Returns:
        A :class:`GpuInventory`; ``backend`` says which backend produced it.

    Raises:
        ValueError: an unknown ``backend``.
        DiscoveryError: malformed procfs files, a host device node that is not the
            device it should be, or (``backend="nvml"`` only) NVML missing or failing.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    fallback: str | None = None
    if backend != "procfs":
        from . import nvml  # lazy: imports pynvml only when called

        try:
            return nvml.enumerate_nvml(root, majors)
        except nvml.NvmlError as e:
            if backend == "nvml":
                raise
            if not isinstance(e, nvml.NvmlNotInstalled):
                fallback = f"NVML not used ({e.message}); GPUs read from procfs"
    from .gpus import enumerate_procfs

    inventory = enumerate_procfs(root, majors)
    if fallback is None:
        return inventory
    return GpuInventory(
        gpus=inventory.gpus,
        driver_version=inventory.driver_version,
        cuda_version=None,
        backend="procfs",
        warnings=(fallback, *inventory.warnings),
    )


def _cached_types() -> None:
    from . import records

    for cls in (
        NvidiaHost,
        DriverLibrary,
        DriverFile,
        HostRoot,
        records.HostDeviceNode,
        records.MigDevice,
        records.Gpu,
        records.DriDevices,
        records.WslFile,
        records.WslDevices,
    ):
        _CACHED_TYPES[cls.__name__] = cls


_cached_types()
