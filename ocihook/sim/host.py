"""The built-in simulated GPU host: a small host tree that looks like a machine with an
NVIDIA driver and eight GPUs, for the demo and the tests on machines without a GPU.

:func:`build` writes, under one directory (usable as both driver root and dev root):

* ``proc/driver/nvidia/version`` (open kernel module format), ``params``, and
  ``gpus/<bus id>/information`` for each GPU — the device minors are deliberately *not*
  in PCI bus order for two GPUs, as happens on real machines;
* ``proc/devices`` with the ``nvidia``, ``nvidia-uvm`` and ``nvidia-caps`` majors;
* ``sys/module/nvidia/version``;
* ``sys/bus/pci/devices/<bus id>/drm/{cardN,renderDN}/dev`` for each GPU;
* MIG: ``proc/driver/nvidia-caps/mig-minors``, the ``capabilities`` files, and GPU 1
  split into two GPU instances (MIG devices ``1:0`` and ``1:1``; profiles ``3g.40gb`` and
  ``1g.10gb`` by default), with their ``dev/nvidia-caps`` nodes when root;
* ``dev/nvidiactl``, ``dev/nvidia-uvm``, ``dev/nvidia-uvm-tools``, ``dev/nvidia<minor>``,
  ``dev/nvidia-modeset`` and ``dev/dri/{cardN,renderDN,by-path/...}`` made with ``mknod``
  when running as root (skipped otherwise; spec mode does not need them);
* tiny but valid ELF shared objects with the real sonames and the driver version as file
  suffix (``libcuda.so.550.127.05``, DT_SONAME ``libcuda.so.1``), their soname links —
  two of them absolute, through ``/etc/alternatives`` like Debian's packages, so that
  only a driver-root-aware resolver finds them — and a stale library of an older driver;
* the 32-bit variants (i386 on x86_64, ARM EABI5 on aarch64) of ``libcuda.so`` and
  ``libnvidia-ml.so`` in the 32-bit library directory, listed in the cache with the 32-bit
  flags, so that ``compat32`` has something to select;
* the nvidia-persistenced IPC socket ``var/run/nvidia-persistenced/socket`` (a socket
  inode made with ``mknod``, which needs no privilege), mounted for ``utility``;
* ``etc/ld.so.conf`` and ``etc/ld.so.cache`` (new format, written by
  :func:`ocihook.linux.ldcache.build`);
* ``.ocihook-fixture.json`` describing what was built, for tests.

What a real driver tells only through NVML is modelled in the returned records, not in the
tree: each GPU's memory (:data:`GPU_MEMORY_MIB`) and each MIG device's UUID, NVML slot and
profile (:data:`MIG_PROFILES`: the GPU and compute instance profiles NVML would report).
Procfs discovery of the tree cannot see them, as on a real host; a stand-in NVML can be
described from them.

Nothing outside the destination directory is touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import stat

from ..core.records import Record
from ..linux import ldcache
from .elfwrite import make_shared_object

__all__ = [
    "DEFAULT_DRIVER_VERSION",
    "DEFAULT_MIG_PROFILES",
    "GPU_MEMORY_MIB",
    "LIBRARIES32",
    "MIG_PROFILES",
    "PERSISTENCED_SOCKET",
    "SimulatedGpu",
    "SimulatedHost",
    "SimulatedMig",
    "SimulatedMigProfile",
    "build",
]

DEFAULT_DRIVER_VERSION = "550.127.05"

#: (soname or None for "soname = file name", file stem, capability)
_LIBRARIES = (
    ("libnvidia-ml.so.1", "libnvidia-ml.so", "utility"),
    ("libnvidia-cfg.so.1", "libnvidia-cfg.so", "utility"),
    ("libcuda.so.1", "libcuda.so", "compute"),
    ("libcudadebugger.so.1", "libcudadebugger.so", "compute"),
    ("libnvidia-opencl.so.1", "libnvidia-opencl.so", "compute"),
    ("libnvidia-ptxjitcompiler.so.1", "libnvidia-ptxjitcompiler.so", "compute"),
    ("libnvidia-allocator.so.1", "libnvidia-allocator.so", "compute"),
    ("libnvidia-nvvm.so.4", "libnvidia-nvvm.so", "compute"),
    (None, "libnvidia-gpucomp.so", "compute"),
    (None, "libnvidia-pkcs11-openssl3.so", "compute"),
)
#: Libraries whose soname link goes through an absolute /etc/alternatives link.
_ALTERNATIVES = ("libcuda.so.1", "libnvidia-ml.so.1")

_BUS_NUMBERS = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)
_MINORS = (0, 1, 3, 2, 4, 5, 7, 6)  # minor != index for GPUs 2, 3, 6 and 7
_TRIPLETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
_ABI_FLAGS = {"x86_64": 0x0303, "aarch64": 0x0A03}
#: The 32-bit side of each machine: (ELF machine for elfwrite, triplet, ld.so.cache flags).
_MACHINES32 = {
    "x86_64": ("i386", "i386-linux-gnu", 0x0003),
    "aarch64": ("arm", "arm-linux-gnueabihf", 0x0903),
}
#: The libraries the simulated host also has in 32-bit form (soname, file stem).
LIBRARIES32 = (("libcuda.so.1", "libcuda.so"), ("libnvidia-ml.so.1", "libnvidia-ml.so"))
#: The nvidia-persistenced socket (driver-root terms).
PERSISTENCED_SOCKET = "/var/run/nvidia-persistenced/socket"

NVIDIA_MAJOR = 195
UVM_MAJOR = 237
CAPS_MAJOR = 240
#: GPU instances of the MIG-enabled GPU (index 1), each with compute instance 0.
MIG_INSTANCES = (1, 2)
#: Memory of each simulated GPU in MiB, as NVML reports an A100-SXM4-80GB's
#: (``nvmlDeviceGetMemoryInfo`` total / 2**20; ``nvidia-smi`` prints 81920MiB).
GPU_MEMORY_MIB = 81920


def _gi_minor(gpu_minor: int, gi: int) -> int:
    """The driver's minor of ``gpu<gpu_minor>/gi<gi>/access`` (``mig-minors``)."""
    return 3 + gpu_minor * 135 + gi * 9


