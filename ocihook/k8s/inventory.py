"""The devices a node advertises to kubelet, per extended resource, from host discovery.

:func:`build_inventory` discovers the host (NVIDIA through
:func:`ocihook.discovery.nvidia.discover`, AMD and Intel through
:func:`ocihook.discovery.drm.discover_vendor`) and makes one :class:`K8sDevice` per
schedulable unit:

* ``nvidia.com/gpu``: each GPU (MIG strategy ``none``); with ``single``, each MIG device of
  the MIG-enabled GPUs instead (GPUs without MIG are left out, with a warning); with
  ``mixed``, GPUs without MIG as ``nvidia.com/gpu`` and every MIG device as
  ``nvidia.com/mig`` (MIG profiles are not in ocihook's discovery records, so all MIG
  devices share one resource; NVIDIA's plugin names one resource per profile);
* ``amd.com/gpu``: each AMD GPU or compute partition;
* ``gpu.intel.com/<driver>``: each Intel GPU (``i915``, ``xe``), as Intel's plugin names them.

Time-slicing (``replicas`` > 1) advertises each unit ``replicas`` times with ids
``<id>::<n>`` (n from 0); every replica names the real device (:attr:`K8sDevice.real_id`),
which is what an allocation hands out.

Each device knows what makes it healthy (:func:`health`): its device nodes exist in the
dev root and its driver entry (``/proc/driver/nvidia/gpus/<bus id>``, the DRM device's
sysfs directory) exists. NUMA nodes come from ``/sys/bus/pci/devices/<bdf>/numa_node``
(``-1`` or missing: none).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace

from ..core.errors import ConfigError, DiscoveryError
from ..core.hostroot import HostRoot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..cdi.spec import Spec
    from ..discovery.records import DrmGpu, HostDeviceNode

__all__ = [
    "HEALTHY",
    "MIG_STRATEGIES",
    "RESOURCE_VENDORS",
    "UNHEALTHY",
    "Inventory",
    "K8sDevice",
    "build_inventory",
    "health",
]

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
#: MIG strategies, as NVIDIA's device plugin calls them.
MIG_STRATEGIES = ("none", "single", "mixed")
#: The vendors (``ocihook`` discovery names) behind each resource prefix.
RESOURCE_VENDORS = {"nvidia.com": "nvidia", "amd.com": "amd", "gpu.intel.com": "intel"}
#: Longest device id kubelet accepts (device plugin API: ``Device.ID``).
MAX_ID = 63


@dataclass(frozen=True)
class K8sDevice:
    """One device advertised to kubelet.

    Attributes:
        id: the ``Device.ID`` kubelet sees (at most 63 characters).
        resource: the extended resource (``nvidia.com/gpu``).
        real_id: the id of the device it stands for (itself unless a time-slicing replica).
        cdi_name: the qualified CDI name (``nvidia.com/gpu=GPU-...``) in the plugin's spec.
        visible: what ``NVIDIA_VISIBLE_DEVICES`` / ``AMD_VISIBLE_DEVICES`` /
            ``INTEL_VISIBLE_DEVICES`` names it by (envvar strategy).
        vendor: ``nvidia``, ``amd`` or ``intel``.
        bus_id: PCI address as sysfs spells it (``0000:07:00.0``).
        numa_node: the NUMA node of its PCI device, or ``None``.
        pci_switch: the PCIe switch it sits behind (the sysfs name of the switch's
            upstream port, ``0000:01:00.0``), or ``None`` when it hangs off a root port.
        nodes: host device nodes (container path, host path) it needs; their presence is
            part of its health.
        driver_entry: host path whose presence the driver keeps while the device lives.
        gpu_uuid: the NVIDIA GPU it is or is part of (a MIG device's parent), for NVML's
            lost-GPU reports; ``""`` for other vendors.
    """

    id: str
    resource: str
    real_id: str
    cdi_name: str
    visible: str
    vendor: str
    bus_id: str
    numa_node: int | None = None
    pci_switch: str | None = None
    nodes: tuple[tuple[str, str], ...] = ()
    driver_entry: str = ""
    gpu_uuid: str = ""


@dataclass(frozen=True)
class Inventory:
    """What :func:`build_inventory` found: devices by resource (in discovery order), the
    CDI specs (kind -> spec) the plugin writes, and warnings."""

    devices: dict[str, tuple[K8sDevice, ...]]
    specs: dict[str, Spec] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    driver_version: dict[str, str] = field(default_factory=dict)
    cuda_version: str | None = None


def _numa(root: HostRoot, bdf: str) -> int | None:
    from ..core.hostroot import read_attr

    text = read_attr(root.sys(f"bus/pci/devices/{bdf}/numa_node"))
    if text is None:
        return None
    try:
        n = int(text.strip())
    except ValueError:
        return None
    return n if n >= 0 else None


_BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


def _switch(root: HostRoot, bdf: str) -> str | None:
    """The upstream port of the PCIe switch above ``bdf``: in sysfs a device's directory
    (``/sys/devices/pci0000:00/<root port>/<switch up>/<switch down>/<device>``, linked
    from ``/sys/bus/pci/devices``) lies under its bridges, so the second bridge above the
    device is the switch's upstream port; ``None`` without two bridges above it."""
    try:
        real = os.path.realpath(root.sys(f"bus/pci/devices/{bdf}"))
    except OSError:
        return None
    parts = real.split(os.sep)[:-1]
    bridges = []
    for part in reversed(parts):
        if not _BDF.fullmatch(part):
            break
        bridges.append(part)
    return bridges[1] if len(bridges) >= 2 else None


def _sysfs_bdf(bus_id: str) -> str:
    """``00000000:07:00.0`` -> ``0000:07:00.0`` (sysfs spells the domain with 4 digits)."""
    domain, _, rest = bus_id.partition(":")
    return f"{domain[-4:]}:{rest}".lower()


def _node_pair(n: HostDeviceNode) -> tuple[str, str]:
    return (n.path, n.host_path)


def _check_id(device_id: str) -> str:
    if len(device_id) > MAX_ID:
        raise DiscoveryError(
            f"device id longer than {MAX_ID} characters (kubelet rejects it)", value=device_id
        )
    return device_id


def _nvidia(
    root: HostRoot, mig_strategy: str, warnings: list[str], command: Sequence[str] | None
) -> tuple[dict[str, list[K8sDevice]], Spec, str, str | None]:
    from ..cdi.generate import generate_spec
    from ..discovery.nvidia import discover

    host = discover(root)
    warnings.extend(host.warnings)
    spec = generate_spec(host, name_strategies=("index", "uuid"), hook_command=command)
    out: dict[str, list[K8sDevice]] = {}
    control = tuple(_node_pair(n) for n in host.control_nodes)
    for gpu in host.gpus:
        bdf = _sysfs_bdf(gpu.bus_id)
        numa = _numa(root, bdf)
        gpu_node = _node_pair(host.gpu_nodes[gpu.minor])
        whole = K8sDevice(
            id=_check_id(gpu.uuid),
            resource="nvidia.com/gpu",
            real_id=gpu.uuid,
            cdi_name=f"nvidia.com/gpu={gpu.uuid}",
            visible=gpu.uuid,
            vendor="nvidia",
            bus_id=bdf,
            numa_node=numa,
            pci_switch=_switch(root, bdf),
            nodes=(*control, gpu_node),
            driver_entry=gpu.proc_dir,
            gpu_uuid=gpu.uuid,
        )
        if mig_strategy == "none" or not gpu.mig_devices:
            if mig_strategy == "single" and not gpu.mig_devices:
                warnings.append(
                    f"GPU {gpu.index} ({gpu.uuid}) has MIG disabled: not advertised with the "
                    "single MIG strategy (use --mig-strategy mixed)"
                )
                continue
            out.setdefault("nvidia.com/gpu", []).append(whole)
            continue
        resource = "nvidia.com/gpu" if mig_strategy == "single" else "nvidia.com/mig"
        for pos, mig in enumerate(gpu.mig_devices):
            j = mig.nvml_index if mig.nvml_index is not None else pos
            index_name = f"{gpu.index}:{j}"
            device_id = mig.uuid or f"{gpu.uuid}::mig{mig.gi}.{mig.ci}"
            out.setdefault(resource, []).append(
                replace(
                    whole,
                    id=_check_id(device_id),
                    resource=resource,
                    real_id=device_id,
                    cdi_name=f"nvidia.com/gpu={mig.uuid or index_name}",
                    visible=mig.uuid or index_name,
                    nodes=(*whole.nodes, *(_node_pair(n) for n in mig.nodes)),
                )
            )
    return out, spec, host.driver_version, host.cuda_version


def _drm_id(g: DrmGpu) -> str:
    base = g.uuid or g.bus_id
    return base if g.partition is None else f"{base}-p{g.partition}"


def _drm(
    root: HostRoot, vendor: str, warnings: list[str], command: Sequence[str] | None
) -> tuple[dict[str, list[K8sDevice]], Spec, str | None]:
    from ..cdi.generate import DRM_KINDS, generate_drm_spec
    from ..discovery.drm import discover_vendor

    host = discover_vendor(vendor, root)
    warnings.extend(host.warnings)
    spec = generate_drm_spec(host, hook_command=command)
    shared = tuple(_node_pair(n) for n in host.shared_nodes)
    out: dict[str, list[K8sDevice]] = {}
    for g in host.gpus:
        resource = "amd.com/gpu" if vendor == "amd" else f"gpu.intel.com/{g.driver or 'i915'}"
        device_id = _check_id(_drm_id(g))
        out.setdefault(resource, []).append(
            K8sDevice(
                id=device_id,
                resource=resource,
                real_id=device_id,
                cdi_name=f"{DRM_KINDS[vendor]}={g.index}",
                visible=str(g.index),
                vendor=vendor,
                bus_id=g.bus_id,
                numa_node=_numa(root, g.bus_id),
                pci_switch=_switch(root, g.bus_id),
                nodes=(*shared, *(_node_pair(n) for n in g.nodes)),
                driver_entry=g.sysfs_dir,
            )
        )
    return out, spec, host.driver_version


def build_inventory(
    root: HostRoot | None = None,
    *,
    resources: Sequence[str] = (),
    mig_strategy: str = "none",
    replicas: int = 1,
    hook_command: Sequence[str] | None = None,
) -> Inventory:
    """Discover the host and list the devices to advertise (see the module docstring).

    Args:
        root: the host to read (default: ``/``).
        resources: resource prefixes or names to serve (``nvidia.com``, ``amd.com/gpu``);
            empty: every vendor whose driver is present.
        mig_strategy: one of :data:`MIG_STRATEGIES`.
        replicas: time-slicing replicas per device (1: no sharing).
        hook_command: argv prefix of ocihook in the CDI specs' hooks, as the container
            runtime on the host runs it (default: this installation).

    Returns:
        An :class:`Inventory`; a vendor whose discovery fails is left out with a warning
        when ``resources`` is empty, and raises otherwise.

    Raises:
        ConfigError: an unknown MIG strategy, resource or a replica count below 1.
        DiscoveryError: a requested vendor cannot be discovered, or no device at all.
    """
    from ..discovery.drm import present_vendors

    if mig_strategy not in MIG_STRATEGIES:
        raise ConfigError(
            f"unknown MIG strategy (use {', '.join(MIG_STRATEGIES)})",
            field="--mig-strategy",
            value=mig_strategy,
        )
    if replicas < 1:
        raise ConfigError(
            "time-slicing replicas must be at least 1", field="--replicas", value=replicas
        )
    root = root or HostRoot()
    wanted: list[str] = []
    for r in resources:
        prefix = r.split("/", 1)[0]
        if prefix not in RESOURCE_VENDORS:
            raise ConfigError(
                f"unknown resource (use {', '.join(RESOURCE_VENDORS)})", field="--resource", value=r
            )
        wanted.append(RESOURCE_VENDORS[prefix])
    explicit = bool(wanted)
    if not explicit:
        if os.path.exists(root.proc("driver/nvidia/version")):
            wanted.append("nvidia")
        wanted += [v for v in present_vendors(root) if v not in wanted]
    warnings: list[str] = []
    devices: dict[str, list[K8sDevice]] = {}
    specs: dict[str, Spec] = {}
    versions: dict[str, str] = {}
    cuda: str | None = None
    for vendor in dict.fromkeys(wanted):
        try:
            if vendor == "nvidia":
                found, spec, version, cuda = _nvidia(root, mig_strategy, warnings, hook_command)
            else:
                found, spec, drm_version = _drm(root, vendor, warnings, hook_command)
                version = drm_version or ""
        except DiscoveryError as e:
            if explicit:
                raise
            warnings.append(f"{vendor}: not advertised: {e}")
            continue
        specs[spec.kind] = spec
        if version:
            versions[vendor] = version
        for resource, devs in found.items():
            devices.setdefault(resource, []).extend(devs)
    if resources:
        keep = set(resources)
        devices = {r: d for r, d in devices.items() if r in keep or r.split("/", 1)[0] in keep}
    if not any(devices.values()):
        raise DiscoveryError(
            "no GPU to advertise", path=root.dev_root, hint="check the drivers and --resource"
        )
    if replicas > 1:
        devices = {
            r: [replace(d, id=_check_id(f"{d.id}::{n}")) for d in devs for n in range(replicas)]
            for r, devs in devices.items()
        }
    return Inventory(
        devices={r: tuple(d) for r, d in devices.items()},
        specs=specs,
        warnings=tuple(warnings),
        driver_version=versions,
        cuda_version=cuda,
    )


def health(device: K8sDevice, dev_root: str | None = None, lost: Collection[str] = ()) -> str:
    """:data:`HEALTHY` when every device node of ``device`` exists (a host path, or under
    ``dev_root`` when the host paths are relative), its driver entry exists and its GPU is
    not in ``lost`` (UUIDs the driver reports lost), else :data:`UNHEALTHY`. One ``lstat``
    per path; never raises."""
    if device.gpu_uuid and device.gpu_uuid in lost:
        return UNHEALTHY
    paths = [host for _, host in device.nodes]
    if device.driver_entry:
        paths.append(device.driver_entry)
    for p in paths:
        if dev_root is not None and not os.path.isabs(p):
            p = os.path.join(dev_root, p)
        if not os.path.lexists(p):
            return UNHEALTHY
    return HEALTHY
