"""AMD GPUs for ROCm: discovery from sysfs and procfs under a :class:`HostRoot`.

What a ROCm container needs is device nodes only (the ROCm user space comes from the
image): ``/dev/kfd``, the shared compute interface (char, major ``kfd`` in
``/proc/devices``, minor 0), and each selected GPU's ``/dev/dri/card<N>`` and
``/dev/dri/renderD<M>`` (226:N, 226:M). The device cgroup is the isolation: KFD hides the
GPUs whose render node the container's cgroup denies (``kfd_topology.c``,
``kfd_devcgroup_check_permission``).

Enumeration follows amd-ctk (ROCm/container-toolkit ``internal/amdgpu``):

1. the GPUs are the PCI functions bound to amdgpu, the entries
   ``<sys>/module/amdgpu/drivers/pci:amdgpu/<DDDD:BB:DD.F>`` (links to the PCI device
   directories), in name (= PCI bus) order, then the partition devices
   ``<sys>/devices/platform/amdgpu_xcp_<N>`` (``amdgpu_xcp.<N>`` before Linux 6.10) of
   compute-partitioned GPUs (MI300-class), by ``N``; a platform device named like a
   partition in neither form is reported in the warnings;
2. each one's nodes are the ``card*`` and ``renderD*`` entries of its ``drm/`` directory
   (the card number is never derived from the render number: card1 <-> renderD128 is
   common when a BMC display owns card0);
3. a device is kept only when its render minor is the ``drm_render_minor`` of a KFD
   topology node (``<sys>/class/kfd/kfd/topology/nodes/<n>/properties``, ``key value``
   lines, decimal; ``kfd_topology.c``, ``node_show``);
4. devices are grouped by their physical GPU — the KFD node's ``domain`` and
   ``location_id`` (``(bus << 8) | (device << 3) | function``) — groups in order of first
   appearance, and within a group sorted by render minor; the index is the position in
   that list. A partitioned GPU thus has consecutive indices, partition 0 first.

The UUID ROCm shows is ``GPU-`` + the 16 hex digits of the KFD ``unique_id``; the
``0x``-form of that number is what ``AMD_VISIBLE_DEVICES`` accepts as a unique id.
Nothing here writes anything.
"""

from __future__ import annotations

import os

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot, listdir, read_attr, read_text
from ..core.vocab import is_sysfs_bus_id as is_bus_id
from .devices import device_node
from .records import DrmGpu, DrmHost

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from .records import HostDeviceNode

__all__ = [
    "KFD_PATH",
    "KfdNode",
    "discover",
    "gfx_name",
    "is_present",
    "parse_kfd_properties",
    "read_kfd_nodes",
    "xcp_number",
]

#: The shared compute node every ROCm container needs.
KFD_PATH = "/dev/kfd"
_DRIVER_DIR = "module/amdgpu/drivers/pci:amdgpu"
_TOPOLOGY_DIR = "class/kfd/kfd/topology/nodes"
_XCP_DIR = "devices/platform"
_XCP_BASE = "amdgpu_xcp"


class KfdNode:
    """One GPU node of the KFD topology (a plain class: built per node, compared never).

    Attributes:
        path: host path of its ``properties`` file.
        properties: every ``key value`` line with a decimal value.
    """

    __slots__ = ("path", "properties")

    def __init__(self, path: str, properties: dict[str, int]) -> None:
        self.path = path
        self.properties = properties

    @property
    def render_minor(self) -> int:
        """``drm_render_minor`` (0 for a CPU node)."""
        return self.properties.get("drm_render_minor", 0)

    @property
    def location(self) -> tuple[int, int]:
        """``(domain, location_id)``: the physical GPU a node belongs to."""
        return self.properties.get("domain", 0), self.properties.get("location_id", 0)

    @property
    def bus_id(self) -> str:
        """The PCI address ``location_id`` encodes, sysfs spelling (``0000:63:00.0``)."""
        domain, loc = self.location
        return f"{domain:04x}:{loc >> 8:02x}:{(loc >> 3) & 0x1F:02x}.{loc & 7:x}"


def parse_kfd_properties(text: str) -> dict[str, int]:
    """Parse a KFD topology node's ``properties`` text into ``{key: value}``.

    The kernel prints one ``%s %llu`` / ``%s %u`` line per property (``kfd_topology.c``,
    ``sysfs_show_32bit_prop`` and friends). Lines that are not a key and a decimal number
    are ignored; the first value of a key wins. Never raises.
    """
    props: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        # at most 20 digits: a u64, and never more than int() accepts
        if (
            len(fields) == 2
            and fields[1].isascii()
            and fields[1].isdigit()
            and len(fields[1]) <= 20
        ):
            props.setdefault(fields[0], int(fields[1]))
    return props