def _cap_file(minor: int, mode: int) -> str:
    """A ``capabilities`` access file as the driver writes it."""
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


class SimulatedMigProfile(Record):
    """A MIG profile as NVML describes it.

    Attributes:
        name: the name NVIDIA's tools give it (``1g.10gb``).
        gi_profile: its ``NVML_GPU_INSTANCE_PROFILE_*`` value.
        gi_profile_id: the GPU instance profile id NVML reports (``nvidia-smi mig -lgip``).
        ci_profile: the ``NVML_COMPUTE_INSTANCE_PROFILE_*`` value of a compute instance
            that spans the GPU instance; ``ci_profile_id``: its id.
        slices: GPU (and compute) slices.
        memory_mib: the MIG device's memory in MiB (``nvmlDeviceGetAttributes``).
    """

    name: str
    gi_profile: int
    gi_profile_id: int
    ci_profile: int
    ci_profile_id: int
    slices: int
    memory_mib: int


#: The MIG profiles of the simulated GPUs by name: an A100 80GB's profiles and profile ids;
#: the memory sizes are the simulation's (each rounds to the size in the name by go-nvlib's
#: rule, :func:`ocihook.discovery.nvml.mig_memory_gb`).
MIG_PROFILES: dict[str, SimulatedMigProfile] = {
    p.name: p
    for p in (
        SimulatedMigProfile("1g.10gb", 0x0, 19, 0x0, 0, 1, 9728),
        SimulatedMigProfile("2g.20gb", 0x1, 14, 0x1, 1, 2, 19968),
        SimulatedMigProfile("3g.40gb", 0x2, 9, 0x2, 2, 3, 40192),
        SimulatedMigProfile("7g.80gb", 0x4, 0, 0x4, 4, 7, 80384),
    )
}
#: The profiles of GPU instances :data:`MIG_INSTANCES` of GPU 1, by default.
DEFAULT_MIG_PROFILES = ("3g.40gb", "1g.10gb")


