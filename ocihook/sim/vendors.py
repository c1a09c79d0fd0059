"""Simulated AMD, Intel and mixed hosts: sysfs, procfs and dev trees for the tests.

Like :mod:`ocihook.sim.host` for NVIDIA, each builder writes an ordinary directory usable
as both driver root and dev root. Only the GPUs and their kernel drivers are faked: the
sysfs entries and attributes the drivers would create (PCI device directories, the
``drm/`` children with their ``dev`` attributes, ``class/drm`` and driver links, KFD
topology nodes), the ``/proc/devices`` lines, and — when running as root — real device
nodes made with ``mknod`` with the usual owners (``root:video`` 0660 for ``card*``,
``root:render`` 0660 for ``renderD*`` and ``/dev/kfd``). With no driver behind them on this
machine, opening an allowed node gives ENXIO and a node the device cgroup denies EPERM.

* :func:`build_amd` — an MI210-class ROCm host: a BMC display (``ast``, card0, no render
  node) and four AMD Instinct GPUs whose card and render numbers are out of PCI order; the
  fourth is split into two compute partitions (DPX, MI300-style: the PCI device carries
  partition 0, ``devices/platform/amdgpu_xcp_0`` partition 1). ``kfd=False`` builds the
  same host without KFD (amdgpu without ``CONFIG_HSA_AMD``).
* :func:`build_intel` — an integrated Alder Lake GPU (i915, ``0000:00:02.0``) and a
  discrete Arc A770 (xe, ``0000:03:00.0``); ``sriov=True`` adds a Flex 170 physical
  function with two virtual functions enabled.
* :func:`build_mixed` — :func:`ocihook.sim.host.build` with two NVIDIA GPUs plus two AMD
  GPUs with KFD.

Nothing outside the destination directory is touched.
"""

from __future__ import annotations

import os
import stat

from ..core.records import Record
from .host import symlink, write

__all__ = [
    "CARD_GID",
    "KFD_MAJOR",
    "RENDER_GID",
    "SimDrmGpu",
    "SimDrmHost",
    "build_amd",
    "build_intel",
    "build_mixed",
]

#: Major of ``/dev/kfd`` on the simulated hosts (dynamic on real ones).
KFD_MAJOR = 235
#: Owners of the simulated nodes: Debian's ``render`` and ``video`` groups.
RENDER_GID = 109
CARD_GID = 44
_DRM_MAJOR = 226


class SimDrmGpu(Record):
    """What a builder made for one GPU (or partition), for the tests to compare with.

    Attributes:
        index: the index ocihook should give it.
        bus_id: PCI address (sysfs spelling).
        card, render: the ``N`` of ``card<N>`` and ``renderD<N>``.
        uuid: AMD ``GPU-`` id (``None`` for Intel).
        partition: partition number on a split GPU, else ``None``.
    """

    index: int
    bus_id: str
    card: int
    render: int
    uuid: str | None = None
    partition: int | None = None

    def replace_index(self, index: int) -> SimDrmGpu:
        """A copy with ``index`` set."""
        return SimDrmGpu(index, self.bus_id, self.card, self.render, self.uuid, self.partition)


class SimDrmHost(Record):
    """A built host: its root directory and the GPUs of each vendor, in index order."""

    root: str
    amd: tuple[SimDrmGpu, ...] = ()
    intel: tuple[SimDrmGpu, ...] = ()
    dev_nodes: bool = False
    skipped: tuple[str, ...] = ()


def _mknod(path: str, major: int, minor: int, gid: int, mode: int = 0o660) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.lexists(path):
        os.unlink(path)
    os.mknod(path, mode | stat.S_IFCHR, os.makedev(major, minor))
    os.chmod(path, mode)
    os.chown(path, 0, gid)


def _link(root: str, link: str, target: str) -> None:
    """A relative symlink ``root/link`` -> ``root/target`` (both root-relative)."""
    link_path = os.path.join(root, link)
    symlink(os.path.relpath(os.path.join(root, target), os.path.dirname(link_path)), link_path)


def _pci_device(
    root: str, bdf: str, vendor: str, device: str, driver: str, attrs: dict[str, str] | None = None
) -> str:
    """A PCI function behind a root port, bound to ``driver``; returns its sys path."""
    rel = f"sys/devices/pci0000:00/0000:00:01.1/{bdf}"
    if bdf.startswith("0000:00:"):
        rel = f"sys/devices/pci0000:00/{bdf}"
    for name, value in {
        "vendor": vendor,
        "device": device,
        "class": "0x030000",
        "numa_node": "0",
        **(attrs or {}),
    }.items():
        write(os.path.join(root, rel, name), value + "\n", 0o444)
    _link(root, f"sys/bus/pci/devices/{bdf}", rel)
    _link(root, f"sys/bus/pci/drivers/{driver}/{bdf}", rel)
    _link(root, f"{rel}/driver", f"sys/bus/pci/drivers/{driver}")
    os.makedirs(os.path.join(root, f"sys/module/{driver}"), exist_ok=True)
    return rel


