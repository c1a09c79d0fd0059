"""Discovery's records: what host discovery found, as immutable values (GPUs, MIG devices,
device nodes, DRM GPUs and hosts, WSL2 device sets). No I/O."""

from __future__ import annotations

import os

from ..core.records import Record
from ..core.vocab import IMPLIED_CAPABILITIES

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

    from ..core.hostroot import HostRoot


class HostDeviceNode(Record):
    """A character device node the container may need.

    Attributes:
        path: path in ``/dev`` terms (``/dev/nvidiactl``), the same inside the container.
        host_path: host path under the dev root.
        major, minor: the device number the kernel driver defines.
        file_mode: permission bits (``0o666`` when the host node is missing, or the
            driver's ``DeviceFileMode`` for a capability node).
        uid, gid: owner of the host node (0 when missing).
        present: whether the host node exists (and was checked to be this device).
    """

    path: str
    host_path: str
    major: int
    minor: int
    file_mode: int = 0o666
    uid: int = 0
    gid: int = 0
    present: bool = False


class MigDevice(Record):
    """One MIG device: compute instance ``ci`` of GPU instance ``gi`` of a GPU.

    A container that gets it needs the parent's ``/dev/nvidia<minor>`` and the two
    capability nodes below (NVIDIA MIG user guide, "Device Nodes and Capabilities").

    Attributes:
        parent_index: index of the parent GPU (PCI bus order).
        parent_minor: device minor of the parent GPU (the ``N`` of ``gpuN`` in
            ``mig-minors`` and of ``capabilities/gpuN``).
        gi: GPU instance id (``nvmlDeviceGetGpuInstanceId``).
        ci: compute instance id within that GPU instance (``nvmlDeviceGetComputeInstanceId``).
        gi_node: ``/dev/nvidia-caps/nvidia-cap<m>`` granting access to the GPU instance.
        ci_node: ``/dev/nvidia-caps/nvidia-cap<m>`` granting access to the compute instance.
        gi_cap_file: host path of ``.../capabilities/gpu<minor>/mig/gi<G>/access``.
        ci_cap_file: host path of ``.../capabilities/gpu<minor>/mig/gi<G>/ci<C>/access``.
        uuid: ``MIG-...`` from NVML; ``None`` from the procfs backend.
        nvml_index: NVML's index of the MIG device on its parent
            (``nvmlDeviceGetMigDeviceHandleByIndex``; the ``j`` of the toolkit's ``i:j``
            names); ``None`` from the procfs backend.
        profile: the MIG profile as NVIDIA's go-nvlib names it (``1g.10gb``,
            ``1c.2g.20gb``, ``1g.10gb+me``; see
            :func:`ocihook.discovery.nvml.mig_profile_name`), from NVML's GPU and compute
            instance profiles; ``None`` when unknown: always from the procfs backend
            (``/proc/driver/nvidia/capabilities`` gives the GI and CI ids, not the
            profile), and when NVML cannot tell.
        memory_mib: the MIG device's memory in MiB (NVML ``nvmlDeviceGetAttributes``
            ``memorySizeMB``); ``None`` when unknown (procfs backend).
    """

    parent_index: int
    parent_minor: int
    gi: int
    ci: int
    gi_node: HostDeviceNode
    ci_node: HostDeviceNode
    gi_cap_file: str
    ci_cap_file: str
    uuid: str | None = None
    nvml_index: int | None = None
    profile: str | None = None
    memory_mib: int | None = None

    @property
    def nodes(self) -> tuple[HostDeviceNode, HostDeviceNode]:
        """``(gi_node, ci_node)``."""
        return (self.gi_node, self.ci_node)


class Gpu(Record):
    """One NVIDIA GPU as the kernel driver (and NVML, when used) reports it.

    Attributes:
        index: position in PCI bus order (0-based), as ``nvidia-smi`` and NVML number them.
        minor: the ``N`` of ``/dev/nvidiaN`` ("Device Minor"); not necessarily ``index``.
        uuid: ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` as the driver prints it.
        bus_id: PCI address with an 8-digit domain, lowercase: ``00000000:3b:00.0``.
        model: marketing name ("NVIDIA H100 80GB HBM3").
        proc_dir: host path of the GPU's ``/proc/driver/nvidia/gpus/<bus id>`` directory.
        brand: NVML brand, lowercase (``"tesla"``, ``"geforce"``, ``"nvidia"``; see
            :data:`ocihook.discovery.nvml.BRAND_NAMES`), compared case-insensitively by
            ``NVIDIA_REQUIRE_*`` ``brand=``; ``None`` when unknown (procfs backend).
        architecture: CUDA compute capability ``"M.m"`` (``"9.0"``), the ``arch`` of
            ``NVIDIA_REQUIRE_*``; ``None`` when unknown (procfs backend).
        mig_devices: the GPU's MIG devices in ``(gi, ci)`` order; ``()`` without MIG.
        memory_mib: total memory in MiB (NVML ``nvmlDeviceGetMemoryInfo`` ``total`` //
            2**20, what ``nvidia-smi`` and GPU feature discovery report); ``None`` when
            unknown (procfs backend: the driver's procfs files do not give it).
        mig_capable: whether the GPU supports MIG (NVML answers ``nvmlDeviceGetMigMode``
            rather than ``NVML_ERROR_NOT_SUPPORTED``); ``None`` when unknown (procfs
            backend).
    """

    index: int
    minor: int
    uuid: str
    bus_id: str
    model: str
    proc_dir: str
    brand: str | None = None
    architecture: str | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    memory_mib: int | None = None
    mig_capable: bool | None = None

    @property
    def device_path(self) -> str:
        """Container path of the GPU's device node: ``/dev/nvidia<minor>``."""
        return f"/dev/nvidia{self.minor}"