class SimulatedMig(Record):
    """One MIG device of the simulated host: compute instance ``ci`` of GPU instance ``gi``,
    its NVML ``slot`` (``nvmlDeviceGetMigDeviceHandleByIndex``), ``uuid`` (``MIG-...``) and
    ``profile``."""

    gi: int
    ci: int
    slot: int
    uuid: str
    profile: SimulatedMigProfile


class SimulatedGpu(Record):
    """One GPU of the simulated host: ``index`` in bus order, its ``minor``, ``uuid``,
    ``bus_id`` (8-digit domain) and ``model``; what NVML would add: ``memory_mib`` and the
    ``mig_devices`` (``()`` for a GPU with MIG disabled)."""

    index: int
    minor: int
    uuid: str
    bus_id: str
    model: str
    memory_mib: int = GPU_MEMORY_MIB
    mig_devices: tuple[SimulatedMig, ...] = ()


class SimulatedHost(Record):
    """What :func:`build` made: the tree's ``root``, ``driver_version``, ``gpus``,
    ``libdir`` (driver-root terms) and whether ``dev_nodes`` were created."""

    root: str
    driver_version: str
    gpus: tuple[SimulatedGpu, ...]
    libdir: str
    dev_nodes: bool


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _mig_uuid(gpu_uuid: str, gi: int, ci: int) -> str:
    return "MIG-" + _uuid(f"{gpu_uuid}/gi{gi}/ci{ci}")[4:]


def write(path: str, data: str | bytes, mode: int = 0o644) -> None:
    """Write ``data`` (``str`` as UTF-8) to the file ``path`` of a simulated host tree,
    creating its parent directories and replacing any file there, then give it the
    permission bits ``mode`` (``chmod(2)``, not masked by the umask).

    Raises:
        OSError: a parent cannot be created or the file cannot be written.
    """
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    os.chmod(path, mode)


def symlink(target: str, link: str) -> None:
    """Make ``link`` a symbolic link to ``target`` (stored as given: absolute or relative to
    ``link``'s directory, ``symlink(7)``) in a simulated host tree, creating the parent
    directories and replacing whatever ``link`` was (a file or a link; not a directory).

    Raises:
        OSError: a parent cannot be created, or ``link`` is a directory.
    """
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)


def _mknod(path: str, major: int, minor: int) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, 0o666)