def _drm_child(root: str, device_rel: str, name: str, minor: int) -> None:
    """``<device>/drm/<name>`` with its ``dev`` attribute, ``device`` link and class link."""
    rel = f"{device_rel}/drm/{name}"
    write(os.path.join(root, rel, "dev"), f"{_DRM_MAJOR}:{minor}\n", 0o444)
    _link(root, f"{rel}/device", device_rel)
    _link(root, f"sys/class/drm/{name}", rel)


def _proc_devices(root: str, extra: tuple[str, ...]) -> None:
    path = os.path.join(root, "proc/devices")
    chars = [" 1 mem", " 4 tty", " 5 /dev/tty", " 10 misc", "226 drm", *extra]
    if os.path.exists(path):  # the NVIDIA simulated host wrote one: add to its list
        with open(path) as f:
            text = f.read()
        head, sep, tail = text.partition("Character devices:\n")
        chars_text, _, rest = tail.partition("\n\n")
        lines = chars_text.splitlines()
        lines += [c for c in (*extra, "226 drm") if c not in (ln.strip() for ln in lines)]
        lines.sort(key=lambda ln: int(ln.split()[0]))
        text = head + sep + "".join(f"{ln}\n" for ln in lines) + "\n" + rest
        write(path, text)
        return
    write(
        path,
        "Character devices:\n"
        + "".join(f"{c}\n" for c in chars)
        + "\nBlock devices:\n  7 loop\n259 blkext\n",
    )


def _gpu_nodes(root: str, card: int | None, render: int) -> None:
    if card is not None:
        _mknod(os.path.join(root, f"dev/dri/card{card}"), _DRM_MAJOR, card, CARD_GID)
    _mknod(os.path.join(root, f"dev/dri/renderD{render}"), _DRM_MAJOR, render, RENDER_GID)


def _kfd_properties(
    *, render: int, location: int, unique_id: int, device_id: int, gfx: int, simds: int
) -> str:
    """A GPU node's ``properties`` text in the kernel's order (``kfd_topology.c``)."""
    lines = [
        ("cpu_cores_count", 0),
        ("simd_count", simds),
        ("mem_banks_count", 1),
        ("caches_count", 266),
        ("io_links_count", 1),
        ("p2p_links_count", 0),
        ("cpu_core_id_base", 0),
        ("simd_id_base", 2147487744),
        ("max_waves_per_simd", 8),
        ("lds_size_in_kb", 64),
        ("gds_size_in_kb", 0),
        ("num_gws", 64),
        ("wave_front_size", 64),
        ("array_count", 8),
        ("simd_arrays_per_engine", 1),
        ("cu_per_simd_array", 14),
        ("simd_per_cu", 4),
        ("max_slots_scratch_cu", 32),
        ("gfx_target_version", gfx),
        ("vendor_id", 4098),
        ("device_id", device_id),
        ("location_id", location),
        ("domain", 0),
        ("drm_render_minor", render),
        ("hive_id", 0),
        ("num_sdma_engines", 2),
        ("num_sdma_xgmi_engines", 6),
        ("num_sdma_queues_per_engine", 8),
        ("num_cp_queues", 24),
        ("max_engine_clk_fcompute", 1700),
        ("local_mem_size", 0),
        ("fw_version", 78),
        ("capability", 746079360),
        ("debug_prop", 1495),
        ("sdma_fw_version", 8),
        ("unique_id", unique_id),
        ("num_xcc", 1),
        ("max_engine_clk_ccompute", 2450),
    ]
    return "".join(f"{k} {v}\n" for k, v in lines)


_CPU_PROPERTIES = (
    "cpu_cores_count 64\nsimd_count 0\nmem_banks_count 1\ncaches_count 0\n"
    "io_links_count 4\ngfx_target_version 0\nvendor_id 0\ndevice_id 0\nlocation_id 0\n"
    "domain 0\ndrm_render_minor 0\nunique_id 0\n"
)


def _location(bdf: str) -> int:
    """KFD ``location_id`` of ``DDDD:BB:DD.F``: ``(bus << 8) | (device << 3) | function``."""
    _, bus, rest = bdf.split(":")
    dev, fn = rest.split(".")
    return (int(bus, 16) << 8) | (int(dev, 16) << 3) | int(fn)