class GpuInventory(Record):
    """What :func:`enumerate_gpus` found.

    Attributes:
        gpus: the GPUs in index order (NVML index order == PCI bus order).
        driver_version: ``"550.127.05"``; ``None`` when it could not be read.
        cuda_version: the CUDA version the driver supports, ``"12.4"``
            (``nvmlSystemGetCudaDriverVersion``); ``None`` from the procfs backend.
        backend: ``"procfs"`` or ``"nvml"``: the backend that produced ``gpus``.
        warnings: what was skipped or fell back, and why.
    """

    gpus: tuple[Gpu, ...]
    driver_version: str | None
    cuda_version: str | None
    backend: str
    warnings: tuple[str, ...] = ()


class DrmGpu(Record):
    """One GPU (or GPU partition) that a container gets through its DRM nodes.

    Attributes:
        vendor: ``"amd"`` or ``"intel"``.
        index: position in the vendor's order (AMD: as amd-ctk numbers them; Intel: PCI
            bus order), 0-based; what ``AMD_VISIBLE_DEVICES=1`` names.
        bus_id: PCI address as sysfs spells it (``0000:03:00.0``); a partition has its
            GPU's.
        render: ``/dev/dri/renderD<M>``.
        card: ``/dev/dri/card<N>``, or ``None`` when sysfs lists none.
        driver: the kernel driver (``amdgpu``, ``i915``, ``xe``).
        device_id: PCI device id (``0x740f``), or ``None`` when unknown.
        uuid: AMD ``GPU-`` + 16 hex digits of the KFD ``unique_id``; ``None`` for Intel or
            a GPU whose KFD node gives none.
        unique_id: the KFD ``unique_id`` as ``0x`` + hex (what ``AMD_VISIBLE_DEVICES``
            accepts), or ``None``.
        architecture: AMD ``gfx`` target (``gfx90a``) from KFD, or ``None``.
        partition: position of this partition within its GPU when the GPU is split into
            several (AMD compute partitions), else ``None``.
        compute_partition, memory_partition: the GPU's current modes (``DPX``, ``NPS1``)
            from sysfs, when it reports them.
        links: ``(link, target)`` symbolic links the container gets, e.g. Intel's
            ``/dev/dri/by-path/pci-0000:03:00.0-render -> ../renderD129``.
        sysfs_dir: host path of the device's sysfs directory (for messages).
    """

    vendor: str
    index: int
    bus_id: str
    render: HostDeviceNode
    card: HostDeviceNode | None = None
    driver: str = ""
    device_id: str | None = None
    uuid: str | None = None
    unique_id: str | None = None
    architecture: str | None = None
    partition: int | None = None
    compute_partition: str | None = None
    memory_partition: str | None = None
    links: tuple[tuple[str, str], ...] = ()
    sysfs_dir: str = ""

    def replace(self, **changes: Any) -> DrmGpu:
        """A copy with ``changes`` applied."""
        values = {name: getattr(self, name) for name in self.__fields__}
        values.update(changes)
        return DrmGpu(**values)

    @property
    def nodes(self) -> tuple[HostDeviceNode, ...]:
        """The card node (when there is one), then the render node."""
        return (self.card, self.render) if self.card is not None else (self.render,)

    @property
    def card_name(self) -> str | None:
        """``card<N>`` (the name Intel's tools use for a GPU), or ``None``."""
        return None if self.card is None else os.path.basename(self.card.path)

    @property
    def ident(self) -> str:
        """A stable id for messages and plans: the UUID when known, else the bus id."""
        return self.uuid or self.bus_id


class DrmHost(Record):
    """What one vendor backend found on a host. Immutable.

    Attributes:
        vendor: ``"amd"`` or ``"intel"``.
        root: where it was read from.
        gpus: the GPUs in index order.
        shared_nodes: nodes every container of this vendor needs with any GPU
            (``/dev/kfd`` for AMD; none for Intel).
        driver_version: the kernel module's ``version`` attribute, when it has one.
        warnings: what was skipped and why.
    """

    vendor: str
    root: HostRoot
    gpus: tuple[DrmGpu, ...]
    shared_nodes: tuple[HostDeviceNode, ...] = ()
    driver_version: str | None = None
    warnings: tuple[str, ...] = ()


