"""NVIDIA host discovery: driver version, GPUs, device nodes and driver libraries.

Everything is read through a :class:`~ocihook.hostroot.HostRoot`:

* driver version — ``<proc>/driver/nvidia/version`` (the ``NVRM version:`` line);
* GPUs — ``<proc>/driver/nvidia/gpus/<bus id>/information`` (one directory per GPU);
* character device majors — ``<proc>/devices`` ("Character devices:" section);
* device nodes — ``<dev root>/dev/nvidiactl``, ``nvidia-uvm``, ``nvidia-uvm-tools``,
  ``nvidia<minor>``;
* libraries — the driver root's ``ld.so.cache``, matched by soname prefix per driver
  capability, each resolved *inside* the driver root and required to end with the driver
  version (libnvidia-container ``src/nvc_info.c``).

The result is an immutable :class:`NvidiaHost`; nothing here writes anything.
"""

from __future__ import annotations

import os

from .. import ldcache
from .._record import Record
from ..errors import DiscoveryError
from ..hostroot import HostRoot, read_text
from ..pathsafe import resolve_in_root
from .gpus import Gpu, HostDeviceNode, device_node, parse_gpu_information, read_gpus

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = [
    "CAPABILITY_LIBRARIES",
    "NVIDIA_MAJOR",
    "SUPPORTED_CAPABILITIES",
    "DriverLibrary",
    "Gpu",
    "HostDeviceNode",
    "NvidiaHost",
    "discover",
    "parse_devices",
    "parse_driver_version",
    "parse_gpu_information",
]

#: Major number of ``/dev/nvidia*`` (fixed by the driver, ``nvidia.ko``).
NVIDIA_MAJOR = 195
#: Minor of ``/dev/nvidiactl`` and ``/dev/nvidia-modeset``.
NVIDIACTL_MINOR = 255
NVIDIA_MODESET_MINOR = 254

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
}
#: The driver capabilities this version of ocihook can provide.
SUPPORTED_CAPABILITIES: frozenset[str] = frozenset(CAPABILITY_LIBRARIES)

# ld.so.cache flags of this machine's native 64-bit libraries (glibc dl-cache.h).
_NATIVE_ABI_FLAGS = {"x86_64": 0x0303, "aarch64": 0x0A03, "ppc64le": 0x0503}
# ELF e_machine of this machine (System V gABI).
_NATIVE_ELF_MACHINE = {"x86_64": 62, "aarch64": 183, "ppc64le": 21}


def _is_version(token: str) -> bool:
    """``N.N`` or ``N.N.N`` with ASCII digits."""
    parts = token.split(".")
    return 2 <= len(parts) <= 3 and all(p.isascii() and p.isdigit() for p in parts)