#: (bus id, card, render, unique id) of the AMD host's GPUs in PCI order; the card and
#: render numbers are deliberately out of that order.
_AMD_GPUS = (
    ("0000:03:00.0", 1, 128, 0x3A9C51F2D0B7E611),
    ("0000:23:00.0", 3, 130, 0x55D2E0A3C4F18B02),
    ("0000:43:00.0", 2, 129, 0x0C1DE7F6A9B23344),
    ("0000:63:00.0", 4, 131, 0x7E44B1C09D2A6F58),
)
_MI210 = 0x740F
_GFX90A = 90010


def _amd_gpus(
    root: str,
    gpus: tuple[tuple[str, int, int, int], ...],
    *,
    partition: tuple[int, int] | None,
    kfd: bool,
    dev_nodes: bool,
    first_kfd_node: int = 1,
    xcp_name: str = "amdgpu_xcp_0",
) -> tuple[SimDrmGpu, ...]:
    """The amdgpu part of a host: ``gpus`` as (bus id, card, render, unique id); with
    ``partition=(card, render)`` the last GPU gets a second compute partition."""
    os.makedirs(os.path.join(root, "sys/module/amdgpu/drivers"), exist_ok=True)
    write(os.path.join(root, "sys/module/amdgpu/version"), "6.8.5\n")
    _link(root, "sys/module/amdgpu/drivers/pci:amdgpu", "sys/bus/pci/drivers/amdgpu")
    made: list[SimDrmGpu] = []
    kfd_nodes: list[tuple[int, str]] = []  # (render minor, properties)
    for bdf, card, render, unique in gpus:
        attrs = {"current_compute_partition": "SPX", "current_memory_partition": "NPS1"}
        split = partition is not None and bdf == gpus[-1][0]
        if split:
            attrs["current_compute_partition"] = "DPX"
        rel = _pci_device(root, bdf, "0x1002", f"0x{_MI210:04x}", "amdgpu", attrs)
        _drm_child(root, rel, f"card{card}", card)
        _drm_child(root, rel, f"renderD{render}", render)
        _link(root, f"{rel}/drm/controlD{64 + card}", f"{rel}/drm/card{card}")
        uuid = f"GPU-{unique:016x}"
        props = dict(location=_location(bdf), unique_id=unique, device_id=_MI210, gfx=_GFX90A)
        kfd_nodes.append((render, _kfd_properties(render=render, simds=416, **props)))
        made.append(SimDrmGpu(-1, bdf, card, render, uuid, 0 if split else None))
        if dev_nodes:
            _gpu_nodes(root, card, render)
        if split and partition is not None:
            p_card, p_render = partition
            xcp = f"sys/devices/platform/{xcp_name}"
            _drm_child(root, xcp, f"card{p_card}", p_card)
            _drm_child(root, xcp, f"renderD{p_render}", p_render)
            kfd_nodes.append((p_render, _kfd_properties(render=p_render, simds=208, **props)))
            made.append(SimDrmGpu(-1, bdf, p_card, p_render, uuid, 1))
            if dev_nodes:
                _gpu_nodes(root, p_card, p_render)
    if kfd:
        topo = "sys/devices/virtual/kfd/kfd/topology/nodes"
        write(os.path.join(root, topo, "0/properties"), _CPU_PROPERTIES)
        write(os.path.join(root, topo, "0/gpu_id"), "0\n")
        # KFD numbers nodes in probe order: not the index order (reversed here)
        for n, (_, text) in enumerate(reversed(kfd_nodes), start=first_kfd_node):
            write(os.path.join(root, topo, f"{n}/properties"), text)
            write(os.path.join(root, topo, f"{n}/gpu_id"), f"{1000 + n * 7}\n")
            write(os.path.join(root, topo, f"{n}/name"), "aldebaran\n")
        _link(root, "sys/class/kfd/kfd", "sys/devices/virtual/kfd/kfd")
        _proc_devices(root, (f"{KFD_MAJOR} kfd",))
        if dev_nodes:
            _mknod(os.path.join(root, "dev/kfd"), KFD_MAJOR, 0, RENDER_GID)
    else:
        _proc_devices(root, ())
    # amd-ctk's order: PCI order of the GPUs, partitions of one GPU by render minor
    order = sorted(made, key=lambda g: (g.bus_id, g.render))
    return tuple(g.replace_index(i) for i, g in enumerate(order))


def _dev_nodes_default(make_dev_nodes: bool | None) -> bool:
    return os.geteuid() == 0 if make_dev_nodes is None else make_dev_nodes