def build(
    dest: str,
    *,
    gpus: int = 8,
    driver_version: str = DEFAULT_DRIVER_VERSION,
    make_dev_nodes: bool | None = None,
    machine: str | None = None,
    model: str = "NVIDIA A100-SXM4-80GB",
    mig_profiles: tuple[str, ...] = DEFAULT_MIG_PROFILES,
) -> SimulatedHost:
    """Write a simulated NVIDIA host under ``dest`` (created if missing).

    Args:
        dest: directory to fill; pass it as both driver root and dev root.
        gpus: number of GPUs, 1 to 8.
        driver_version: version written in procfs and library names.
        make_dev_nodes: create ``dev/`` nodes with mknod; default: when running as root.
        machine: ``platform.machine()`` to build libraries for (x86_64 or aarch64).
        model: the GPUs' model name.
        mig_profiles: the profiles (names from :data:`MIG_PROFILES`) of GPU 1's GPU
            instances :data:`MIG_INSTANCES`, one each.

    Returns:
        A :class:`SimulatedHost` describing the tree.

    Raises:
        ValueError: ``gpus`` out of range, an unsupported machine, or ``mig_profiles`` not
            one known profile per GPU instance.
        OSError: ``dest`` is not writable.
    """
    if not 1 <= gpus <= len(_BUS_NUMBERS):
        raise ValueError(f"gpus must be between 1 and {len(_BUS_NUMBERS)}, not {gpus}")
    machine = machine or platform.machine()
    if machine not in _TRIPLETS:
        raise ValueError(f"unsupported machine {machine!r}; use one of {sorted(_TRIPLETS)}")
    if len(mig_profiles) != len(MIG_INSTANCES) or not set(mig_profiles) <= set(MIG_PROFILES):
        raise ValueError(
            f"mig_profiles must be {len(MIG_INSTANCES)} of {sorted(MIG_PROFILES)}, "
            f"not {mig_profiles!r}"
        )
    if make_dev_nodes is None:
        make_dev_nodes = os.geteuid() == 0
    root = os.path.abspath(dest)
    os.makedirs(root, exist_ok=True)
    proc = os.path.join(root, "proc")

    write(
        os.path.join(proc, "driver/nvidia/version"),
        f"NVRM version: NVIDIA UNIX Open Kernel Module for {machine}  {driver_version}  "
        "Release Build  (ocihook-simulated@localhost)  Thu Jan  1 00:00:00 UTC 2026\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n",
        0o444,
    )
    write(
        os.path.join(proc, "driver/nvidia/params"),
        "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"
        "DeviceFileGID: 0\nDeviceFileMode: 438\n",
        0o444,
    )
    sim_gpus: list[SimulatedGpu] = []
    for index in range(gpus):
        bus = _BUS_NUMBERS[index]
        bus_id = f"{0:08x}:{bus:02x}:00.0"
        minor = _MINORS[index] if gpus == len(_MINORS) else index
        uuid = _uuid(f"ocihook-sim-{driver_version}-{bus_id}")
        sim_gpus.append(SimulatedGpu(index, minor, uuid, bus_id, model))
        # Directory names use the 4-digit domain, as current drivers do.
        write(
            os.path.join(proc, f"driver/nvidia/gpus/0000:{bus:02x}:00.0/information"),
            f"Model: \t\t {model}\n"
            f"IRQ:   \t\t {120 + index}\n"
            f"GPU UUID: \t {uuid}\n"
            "Video BIOS: \t 92.00.45.00.06\n"
            "Bus Type: \t PCIe\n"
            "DMA Size: \t 47 bits\n"
            "DMA Mask: \t 0x7fffffffffff\n"
            f"Bus Location: \t 0000:{bus:02x}:00.0\n"
            f"Device Minor: \t {minor}\n"
            f"GPU Firmware: \t {driver_version}\n"
            "GPU Excluded:\t No\n",
            0o444,
        )
    write(
        os.path.join(proc, "devices"),
        "Character devices:\n  1 mem\n  4 /dev/vc/0\n  4 tty\n  5 /dev/tty\n  5 /dev/console\n"
        f"  5 /dev/ptmx\n 10 misc\n136 pts\n{NVIDIA_MAJOR} nvidia\n226 drm\n"
        f"{UVM_MAJOR} nvidia-uvm\n{CAPS_MAJOR} nvidia-caps\n\n"
        "Block devices:\n  7 loop\n  8 sd\n259 blkext\n",
        0o444,
    )
    write(os.path.join(root, "sys/module/nvidia/version"), driver_version + "\n", 0o444)

    # MIG: the driver's static minor table (config 1, monitor 2, then per GPU minor 15 GPU
    # instances of 9 minors: the GI's, then its 8 compute instances'), and GPU 1 split into
    # two GPU instances with one compute instance each (capability files as the driver
    # writes them, nvidia-caps major in /proc/devices).
    table = ["config 1", "monitor 2"]
    for m in range(8):
        for gi in range(15):
            table.append(f"gpu{m}/gi{gi}/access {_gi_minor(m, gi)}")
            table.extend(
                f"gpu{m}/gi{gi}/ci{ci}/access {_gi_minor(m, gi) + 1 + ci}" for ci in range(8)
            )
    write(os.path.join(proc, "driver/nvidia-caps/mig-minors"), "\n".join(table) + "\n", 0o444)
    caps = os.path.join(proc, "driver/nvidia/capabilities")
    write(os.path.join(caps, "mig/config"), _cap_file(1, 0o400), 0o444)
    write(os.path.join(caps, "mig/monitor"), _cap_file(2, 0o444), 0o444)
    mig_gpu = sim_gpus[1] if len(sim_gpus) > 1 else None
    mig_minors: list[int] = []
    if mig_gpu is not None:
        mig_gpu = mig_gpu.replace(
            mig_devices=tuple(
                SimulatedMig(gi, 0, slot, _mig_uuid(mig_gpu.uuid, gi, 0), MIG_PROFILES[name])
                for slot, (gi, name) in enumerate(zip(MIG_INSTANCES, mig_profiles, strict=True))
            )
        )
        sim_gpus[1] = mig_gpu
        for gi in MIG_INSTANCES:
            g_minor, c_minor = _gi_minor(mig_gpu.minor, gi), _gi_minor(mig_gpu.minor, gi) + 1
            base = os.path.join(caps, f"gpu{mig_gpu.minor}/mig/gi{gi}")
            write(os.path.join(base, "access"), _cap_file(g_minor, 0o444), 0o444)
            write(os.path.join(base, "ci0/access"), _cap_file(c_minor, 0o444), 0o444)
            mig_minors += [g_minor, c_minor]

    # sysfs: the DRM card and render nodes of each GPU (drivers/gpu/drm/drm_sysfs.c)
    for g in sim_gpus:
        pci = os.path.join(root, f"sys/bus/pci/devices/0000:{g.bus_id[9:]}/drm")
        write(os.path.join(pci, f"card{g.index + 1}/dev"), f"226:{g.index + 1}\n", 0o444)
        write(os.path.join(pci, f"renderD{128 + g.index}/dev"), f"226:{128 + g.index}\n", 0o444)
    if make_dev_nodes:
        dev = os.path.join(root, "dev")
        _mknod(os.path.join(dev, "nvidia-modeset"), NVIDIA_MAJOR, 254)
        for g in sim_gpus:
            _mknod(os.path.join(dev, f"dri/card{g.index + 1}"), 226, g.index + 1)
            _mknod(os.path.join(dev, f"dri/renderD{128 + g.index}"), 226, 128 + g.index)
            for kind, name in (
                ("card", f"card{g.index + 1}"),
                ("render", f"renderD{128 + g.index}"),
            ):
                symlink(
                    f"../{name}", os.path.join(dev, f"dri/by-path/pci-0000:{g.bus_id[9:]}-{kind}")
                )
        _mknod(os.path.join(dev, "nvidiactl"), NVIDIA_MAJOR, 255)
        for m in (1, 2, *mig_minors):
            _mknod(os.path.join(dev, f"nvidia-caps/nvidia-cap{m}"), CAPS_MAJOR, m)
            os.chmod(os.path.join(dev, f"nvidia-caps/nvidia-cap{m}"), 0o444 if m != 1 else 0o400)
        _mknod(os.path.join(dev, "nvidia-uvm"), UVM_MAJOR, 0)
        _mknod(os.path.join(dev, "nvidia-uvm-tools"), UVM_MAJOR, 1)
        for g in sim_gpus:
            _mknod(os.path.join(dev, f"nvidia{g.minor}"), NVIDIA_MAJOR, g.minor)

    triplet = _TRIPLETS[machine]
    libdir = f"/usr/lib/{triplet}"
    host_libdir = os.path.join(root, libdir.lstrip("/"))
    entries: list[ldcache.CacheEntry] = []
    for soname, stem, _cap in _LIBRARIES:
        name = f"{stem}.{driver_version}"
        key = soname or name
        sub = "nvidia/current/" if soname in _ALTERNATIVES else ""
        data = make_shared_object(key, elf_class=64, machine=machine)
        write(os.path.join(host_libdir, sub + name), data)
        if soname is not None:
            symlink(name, os.path.join(host_libdir, sub + soname))
            if sub:
                # Debian style: libdir/libcuda.so.1 -> /etc/alternatives/libcuda.so.1
                #               -> /usr/lib/<triplet>/nvidia/current/libcuda.so.1
                symlink(f"/etc/alternatives/{soname}", os.path.join(host_libdir, soname))
                symlink(
                    f"{libdir}/nvidia/current/{soname}",
                    os.path.join(root, "etc/alternatives", soname),
                )
        entries.append(ldcache.CacheEntry(key, f"{libdir}/{key}", _ABI_FLAGS[machine]))
    # A stale library of an older driver, reachable from the cache under a prefix that
    # discovery matches: it must never be selected.
    stale = "libnvidia-cfg.so.470.57.02"
    write(
        os.path.join(host_libdir, "old", stale),
        make_shared_object("libnvidia-cfg.so.1", elf_class=64, machine=machine),
    )
    entries.append(ldcache.CacheEntry("libnvidia-cfg.so.1", f"{libdir}/old/{stale}", 0x0303))
    machine32, triplet32, flags32 = _MACHINES32[machine]
    libdir32 = f"/usr/lib/{triplet32}"
    for soname, stem in LIBRARIES32:
        name = f"{stem}.{driver_version}"
        data = make_shared_object(soname, elf_class=32, machine=machine32)
        write(os.path.join(root, libdir32.lstrip("/"), name), data)
        symlink(name, os.path.join(root, libdir32.lstrip("/"), soname))
        entries.append(ldcache.CacheEntry(soname, f"{libdir32}/{soname}", flags32))
    socket_path = os.path.join(root, PERSISTENCED_SOCKET.lstrip("/"))
    os.makedirs(os.path.dirname(socket_path), exist_ok=True)
    if os.path.lexists(socket_path):
        os.unlink(socket_path)
    os.mknod(socket_path, 0o666 | stat.S_IFSOCK)
    write(os.path.join(root, "etc/ld.so.conf"), f"{libdir}\n{libdir}/old\n{libdir32}\n")
    write(os.path.join(root, "etc/ld.so.cache"), ldcache.build(entries))

    host = SimulatedHost(root, driver_version, tuple(sim_gpus), libdir, make_dev_nodes)
    write(
        os.path.join(root, ".ocihook-fixture.json"),
        json.dumps(
            {
                "driver_version": driver_version,
                "libdir": libdir,
                "dev_nodes": make_dev_nodes,
                "majors": {"nvidia": NVIDIA_MAJOR, "nvidia-uvm": UVM_MAJOR},
                "gpus": [
                    {
                        "index": g.index,
                        "minor": g.minor,
                        "uuid": g.uuid,
                        "bus_id": g.bus_id,
                        "model": g.model,
                        "memory_mib": g.memory_mib,
                        "mig": [
                            {"gi": m.gi, "ci": m.ci, "uuid": m.uuid, "profile": m.profile.name}
                            for m in g.mig_devices
                        ],
                    }
                    for g in sim_gpus
                ],
                "libraries": [
                    {"soname": s or f"{stem}.{driver_version}", "capability": cap}
                    for s, stem, cap in _LIBRARIES
                ],
                "libdir32": libdir32,
                "libraries32": [s for s, _stem in LIBRARIES32],
                "ipc": [PERSISTENCED_SOCKET],
            },
            indent=2,
        )
        + "\n",
    )
    return host