class DriDevices(Record):
    """The DRM nodes of one GPU.

    Attributes:
        bus_id: the GPU's PCI address, 8-digit domain, lowercase (``00000000:3b:00.0``).
        card: ``/dev/dri/card<N>`` (``226:N``), or ``None`` when sysfs lists no card.
        render: ``/dev/dri/renderD<N>`` (``226:N``), or ``None``.
        links: symbolic links to make in the container, ``(link path, target)`` pairs such
            as ``("/dev/dri/by-path/pci-0000:3b:00.0-card", "../card1")``, one per node.
    """

    bus_id: str
    card: HostDeviceNode | None = None
    render: HostDeviceNode | None = None
    links: tuple[tuple[str, str], ...] = ()

    @property
    def nodes(self) -> tuple[HostDeviceNode, ...]:
        """The card and render nodes that exist in sysfs, card first."""
        return tuple(n for n in (self.card, self.render) if n is not None)


class WslFile(Record):
    """One file of the WSL2 driver.

    Attributes:
        name: the entry's name (``libcuda.so.1.1``).
        host_path: host path of the regular file, resolved inside the driver root (for a
            symbolic link: the file it leads to).
        link_target: the link's text when the entry is a symbolic link (``libcuda.so.1.1``
            for ``libcuda.so``), else ``None``.
        path: where the entry is in driver-root terms, which is also where a container
            gets it (``/usr/lib/wsl/drivers/nv_dispi.inf_amd64_<hash>/libcuda.so.1.1``).
        soname: the ELF ``DT_SONAME`` of a shared library among
            :data:`WSL_DRIVER_STORE_FILES` (``libcuda.so.1``), else ``None``.
    """

    name: str
    host_path: str
    link_target: str | None = None
    path: str = ""
    soname: str | None = None


class WslDevices(Record):
    """What a WSL2 host gives a container.

    Attributes:
        dxg: ``/dev/dxg``, the paravirtualised GPU (misc device, dynamic minor).
        lib_dir: host path of :data:`WSL_LIB_DIR` (resolved inside the driver root).
        libraries: every regular file in :data:`WSL_LIB_DIR` and every link there that
            leads to one, by name.
        driver_stores: host paths of the directories under :data:`WSL_DRIVERS_DIR` that
            hold at least one of :data:`WSL_DRIVER_STORE_FILES`, sorted.
        driver_files: each of :data:`WSL_DRIVER_STORE_FILES` found, in that order, from the
            first driver store holding it, else from :data:`WSL_LIB_DIR`.
        missing: the names of :data:`WSL_DRIVER_STORE_FILES` found nowhere.
        warnings: what was skipped and why (dangling links, several driver stores).
    """

    dxg: HostDeviceNode
    lib_dir: str
    libraries: tuple[WslFile, ...] = ()
    driver_stores: tuple[str, ...] = ()
    driver_files: tuple[WslFile, ...] = ()
    missing: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


# -- driver files (found by ocihook.discovery.driverfiles) --------------------------------


class DriverLibrary(Record):
    """One user-space driver library.

    Attributes:
        capability: the driver capability that brings it ("utility", "compute", "video",
            "graphics", "ngx").
        soname: its soname (``libcuda.so.1``): the ``ld.so.cache`` key, or for a library
            found outside the cache the name of its soname link (else its DT_SONAME).
        name: file name of the resolved library (``libcuda.so.535.261.03``).
        host_path: resolved host path of the regular file, driver root included.
        cache_path: the path the cache (or the fallback search) gave, driver-root terms.
        abi_flags: ``ld.so.cache`` flags (``0x0303`` = x86-64 libc6, ``0x0003`` = i386).
        elf_class: 64 or 32.
        path: ``host_path`` in driver-root terms.
    """

    capability: str
    soname: str
    name: str
    host_path: str
    cache_path: str
    abi_flags: int
    elf_class: int = 64
    path: str = ""


class DriverFile(Record):
    """A driver file other than a library.

    Attributes:
        kind: ``"binary"``, ``"firmware"``, ``"config"``, ``"ipc"`` or ``"profile"``.
        capability: the capability that brings it; ``"all"`` for files every GPU container
            gets (firmware).
        path: where it is, in driver-root terms, as users know it (``/usr/bin/nvidia-smi``,
            which may be a link); the container sees it at the same path.
        host_path: the resolved host file (driver root included).
        elf_class: 64 or 32 for binaries, else ``None``.
    """

    kind: str
    capability: str
    path: str
    host_path: str
    elf_class: int | None = None


def select_libraries(
    libraries: Iterable[DriverLibrary], capabilities: Iterable[str]
) -> tuple[DriverLibrary, ...]:
    """The libraries a container with ``capabilities`` gets, in discovery order.

    ``display`` implies the graphics libraries and ``video`` the compute ones; 64-bit
    libraries always, 32-bit ones only with ``compat32``.
    """
    wanted = set(capabilities)
    for cap in list(wanted):
        wanted.update(IMPLIED_CAPABILITIES.get(cap, ()))
    classes = {64, 32} if "compat32" in wanted else {64}
    return tuple(lib for lib in libraries if lib.capability in wanted and lib.elf_class in classes)
