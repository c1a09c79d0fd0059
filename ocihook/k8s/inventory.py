"""The devices a node advertises to kubelet, per extended resource, from host discovery.

:func:`build_inventory` discovers the host (NVIDIA through
:func:`ocihook.discovery.nvidia.discover`, AMD and Intel through
:func:`ocihook.discovery.drm.discover_vendor`) and makes one :class:`K8sDevice` per
schedulable unit:

* ``nvidia.com/gpu``: each GPU (MIG strategy ``none``);
* MIG strategy ``mixed`` (NVIDIA's device plugin): GPUs without MIG as ``nvidia.com/gpu``,
  every MIG device as the resource of its profile, ``nvidia.com/mig-<profile>``
  (:func:`mig_resource_name`: ``nvidia.com/mig-1g.10gb``, ``nvidia.com/mig-3g.40gb``), one
  resource (and so one plugin socket) per profile. Profiles come from NVML only
  (``gpu_backend`` ``nvml`` or ``auto``): the procfs capability tree gives a MIG device's
  GPU and compute instance ids, not its profile. A MIG device whose profile is unknown is
  advertised as ``nvidia.com/mig``, with a warning saying why; no profile is guessed;
* MIG strategy ``single``: each MIG device as ``nvidia.com/gpu``, which requires every MIG
  device to have the same profile (a :class:`~ocihook.core.errors.ConfigError` names the
  profiles otherwise; profiles unknown: a warning that this was not checked). GPUs without
  MIG are left out with a warning; when no GPU has MIG devices the strategy falls back to
  ``none`` (as NVIDIA's plugin does), with a warning;
* ``amd.com/gpu``: each AMD GPU or compute partition;
* ``gpu.intel.com/<driver>``: each Intel GPU (``i915``, ``xe``), as Intel's plugin names them.

Time-slicing (``replicas`` > 1, or per resource: :class:`Sharing`, NVIDIA's
``sharing.timeSlicing``) advertises each unit ``replicas`` times with ids ``<id>::<n>`` (n
from 0), under the resource's own name or another (``nvidia.com/gpu.shared``); every
replica names the real device (:attr:`K8sDevice.real_id`), which is what an allocation
hands out.

NVIDIA devices are known to kubelet by their UUIDs (device id strategy ``uuid``) or by
their indices (``index``: ``0``, MIG ``1:0``), as NVIDIA's device plugin's
``--device-id-strategy`` has it; the CDI names and the ``NVIDIA_VISIBLE_DEVICES`` values
follow.

Each device knows what makes it healthy (:func:`health`): its device nodes exist in the
dev root and its driver entry (``/proc/driver/nvidia/gpus/<bus id>``, the DRM device's
sysfs directory) exists. NUMA nodes come from ``/sys/bus/pci/devices/<bdf>/numa_node``
(``-1`` or missing: none).

A plugin in a container sees the host's driver root and dev root where the container
mounts them (``/host``), not where the host's container runtime finds them. A
:class:`RootView` says where: discovery reads the host there, and every host path the
inventory hands out (the CDI specs, :attr:`K8sDevice.nodes`, :attr:`K8sDevice.driver_entry`)
is the host's own path; :func:`health` looks through the view. NVIDIA's device plugin has
the same pair of settings, ``--driver-root`` (the host's path) and
``--container-driver-root`` (the plugin's view of it; ``cmd/nvidia-device-plugin/main.go``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ..cdi.generate import K8S_KINDS, generate_drm_spec, generate_spec, map_host_paths
from ..cdi.spec import Spec
from ..core.errors import ConfigError, DiscoveryError
from ..core.hostroot import HostRoot, read_attr
from ..discovery.drm import discover_vendor, present_vendors
from ..discovery.nvidia import BACKENDS, NvidiaHost, discover
from ..discovery.nvml import NvmlError
from ..discovery.records import DrmGpu, Gpu, HostDeviceNode, MigDevice

__all__ = [
    "DEVICE_ID_STRATEGIES",
    "HEALTHY",
    "MIG_RESOURCE",
    "MIG_STRATEGIES",
    "RESOURCE_VENDORS",
    "UNHEALTHY",
    "Inventory",
    "K8sDevice",
    "RootView",
    "Sharing",
    "build_inventory",
    "health",
    "mig_resource_name",
]

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
#: MIG strategies, as NVIDIA's device plugin calls them.
MIG_STRATEGIES = ("none", "single", "mixed")
#: How NVIDIA devices are named to kubelet (NVIDIA's ``--device-id-strategy``).
DEVICE_ID_STRATEGIES = ("uuid", "index")
#: The vendors (``ocihook`` discovery names) behind each resource prefix.
RESOURCE_VENDORS = {"nvidia.com": "nvidia", "amd.com": "amd", "gpu.intel.com": "intel"}
#: Longest device id kubelet accepts (device plugin API: ``Device.ID``).
MAX_ID = 63
#: The resource of MIG devices whose profile is unknown (``mixed`` strategy).
MIG_RESOURCE = "nvidia.com/mig"
_RESOURCE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
#: Why a procfs-only inventory has no MIG profiles.
_PROCFS_NO_PROFILES = (
    "the procfs GPU backend cannot tell them: /proc/driver/nvidia/capabilities gives each "
    "MIG device's GPU and compute instance ids, not its profile; use --gpu-backend nvml "
    "(nvidia-ml-py)"
)


def mig_resource_name(profile: str) -> str:
    """The extended resource of MIG devices of ``profile`` with the ``mixed`` strategy:
    ``nvidia.com/mig-`` + the profile with ``+`` spelt ``.`` (NVIDIA's device plugin,
    ``internal/resource/nvml-mig-device.go`` ``GetName``): ``1g.10gb`` ->
    ``nvidia.com/mig-1g.10gb``, ``1g.10gb+me`` -> ``nvidia.com/mig-1g.10gb.me``.

    Raises:
        ValueError: the result is not a valid extended resource name (the part after the
            ``/`` must be a Kubernetes qualified name: at most 63 characters of
            ``[A-Za-z0-9_.-]``, alphanumeric at both ends).
    """
    name = "mig-" + profile.replace("+", ".")
    if not _RESOURCE_NAME.fullmatch(name):
        raise ValueError(f"no valid resource name for MIG profile {profile!r}")
    return f"nvidia.com/{name}"


@dataclass(frozen=True)
class K8sDevice:
    """One device advertised to kubelet.

    Attributes:
        id: the ``Device.ID`` kubelet sees (at most 63 characters).
        resource: the extended resource (``nvidia.com/gpu``).
        real_id: the id of the device it stands for (itself unless a time-slicing replica).
        cdi_name: the qualified CDI name in the plugin's spec, of its vendor's kind
            (:data:`~ocihook.cdi.generate.K8S_KINDS`: ``k8s.ocihook.io/nvidia-gpu=GPU-...``).
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
        model: the product name (a MIG device's: its GPU's); ``""`` when unknown.
        memory_mib: its memory in MiB (a MIG device's own), or ``None`` when unknown
            (NVIDIA: NVML only).
        mig: whether it is a MIG device.
        mig_profile: a MIG device's profile (``1g.10gb``), or ``None`` when unknown.
        mig_instance: a MIG device's (GPU instance id, compute instance id) on its GPU, as
            NVML's XID events name it; ``None`` for a whole GPU.
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
    model: str = ""
    memory_mib: int | None = None
    mig: bool = False
    mig_profile: str | None = None
    mig_instance: tuple[int, int] | None = None


def _rest(path: str, root: str) -> str | None:
    """What ``path`` has below ``root`` (``""`` for ``root`` itself, else starting with
    ``/``), or ``None`` when ``path`` is not ``root`` or under it (whole components)."""
    base = root.rstrip("/")
    if not base:  # root is /
        return None if not path.startswith("/") else "" if path == "/" else path
    if path == base:
        return ""
    return path[len(base) :] if path.startswith(base + "/") else None


def _below(root: str, rest: str) -> str:
    return (root.rstrip("/") + rest) or "/"


def _norm(path: str) -> str:
    """``path`` (absolute) normalised lexically, one leading slash (POSIX ``normpath``
    keeps ``//``)."""
    return "/" + os.path.normpath(path).lstrip("/")


@dataclass(frozen=True)
class RootView:
    """Where this process sees the host's driver root and dev root.

    Attributes:
        driver_root: the driver root as the host's container runtime sees it (``/``,
            ``/run/nvidia/driver``): what the CDI specs and Allocate name.
        container_driver_root: where this process sees it (``/host``).
        dev_root: the dev root (``dev/``, ``proc/``, ``sys/``) as the host sees it.
        container_dev_root: where this process sees it.

    A host path is seen under the longest of the two host roots holding it; a path seen
    under the longest of the two seen roots holding it is that root's host path plus the
    rest. A path under neither is the same in both views.
    """

    driver_root: str = "/"
    container_driver_root: str = "/"
    dev_root: str = "/"
    container_dev_root: str = "/"

    @classmethod
    def of(
        cls,
        host: HostRoot,
        container_driver_root: str | None = None,
        container_dev_root: str | None = None,
    ) -> RootView:
        """The view of ``host`` (its roots as the host sees them: ``--driver-root``,
        ``--dev-root``) from a process that sees the driver root at
        ``container_driver_root`` (default: where the host has it) and the dev root at
        ``container_dev_root`` (default: under the container driver root when the dev
        root lies under the driver root, as ``/`` does under ``/``; else where the host has
        it).

        Raises:
            ConfigError: a relative path, or both roots seen at one path although they are
                two directories of the host (a path read there could not be told apart).
        """
        for name, value in (
            ("--container-driver-root", container_driver_root),
            ("--container-dev-root", container_dev_root),
        ):
            if value is not None and not value.startswith("/"):
                raise ConfigError("must be an absolute path", field=name, value=value)
        driver = _norm(host.driver_root)
        dev = _norm(host.dev_root)
        seen_driver = _norm(container_driver_root or driver)
        if container_dev_root is not None:
            seen_dev = _norm(container_dev_root)
        else:
            rest = _rest(dev, driver)
            seen_dev = dev if rest is None else _below(seen_driver, rest)
        if seen_driver == seen_dev and driver != dev:
            raise ConfigError(
                f"the driver root ({driver}) and the dev root ({dev}) are two directories of "
                f"the host but both would be read at {seen_driver}",
                field="--container-dev-root",
                value=container_dev_root,
                hint="give --container-dev-root where this process sees the host's dev root",
            )
        return cls(driver, seen_driver, dev, seen_dev)

    @property
    def identity(self) -> bool:
        """Whether both roots are seen where the host has them (no path changes)."""
        return (
            self.driver_root == self.container_driver_root
            and self.dev_root == self.container_dev_root
        )

    def _pairs(self) -> tuple[tuple[str, str], tuple[str, str]]:
        return (
            (self.driver_root, self.container_driver_root),
            (self.dev_root, self.container_dev_root),
        )

    @staticmethod
    def _swap(path: str, pairs: Sequence[tuple[str, str]]) -> str:
        best: tuple[int, str] | None = None
        for old, new in pairs:
            rest = _rest(path, old)
            if rest is not None and (best is None or len(old) > best[0]):
                best = (len(old), _below(new, rest))
        return path if best is None else best[1]

    def seen(self, host_path: str) -> str:
        """Where this process finds the host's ``host_path``."""
        return self._swap(host_path, self._pairs())

    def to_host(self, seen_path: str) -> str:
        """The host's path of ``seen_path`` (a path this process read)."""
        return self._swap(seen_path, [(new, old) for old, new in self._pairs()])

    def read_root(self, host: HostRoot) -> HostRoot:
        """``host`` (the host's own roots) as this process reads it: its driver root and
        dev root, and its procfs and sysfs roots when set, where this process sees them."""
        return host.replace(
            driver_root=self.seen(host.driver_root),
            dev_root=self.seen(host.dev_root),
            proc_root=None if host.proc_root is None else self.seen(host.proc_root),
            sys_root=None if host.sys_root is None else self.seen(host.sys_root),
        )


@dataclass(frozen=True)
class Sharing:
    """Time-slicing of one resource (NVIDIA's ``sharing.timeSlicing.resources[]``).

    Attributes:
        replicas: how many times each of its devices is advertised.
        name: the resource name the replicas are advertised under (``nvidia.com/gpu.shared``
            with NVIDIA's ``renameByDefault``); ``None``: the resource's own.
    """

    replicas: int
    name: str | None = None


@dataclass(frozen=True)
class Inventory:
    """What :func:`build_inventory` found.

    Attributes:
        devices: devices by resource, in discovery order.
        specs: the CDI specs (kind -> spec) the plugin writes, one per GPU vendor, of the
            plugins' own kinds (:data:`~ocihook.cdi.generate.K8S_KINDS`).
        warnings: what was left out or is unknown, and why.
        driver_version: driver version by vendor.
        cuda_version: the CUDA version the NVIDIA driver supports (discovery's: NVML, the
            driver's ``libcuda`` note or the driver-branch table), or ``None``.
        nvidia_gpus: the NVIDIA GPUs as discovery found them (with their MIG devices),
            whether advertised or not.
        mig_strategy: the MIG strategy asked for (``single`` falls back to ``none``, with
            a warning, when no GPU has MIG devices).
        replicas: time-slicing replicas per device (``--replicas``; per resource:
            :attr:`sharing`).
        sharing: the time-slicing applied, by resource (its name before any renaming).
        device_id_strategy: ``uuid`` or ``index`` (:data:`DEVICE_ID_STRATEGIES`).
        gpu_backend: the NVIDIA GPU backend that was used (``procfs``, ``nvml``), or
            ``None`` without NVIDIA GPUs.
        view: where discovery read the host (``None``: where the host has it); the
            health checks look through it.
        machine: the machine's product name (sysfs ``class/dmi/id/product_name``, what
            GPU feature discovery labels ``nvidia.com/gpu.machine``), or ``None`` when
            sysfs does not give it.
    """

    devices: dict[str, tuple[K8sDevice, ...]]
    specs: dict[str, Spec] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    driver_version: dict[str, str] = field(default_factory=dict)
    cuda_version: str | None = None
    nvidia_gpus: tuple[Gpu, ...] = ()
    mig_strategy: str = "none"
    replicas: int = 1
    gpu_backend: str | None = None
    view: RootView | None = None
    sharing: dict[str, Sharing] = field(default_factory=dict)
    device_id_strategy: str = "uuid"
    machine: str | None = None

    def replicas_of(self, resource: str) -> int:
        """The time-slicing replicas of ``resource`` (its own name); 1 when not shared."""
        shared = self.sharing.get(resource)
        return shared.replicas if shared is not None else 1

    def advertised(self, resource: str) -> str:
        """The name ``resource`` is advertised under (another one when shared renamed)."""
        shared = self.sharing.get(resource)
        return shared.name if shared is not None and shared.name else resource


def _numa(root: HostRoot, bdf: str) -> int | None:

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


def _check_mig_profiles(
    strategy: str, migs: Sequence[MigDevice], backend: str, warnings: list[str]
) -> None:
    """Say which MIG profiles are unknown and why; with ``single``, require one profile.

    Raises:
        ConfigError: ``single`` and MIG devices of more than one (known) profile.
    """
    unknown = sum(m.profile is None for m in migs)
    if unknown:
        why = (
            _PROCFS_NO_PROFILES
            if backend == "procfs"
            else "NVML did not tell them (see its warnings)"
        )
        then = (
            f"advertised as {MIG_RESOURCE}, not per profile"
            if strategy == "mixed"
            else "the single strategy's check that every MIG device has one profile was not made"
        )
        warnings.append(
            f"the MIG profile of {unknown} of {len(migs)} MIG devices is unknown ({why}): {then}"
        )
    if strategy != "single":
        return
    counts: dict[str, int] = {}
    for m in migs:
        if m.profile is not None:
            counts[m.profile] = counts.get(m.profile, 0) + 1
    if len(counts) > 1:
        found = ", ".join(f"{n} x {p}" for p, n in sorted(counts.items()))
        raise ConfigError(
            f"the single MIG strategy needs every MIG device to have the same profile; "
            f"this node has {found}",
            field="--mig-strategy",
            value="single",
            hint="use --mig-strategy mixed (one resource per profile), or partition every "
            "GPU with one profile",
        )


def _nvidia(
    root: HostRoot,
    mig_strategy: str,
    warnings: list[str],
    command: Sequence[str] | None,
    gpu_backend: str,
    id_strategy: str = "uuid",
) -> tuple[dict[str, list[K8sDevice]], Spec, NvidiaHost]:
    """The NVIDIA devices by resource, the CDI spec and the discovered host (``single``
    falls back to ``none`` without MIG devices); devices named by UUID or, with
    ``id_strategy`` ``index``, by index."""

    host = discover(root, gpu_backend=gpu_backend)
    warnings.extend(host.warnings)
    vendor, _, device_class = K8S_KINDS["nvidia"].partition("/")
    spec = generate_spec(
        host,
        vendor=vendor,
        device_class=device_class,
        name_strategies=("index", "uuid"),
        hook_command=command,
    )
    migs = [m for g in host.gpus for m in g.mig_devices]
    if mig_strategy == "single" and not migs and host.gpus:
        warnings.append(
            "no GPU has MIG devices: the single MIG strategy falls back to none "
            "(as NVIDIA's device plugin does)"
        )
        mig_strategy = "none"
    if mig_strategy != "none" and migs:
        _check_mig_profiles(mig_strategy, migs, host.gpu_backend, warnings)
    out: dict[str, list[K8sDevice]] = {}
    control = tuple(_node_pair(n) for n in host.control_nodes)
    for gpu in host.gpus:
        bdf = _sysfs_bdf(gpu.bus_id)
        numa = _numa(root, bdf)
        gpu_node = _node_pair(host.gpu_nodes[gpu.minor])
        name = gpu.uuid if id_strategy == "uuid" else str(gpu.index)
        whole = K8sDevice(
            id=_check_id(name),
            resource="nvidia.com/gpu",
            real_id=name,
            cdi_name=f"{spec.kind}={name}",
            visible=name,
            vendor="nvidia",
            bus_id=bdf,
            numa_node=numa,
            pci_switch=_switch(root, bdf),
            nodes=(*control, gpu_node),
            driver_entry=gpu.proc_dir,
            gpu_uuid=gpu.uuid,
            model=gpu.model,
            memory_mib=gpu.memory_mib,
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
        for pos, mig in enumerate(gpu.mig_devices):
            if mig_strategy == "single":
                resource = "nvidia.com/gpu"
            elif mig.profile is None:
                resource = MIG_RESOURCE
            else:
                resource = mig_resource_name(mig.profile)
            j = mig.nvml_index if mig.nvml_index is not None else pos
            index_name = f"{gpu.index}:{j}"
            if id_strategy == "index":
                device_id = name = index_name
            else:
                device_id = mig.uuid or f"{gpu.uuid}::mig{mig.gi}.{mig.ci}"
                name = mig.uuid or index_name
            out.setdefault(resource, []).append(
                replace(
                    whole,
                    id=_check_id(device_id),
                    resource=resource,
                    real_id=device_id,
                    cdi_name=f"{spec.kind}={name}",
                    visible=name,
                    nodes=(*whole.nodes, *(_node_pair(n) for n in mig.nodes)),
                    memory_mib=mig.memory_mib,
                    mig=True,
                    mig_profile=mig.profile,
                    mig_instance=(mig.gi, mig.ci),
                )
            )
    return out, spec, host


def _drm_id(g: DrmGpu) -> str:
    base = g.uuid or g.bus_id
    return base if g.partition is None else f"{base}-p{g.partition}"


def _drm(
    root: HostRoot, vendor: str, warnings: list[str], command: Sequence[str] | None
) -> tuple[dict[str, list[K8sDevice]], Spec, str | None]:

    host = discover_vendor(vendor, root)
    warnings.extend(host.warnings)
    spec = generate_drm_spec(host, hook_command=command, kind=K8S_KINDS[vendor])
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
                cdi_name=f"{spec.kind}={g.index}",
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
    gpu_backend: str = "procfs",
    view: RootView | None = None,
    time_slicing: Mapping[str, Sharing] | None = None,
    device_id_strategy: str = "uuid",
) -> Inventory:
    """Discover the host and list the devices to advertise (see the module docstring).

    Args:
        root: the host (default: ``/``), its roots as the host's container runtime sees
            them: the host paths in the specs and devices are under them.
        resources: resource prefixes or names to serve (``nvidia.com``, ``amd.com/gpu``);
            empty: every vendor whose driver is present.
        mig_strategy: one of :data:`MIG_STRATEGIES`.
        replicas: time-slicing replicas per device of every resource (1: no sharing).
        time_slicing: time-slicing per resource instead (the resource's name as it would
            be advertised unshared -> its :class:`Sharing`); a resource named that is not
            advertised is said in a warning.
        device_id_strategy: ``uuid`` (default) or ``index``: how NVIDIA devices are named
            to kubelet, in the CDI names and in ``NVIDIA_VISIBLE_DEVICES``.
        hook_command: argv prefix of ocihook in the CDI specs' hooks, as the container
            runtime on the host runs it (default: this installation).
        gpu_backend: NVIDIA GPU enumeration, ``procfs``, ``nvml`` or ``auto``
            (:func:`~ocihook.discovery.nvidia.enumerate_gpus`); only NVML knows GPU memory
            and MIG profiles.
        view: where this process sees ``root``'s driver root and dev root
            (:class:`RootView`; ``None``: where the host has them). Discovery reads
            there; the specs' host paths, :attr:`K8sDevice.nodes` and
            :attr:`K8sDevice.driver_entry` are turned back into the host's paths.

    Returns:
        An :class:`Inventory`; a vendor whose discovery fails is left out with a warning
        when ``resources`` is empty, and raises otherwise.

    Raises:
        ConfigError: an unknown MIG strategy, GPU backend, device id strategy, resource, a
            replica count below 1, ``replicas`` above 1 with ``time_slicing``, a shared
            resource renamed to a name that is not valid or is another resource's, or the
            ``single`` MIG strategy on MIG devices of several profiles.
        DiscoveryError: a requested vendor cannot be discovered, NVML is missing or
            fails with ``gpu_backend`` ``nvml``
            (:class:`~ocihook.discovery.nvml.NvmlError`), or no device at all.
    """

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
    if device_id_strategy not in DEVICE_ID_STRATEGIES:
        raise ConfigError(
            f"unknown device id strategy (use {', '.join(DEVICE_ID_STRATEGIES)})",
            field="--device-id-strategy",
            value=device_id_strategy,
        )
    if time_slicing and replicas > 1:
        raise ConfigError(
            "--replicas and time-slicing per resource cannot be combined",
            field="--replicas",
            value=replicas,
            hint="give one of them",
        )
    for resource, shared in (time_slicing or {}).items():
        if shared.replicas < 1:
            raise ConfigError(
                "time-slicing replicas must be at least 1", field=resource, value=shared.replicas
            )
        if shared.name is not None and not _valid_resource(shared.name):
            raise ConfigError("not a valid resource name", field=resource, value=shared.name)

    if gpu_backend not in BACKENDS:
        raise ConfigError(
            f"unknown GPU backend (use {', '.join(BACKENDS)})",
            field="--gpu-backend",
            value=gpu_backend,
        )
    host_root = root or HostRoot()
    if view is not None and view.identity:
        view = None
    root = view.read_root(host_root) if view is not None else host_root
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
    nvidia_gpus: tuple[Gpu, ...] = ()
    backend: str | None = None
    for vendor in dict.fromkeys(wanted):
        try:
            if vendor == "nvidia":
                found, spec, nv = _nvidia(
                    root, mig_strategy, warnings, hook_command, gpu_backend, device_id_strategy
                )
                version, cuda, nvidia_gpus, backend = (
                    nv.driver_version,
                    nv.cuda_version,
                    nv.gpus,
                    nv.gpu_backend,
                )
            else:
                found, spec, drm_version = _drm(root, vendor, warnings, hook_command)
                version = drm_version or ""
        except DiscoveryError as e:
            if explicit or (gpu_backend == "nvml" and isinstance(e, NvmlError)):
                raise  # what was asked for: the vendor, or NVML
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
    if view is not None:
        to_host = view.to_host
        specs = {kind: map_host_paths(spec, to_host) for kind, spec in specs.items()}
        devices = {
            r: [
                replace(
                    d,
                    nodes=tuple((path, to_host(host)) for path, host in d.nodes),
                    driver_entry=to_host(d.driver_entry) if d.driver_entry else "",
                )
                for d in devs
            ]
            for r, devs in devices.items()
        }
    sharing = _sharing(devices, replicas, time_slicing or {}, warnings)
    devices = _share(devices, sharing)
    return Inventory(
        devices={r: tuple(d) for r, d in devices.items()},
        specs=specs,
        warnings=tuple(warnings),
        driver_version=versions,
        cuda_version=cuda,
        nvidia_gpus=nvidia_gpus,
        mig_strategy=mig_strategy,
        replicas=replicas,
        gpu_backend=backend,
        view=view,
        sharing=sharing,
        device_id_strategy=device_id_strategy,
        machine=_machine(root),
    )


def _machine(root: HostRoot) -> str | None:
    """The DMI product name under ``root``'s sysfs, or ``None`` (absent, unreadable, empty)."""
    try:
        name = read_attr(root.sys("class/dmi/id/product_name"))
    except DiscoveryError:
        return None
    return name or None


def _valid_resource(name: str) -> bool:
    """Whether ``name`` is an extended resource name (``prefix/name``, the name part a
    Kubernetes qualified name)."""
    prefix, sep, rest = name.partition("/")
    return bool(prefix and sep and _RESOURCE_NAME.fullmatch(rest))


def _sharing(
    devices: Mapping[str, Sequence[K8sDevice]],
    replicas: int,
    time_slicing: Mapping[str, Sharing],
    warnings: list[str],
) -> dict[str, Sharing]:
    """The time-slicing to apply, by resource: ``replicas`` for every resource, or
    ``time_slicing`` for those advertised (the others said in ``warnings``).

    Raises:
        ConfigError: a shared resource renamed to another resource's name.
    """
    if replicas > 1:
        return {r: Sharing(replicas) for r in devices}
    out = {r: s for r, s in time_slicing.items() if r in devices and s.replicas > 1}
    for r in time_slicing:
        if r not in devices:
            warnings.append(f"time-slicing of {r}: this node does not advertise it")
    names = [(out[r].name or r) if r in out else r for r in devices]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ConfigError(
            "two resources would be advertised under one name", field="rename", value=twice[0]
        )
    return out


def _share(
    devices: Mapping[str, Sequence[K8sDevice]], sharing: Mapping[str, Sharing]
) -> dict[str, list[K8sDevice]]:
    """``devices`` with each shared resource's devices advertised ``replicas`` times
    (ids ``<id>::<n>``), under its new name when renamed."""
    out: dict[str, list[K8sDevice]] = {}
    for r, devs in devices.items():
        shared = sharing.get(r)
        if shared is None:
            out[r] = list(devs)
            continue
        name = shared.name or r
        out[name] = [
            replace(d, id=_check_id(f"{d.id}::{n}"), resource=name)
            for d in devs
            for n in range(shared.replicas)
        ]
    return out


def health(
    device: K8sDevice,
    dev_root: str | None = None,
    lost: Collection[str] = (),
    view: RootView | None = None,
) -> str:
    """:data:`HEALTHY` when every device node of ``device`` exists (a host path, or under
    ``dev_root`` when the host paths are relative), its driver entry exists and its GPU is
    not in ``lost`` (UUIDs the driver reports lost), else :data:`UNHEALTHY`. Host paths
    are looked up where ``view`` (the inventory's :attr:`Inventory.view`) sees them. One
    ``lstat`` per path; never raises."""
    if device.gpu_uuid and device.gpu_uuid in lost:
        return UNHEALTHY
    paths = [host for _, host in device.nodes]
    if device.driver_entry:
        paths.append(device.driver_entry)
    for p in paths:
        if dev_root is not None and not os.path.isabs(p):
            p = os.path.join(dev_root, p)
        if view is not None:
            p = view.seen(p)
        if not os.path.lexists(p):
            return UNHEALTHY
    return HEALTHY