class DriverLibrary(Record):
    """One user-space driver library found through the driver root's ``ld.so.cache``.

    Attributes:
        capability: the driver capability that brings it ("utility", "compute").
        soname: the key of its ``ld.so.cache`` entry (``libcuda.so.1``).
        name: file name of the resolved library (``libcuda.so.535.261.03``).
        host_path: resolved host path of the regular file, driver root included.
        cache_path: the entry's path as the cache records it (driver-root terms).
        abi_flags: the entry's ``ld.so.cache`` flags (``0x0303`` = x86-64 libc6).
    """

    capability: str
    soname: str
    name: str
    host_path: str
    cache_path: str
    abi_flags: int


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
        libraries: the driver libraries of every supported capability.
        warnings: what was skipped and why (stale libraries, missing nodes).
    """

    root: HostRoot
    driver_version: str
    gpus: tuple[Gpu, ...]
    majors: Mapping[str, int]
    control_nodes: tuple[HostDeviceNode, ...]
    gpu_nodes: Mapping[int, HostDeviceNode]
    libraries: tuple[DriverLibrary, ...]
    warnings: tuple[str, ...] = ()

    def libraries_for(self, capabilities: Iterable[str]) -> tuple[DriverLibrary, ...]:
        """The libraries of the given capabilities, in discovery order."""
        wanted = set(capabilities)
        return tuple(lib for lib in self.libraries if lib.capability in wanted)


# -- parsers (pure) -------------------------------------------------------------------------


def parse_driver_version(text: str, *, path: str | None = None) -> str:
    """Return the driver version from the contents of ``/proc/driver/nvidia/version``.

    The first line reads ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  <date>``
    (proprietary module) or ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64
    580.95.05  Release Build ...`` (open module); the version is the first whole token of
    the form ``N.N`` or ``N.N.N`` after ``NVRM version:``.

    Raises:
        DiscoveryError: no ``NVRM version:`` line or no version on it.
    """
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            for token in line[len("NVRM version:") :].split():
                if _is_version(token):
                    return token
            break
    raise DiscoveryError(
        "no driver version in the NVRM version line",
        path=path,
        field="NVRM version",
        value=text.splitlines()[0] if text else "",
    )


def parse_devices(text: str) -> dict[str, int]:
    """Return the character device majors of a ``/proc/devices`` text, by driver name.

    Only the "Character devices:" section is read (block majors are a different number
    space). When one name appears twice the first major wins.
    """
    majors: dict[str, int] = {}
    in_char = False
    for line in text.splitlines():
        s = line.strip()
        if s.endswith(":"):
            in_char = s == "Character devices:"
            continue
        if not in_char or not s:
            continue
        num, _, name = s.partition(" ")
        if num.isdigit() and name.strip():
            majors.setdefault(name.strip(), int(num))
    return majors


# -- discovery (reads files) ---------------------------------------------------------------


def _pick_soname(keys: list[str], name: str) -> str:
    """Choose the soname among cache keys that all resolve to the file ``name``.

    ldconfig keys entries by DT_SONAME; an extra key such as the development link
    ``libcuda.so`` or the full file name may also appear. Prefer a key with a version
    suffix that is not the file name itself, then the file name.
    """
    versioned = [k for k in keys if ".so." in k]
    for k in versioned:
        if k != name:
            return k
    return versioned[0] if versioned else keys[0]


def _read_libraries(
    root: HostRoot, version: str, machine: str
) -> tuple[tuple[DriverLibrary, ...], list[str]]:
    warnings: list[str] = []
    cache_path = root.driver(root.ldcache)
    try:
        with open(cache_path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise DiscoveryError(
            "ld.so.cache not found in the driver root",
            path=cache_path,
            hint="run ldconfig in the driver root, or pass --ldcache",
        ) from None
    except OSError as e:
        raise DiscoveryError(f"cannot read ld.so.cache: {e.strerror}", path=cache_path) from None
    entries = ldcache.parse(data, path=cache_path)
    want_flags = _NATIVE_ABI_FLAGS.get(machine)
    suffix = "." + version
    libraries: list[DriverLibrary] = []
    for capability, prefixes in CAPABILITY_LIBRARIES.items():
        for prefix in prefixes:
            # resolved host path -> (cache keys, first entry)
            by_file: dict[str, tuple[list[str], ldcache.CacheEntry]] = {}
            for entry in entries:
                if not entry.soname.startswith(prefix) or entry.hwcap:
                    continue
                if want_flags is not None and entry.flags != want_flags:
                    continue
                rest = entry.soname[len(prefix) :]
                if rest and not rest.startswith("."):
                    continue  # libnvidia-pkcs11.so must not match libnvidia-pkcs11-openssl3
                host_path = resolve_in_root(root.driver_root, entry.path)
                if host_path in by_file:
                    by_file[host_path][0].append(entry.soname)
                else:
                    by_file[host_path] = ([entry.soname], entry)
            for host_path, (keys, entry) in by_file.items():
                name = os.path.basename(host_path)
                if not name.endswith(suffix):
                    warnings.append(
                        f"{entry.path} resolves to {name}, not a {version} library; skipped"
                    )
                    continue
                if not _is_native_elf(host_path, machine):
                    warnings.append(f"{host_path} is not a {machine} ELF file; skipped")
                    continue
                libraries.append(
                    DriverLibrary(
                        capability=capability,
                        soname=_pick_soname(keys, name),
                        name=name,
                        host_path=host_path,
                        cache_path=entry.path,
                        abi_flags=entry.flags,
                    )
                )
    return tuple(libraries), warnings


def _is_native_elf(path: str, machine: str) -> bool:
    """Cheap check of the ELF identification: magic, 64-bit class, this machine.

    Reads 20 bytes (e_ident and e_machine, System V gABI); pyelftools is not imported on
    this path because it runs on every container start.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] != 2:
        return False
    e_machine = head[18] | head[19] << 8 if head[5] == 1 else head[18] << 8 | head[19]
    want = _NATIVE_ELF_MACHINE.get(machine)
    return want is None or e_machine == want


def discover(root: HostRoot | None = None, *, machine: str | None = None) -> NvidiaHost:
    """Discover the NVIDIA driver and GPUs of a host.

    Args:
        root: where to read from (default: the real host, ``/``).
        machine: ``platform.machine()`` value to select libraries for (default: this one).

    Returns:
        An :class:`NvidiaHost`. A host with a driver but no GPU has ``gpus == ()``.

    Raises:
        DiscoveryError: no driver (``/proc/driver/nvidia/version`` missing), a malformed
            procfs file, a host device node that is not the device it should be, or a
            missing/malformed ``ld.so.cache`` in the driver root.
    """
    root = root or HostRoot()
    machine = machine or os.uname().machine
    version_path = root.proc("driver/nvidia/version")
    version = parse_driver_version(
        read_text(
            version_path,
            what="NVIDIA driver version file",
            missing_hint="is the NVIDIA kernel driver loaded? check --dev-root",
        ),
        path=version_path,
    )
    gpus, warnings = read_gpus(root)
    majors = parse_devices(read_text(root.proc("devices"), what="/proc/devices"))
    nvidia_major = majors.get("nvidia", majors.get("nvidia-frontend", NVIDIA_MAJOR))
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
    libraries, lib_warnings = _read_libraries(root, version, machine)
    warnings.extend(lib_warnings)
    return NvidiaHost(
        root=root,
        driver_version=version,
        gpus=gpus,
        majors=majors,
        control_nodes=tuple(control),
        gpu_nodes=gpu_nodes,
        libraries=libraries,
        warnings=tuple(warnings),
    )