def gfx_name(target_version: int) -> str | None:
    """The ``gfx`` target of a KFD ``gfx_target_version`` (``90010`` -> ``gfx90a``,
    ``90402`` -> ``gfx942``, ``110000`` -> ``gfx1100``): major = v // 10000, minor and
    stepping the next two decimal pairs, printed in hex (LLVM AMDGPU processor names).
    ``None`` for 0 (a CPU node) or a minor/stepping above 15."""
    if target_version <= 0:
        return None
    major, minor, step = target_version // 10000, target_version // 100 % 100, target_version % 100
    if minor > 15 or step > 15:
        return None
    return f"gfx{major}{minor:x}{step:x}"


def is_present(root: HostRoot) -> bool:
    """Whether the amdgpu kernel module is loaded (``<sys>/module/amdgpu`` exists)."""
    return os.path.isdir(root.sys("module/amdgpu"))


def read_kfd_nodes(root: HostRoot) -> dict[int, KfdNode] | None:
    """The GPU nodes of the KFD topology by render minor, or ``None`` without KFD.

    Raises:
        DiscoveryError: a topology directory that cannot be read.
    """
    topo = root.sys(_TOPOLOGY_DIR)
    if not os.path.isdir(topo):
        return None
    nodes: dict[int, KfdNode] = {}
    for name in listdir(topo, "the KFD topology"):
        if not (name.isascii() and name.isdigit() and len(name) <= 9):
            continue
        path = os.path.join(topo, name, "properties")
        text = read_attr(path)
        if text is None:
            continue
        node = KfdNode(path, parse_kfd_properties(text))
        if node.render_minor > 0:
            nodes.setdefault(node.render_minor, node)
    return nodes


def _no_kfd(root: HostRoot, found: list[str]) -> DiscoveryError:
    return DiscoveryError(
        "the amdgpu driver is loaded but provides no KFD (/dev/kfd): ROCm cannot use its GPUs",
        path=root.sys(_TOPOLOGY_DIR),
        value=", ".join(found),
        hint="KFD needs a kernel built with CONFIG_HSA_AMD (or the amdgpu-dkms module); "
        "check that /proc/devices lists kfd and /sys/class/kfd exists",
    )


def xcp_number(name: str) -> int | None:
    """The partition number of an amdgpu partition platform device's name, in both
    spellings the kernels use: ``amdgpu_xcp_<N>`` (Linux 6.10 and later: each partition
    registered under a name of its own, so that libdrm tells them apart) and
    ``amdgpu_xcp.<N>`` (Linux 6.5 to 6.9: one base name, the platform core appending
    ``.<id>``); ``drivers/gpu/drm/amd/amdxcp/amdgpu_xcp_drv.c``. ``None`` for any other
    name (a number of more than 9 digits, or digits that are not ASCII, included)."""
    if not name.startswith(_XCP_BASE) or len(name) < len(_XCP_BASE) + 2:
        return None
    sep, digits = name[len(_XCP_BASE)], name[len(_XCP_BASE) + 1 :]
    if sep not in "_." or not (digits.isascii() and digits.isdigit()) or len(digits) > 9:
        return None
    return int(digits)


def _device_dirs(root: HostRoot) -> tuple[list[tuple[str, str | None]], list[str]]:
    """``(sysfs dir, bus id or None)``: amdgpu's PCI functions in bus order, then the
    partition devices by number (:func:`xcp_number`); and a warning for each platform
    device that looks like a partition but is named in no form known here (it is not
    dropped without a word)."""
    driver_dir = root.sys(_DRIVER_DIR)
    dirs: list[tuple[str, str | None]] = [
        (os.path.join(driver_dir, name), name)
        for name in listdir(driver_dir, "the amdgpu PCI devices")
        if is_bus_id(name)
    ]
    platform = root.sys(_XCP_DIR)
    xcps = []
    warnings = []
    for name in listdir(platform, "platform devices"):
        if not name.startswith(_XCP_BASE):
            continue
        number = xcp_number(name)
        if number is None:
            warnings.append(
                f"{os.path.join(platform, name)}: looks like an amdgpu partition but is not "
                "named amdgpu_xcp_<N> or amdgpu_xcp.<N>; skipped"
            )
            continue
        xcps.append((number, name))
    dirs.extend((os.path.join(platform, name), None) for _, name in sorted(xcps))
    return dirs, warnings