def build_amd(
    dest: str,
    *,
    kfd: bool = True,
    make_dev_nodes: bool | None = None,
    xcp_name: str = "amdgpu_xcp_0",
) -> SimDrmHost:
    """Write the simulated MI210-class ROCm host (see the module docstring) into ``dest``.

    Args:
        dest: the directory to write (created; existing files are replaced).
        kfd: give the host KFD (``/dev/kfd``, the ``kfd`` major, the topology).
        make_dev_nodes: ``mknod`` the ``dev/`` nodes; default: when running as root.
        xcp_name: the partition's platform device: ``amdgpu_xcp_0`` as Linux 6.10 and
            later name it, ``amdgpu_xcp.0`` as 6.5 to 6.9 do.

    Returns:
        A :class:`SimDrmHost` whose ``amd`` lists the five GPU entries (four GPUs, the
        fourth as two partitions) in index order.
    """
    root = os.path.abspath(dest)
    nodes = _dev_nodes_default(make_dev_nodes)
    bmc = _pci_device(root, "0000:02:00.0", "0x1a03", "0x2000", "ast")
    _drm_child(root, bmc, "card0", 0)
    if nodes:
        _mknod(os.path.join(root, "dev/dri/card0"), _DRM_MAJOR, 0, CARD_GID)
    amd = _amd_gpus(
        root, _AMD_GPUS, partition=(5, 132), kfd=kfd, dev_nodes=nodes, xcp_name=xcp_name
    )
    return SimDrmHost(root=root, amd=amd, dev_nodes=nodes)


def build_intel(
    dest: str, *, sriov: bool = False, make_dev_nodes: bool | None = None
) -> SimDrmHost:
    """Write the simulated Intel host (see the module docstring) into ``dest``.

    Returns:
        A :class:`SimDrmHost` whose ``intel`` lists the GPUs ocihook should find, in
        index (PCI) order; ``skipped`` names the SR-IOV physical function.
    """
    root = os.path.abspath(dest)
    nodes = _dev_nodes_default(make_dev_nodes)
    gpus: list[tuple[str, str, str, int, int, dict[str, str]]] = [
        ("0000:00:02.0", "0x46a6", "i915", 0, 128, {}),
        ("0000:03:00.0", "0x56a0", "xe", 1, 129, {}),
    ]
    skipped: list[str] = []
    if sriov:
        gpus += [
            ("0000:4d:00.0", "0x56c0", "i915", 2, 130, {"sriov_numvfs": "2"}),
            ("0000:4d:00.1", "0x56c0", "i915", 3, 131, {}),
            ("0000:4d:00.2", "0x56c0", "i915", 4, 132, {}),
        ]
        skipped.append("0000:4d:00.0")
    made: list[SimDrmGpu] = []
    for bdf, device, driver, card, render, attrs in gpus:
        rel = _pci_device(root, bdf, "0x8086", device, driver, attrs)
        _drm_child(root, rel, f"card{card}", card)
        _drm_child(root, rel, f"renderD{render}", render)
        if card == 0:  # a connector: a class/drm entry that is no GPU
            connector = f"{rel}/drm/card{card}/card{card}-eDP-1"
            write(os.path.join(root, connector, "status"), "connected\n")
            _link(root, f"sys/class/drm/card{card}-eDP-1", connector)
            write(os.path.join(root, rel, "drm/controlD64/dev"), "226:64\n")
        if nodes:
            _gpu_nodes(root, card, render)
            for kind, n in (("card", f"card{card}"), ("render", f"renderD{render}")):
                symlink(f"../{n}", os.path.join(root, f"dev/dri/by-path/pci-{bdf}-{kind}"))
        if bdf not in skipped:
            made.append(SimDrmGpu(len(made), bdf, card, render))
    _proc_devices(root, ())
    return SimDrmHost(root=root, intel=tuple(made), dev_nodes=nodes, skipped=tuple(skipped))


#: The mixed host's AMD GPUs: after the two NVIDIA GPUs' card1-2 and renderD128-129.
_MIXED_AMD = (
    ("0000:c1:00.0", 3, 130, 0x1B2C3D4E5F607182),
    ("0000:e1:00.0", 4, 131, 0x2C3D4E5F60718293),
)


def build_mixed(dest: str, *, make_dev_nodes: bool | None = None) -> SimDrmHost:
    """Write a host with two NVIDIA GPUs (:func:`ocihook.sim.host.build`) and two AMD GPUs
    with KFD into ``dest``; ``amd`` lists the AMD GPUs (the NVIDIA ones are in the
    tree's ``.ocihook-fixture.json``)."""
    from . import host as simhost

    root = os.path.abspath(dest)
    nodes = _dev_nodes_default(make_dev_nodes)
    simhost.build(root, gpus=2, make_dev_nodes=nodes)
    amd = _amd_gpus(root, _MIXED_AMD, partition=None, kfd=True, dev_nodes=nodes)
    return SimDrmHost(root=root, amd=amd, dev_nodes=nodes)