def discover(root: HostRoot | None = None) -> DrmHost:
    """Discover the AMD GPUs a ROCm container can get (see the module docstring).

    Args:
        root: where to read from (default: the real host).

    Returns:
        A :class:`~ocihook.discovery.records.DrmHost` with ``vendor="amd"``, the GPUs (and
        partitions) in amd-ctk's index order and ``shared_nodes = (/dev/kfd,)``. A loaded
        amdgpu with no GPU gives ``gpus == ()``.

    Raises:
        DiscoveryError: the amdgpu module is not loaded; it has GPUs but no KFD (no
            ``kfd`` major in ``<proc>/devices`` or no KFD topology) — ROCm cannot run;
            a malformed DRM ``dev`` attribute or a host node that is not the device it
            should be ("invalid device node").
    """
    root = root or HostRoot()
    if not is_present(root):
        raise DiscoveryError(
            "the amdgpu driver is not loaded",
            path=root.sys("module/amdgpu"),
            hint="load amdgpu (modprobe amdgpu) or check --dev-root",
        )
    devices, warnings = _device_dirs(root)
    pci = [bus for _, bus in devices if bus is not None]
    majors = _char_majors(root)
    kfd_nodes = read_kfd_nodes(root)
    kfd_major = majors.get("kfd")
    if kfd_major is None or kfd_nodes is None:
        if pci:
            raise _no_kfd(root, pci)
        return DrmHost("amd", root, (), (), _module_version(root), ("amdgpu has no GPU",))

    groups: dict[tuple[int, int], list[tuple[int, DrmGpu]]] = {}
    for sysfs_dir, bus in devices:
        nodes = _drm_nodes(root, os.path.join(sysfs_dir, "drm"), warnings)
        render = nodes.get("render")
        if render is None:
            warnings.append(f"{sysfs_dir}: no render node; skipped")
            continue
        kfd = kfd_nodes.get(render.minor)
        if kfd is None:
            warnings.append(
                f"{sysfs_dir}: renderD{render.minor} is in no KFD topology node; skipped"
            )
            continue
        pci_dir = sysfs_dir if bus is not None else None
        unique = kfd.properties.get("unique_id")
        gpu = DrmGpu(
            vendor="amd",
            index=-1,
            bus_id=bus or kfd.bus_id,
            render=render,
            card=nodes.get("card"),
            driver="amdgpu",
            device_id=(read_attr(os.path.join(pci_dir, "device")) if pci_dir else None)
            or (f"0x{kfd.properties['device_id']:04x}" if "device_id" in kfd.properties else None),
            uuid=None if not unique else f"GPU-{unique:016x}",
            unique_id=None if not unique else f"0x{unique:x}",
            architecture=gfx_name(kfd.properties.get("gfx_target_version", 0)),
            sysfs_dir=sysfs_dir,
        )
        groups.setdefault(kfd.location, []).append((render.minor, gpu))

    gpus: list[DrmGpu] = []
    for members in groups.values():
        members.sort(key=lambda m: m[0])
        parent = os.path.join(root.sys(_DRIVER_DIR), members[0][1].bus_id)
        compute = read_attr(os.path.join(parent, "current_compute_partition"))
        memory = read_attr(os.path.join(parent, "current_memory_partition"))
        split = len(members) > 1
        for position, (_, gpu) in enumerate(members):
            gpus.append(
                gpu.replace(
                    index=len(gpus),
                    partition=position if split else None,
                    compute_partition=compute or None,
                    memory_partition=memory or None,
                )
            )
    kfd_node = device_node(root, KFD_PATH, kfd_major, 0)
    for node in (kfd_node, *(n for g in gpus for n in g.nodes)):
        if not node.present:
            warnings.append(f"{node.host_path} does not exist; the container gets a new node")
    return DrmHost(
        vendor="amd",
        root=root,
        gpus=tuple(gpus),
        shared_nodes=(kfd_node,),
        driver_version=_module_version(root),
        warnings=tuple(warnings),
    )


def _char_majors(root: HostRoot) -> dict[str, int]:
    from .procfs import parse_devices

    return parse_devices(read_text(root.proc("devices"), what="/proc/devices"))


def _drm_nodes(root: HostRoot, drm_dir: str, warnings: list[str]) -> dict[str, HostDeviceNode]:
    from .devices import drm_dir_nodes

    return drm_dir_nodes(root, drm_dir, warnings)


def _module_version(root: HostRoot) -> str | None:
    return read_attr(root.sys("module/amdgpu/version")) or None
