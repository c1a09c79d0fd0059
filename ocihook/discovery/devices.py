"""Device nodes a container may need besides the GPUs and ``/dev/nvidiactl``.

Each function reads the host through a :class:`~ocihook.core.hostroot.HostRoot` (``root.dev``,
``root.proc``, ``root.sys``, ``root.driver``; never ``/dev`` or ``/sys`` by literal) and
returns immutable descriptions; nothing here writes anything.

* :func:`modeset_node` -- ``/dev/nvidia-modeset`` (display capability).
* :func:`dri_nodes` -- the DRM card and render node of one GPU and its
  ``/dev/dri/by-path`` links (graphics and display capabilities).
* :func:`imex_channel_nodes` -- ``/dev/nvidia-caps-imex-channels/channel<N>``
  (``NVIDIA_IMEX_CHANNELS``).
* :func:`nvswitch_nodes`, :func:`gdrcopy_nodes`, :func:`gds_nodes`, :func:`mofed_nodes` --
  the feature-gated sets (``NVIDIA_NVSWITCH``, ``NVIDIA_GDRCOPY``, ``NVIDIA_GDS``,
  ``NVIDIA_MOFED`` = ``enabled``; toolkit ``internal/modifier/gated.go``).
* :func:`wsl_devices` -- ``/dev/dxg`` and the driver files of a WSL2 host;
  :func:`wsl_driver_version` -- its driver version, from the driver store's INF file.

Two kinds of node, two rules:

**Fixed numbers** (the major comes from ``/proc/devices`` or is fixed by the kernel, the
minor is fixed by the driver): checked with :func:`~ocihook.discovery.devices.device_node`. A
host node that exists must be a character device with exactly that major:minor, else
:class:`~ocihook.core.errors.DiscoveryError` "invalid device node"; a missing one is still
described (``present=False``) where the container should get the node anyway.

**Dynamic minors** (misc devices: ``/dev/infiniband/rdma_cm``, ``/dev/dxg``, major 10 with a
minor the kernel picks at registration, ``MISC_DYNAMIC_MINOR`` in
``include/linux/miscdevice.h``): only a node that exists is described, with the
major:minor read from it. It must be a character device with major 10 (``MISC_MAJOR``,
``include/uapi/linux/major.h``); when ``<proc>/misc`` ("minor name" lines,
``drivers/char/misc.c``) lists the device, its minor must match, and a minor that
``<proc>/misc`` gives to *another* device is refused too (a stale node that now reaches a
different driver). Anything else is "invalid device node". The same "describe what exists"
rule applies to the ``uverbs`` nodes, whose numbers follow the kernel's fixed formula (see
:func:`mofed_nodes`).
"""

from __future__ import annotations

import os
import stat

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot, listdir, read_optional_text, read_text
from ..core.vocab import IMEX_CHANNEL_LIMIT, parse_bus_id, sysfs_bus_id
from ..linux.pathsafe import resolve_in_root
from .procfs import (
    canonical_bus_id,
    canonical_decimal,
    parse_char_majors,
    parse_misc,
    parse_sysfs_dev,
)
from .records import DriDevices, HostDeviceNode, WslDevices, WslFile

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Literal

__all__ = [
    "DRM_MAJOR",
    "IB_UVERBS_BASE_MINOR",
    "IB_UVERBS_MAJOR",
    "IB_UVERBS_NUM_FIXED_MINOR",
    "IMEX_CHANNEL_LIMIT",
    "MISC_MAJOR",
    "NVIDIA_MODESET_MINOR",
    "NVSWITCH_CTL_MINOR",
    "WSL_DRIVERS_DIR",
    "WSL_DRIVER_STORE_FILES",
    "WSL_LIB_DIR",
    "dri_nodes",
    "drm_dir_nodes",
    "gdrcopy_nodes",
    "gds_nodes",
    "imex_channel_nodes",
    "modeset_node",
    "mofed_nodes",
    "nvswitch_nodes",
    "parse_driver_ver",
    "windows_to_nvidia_version",
    "wsl_devices",
    "wsl_driver_version",
]

#: Major of ``/dev/nvidia*`` when ``/proc/devices`` does not say (``nvidia.ko``).
_NVIDIA_MAJOR = 195
#: Minor of ``/dev/nvidia-modeset`` (``NV_MODESET_MINOR_DEVICE_NUM``, nvidia-modprobe
#: ``modprobe-utils/nvidia-modprobe-utils.h``).
NVIDIA_MODESET_MINOR = 254
#: Minor of ``/dev/nvidia-nvswitchctl`` (``NV_NVSWITCH_CTL_MINOR``, same header); switch
#: ``N`` is ``/dev/nvidia-nvswitchN`` with minor ``N``.
NVSWITCH_CTL_MINOR = 255
#: Major of the DRM nodes ``/dev/dri/card*``, ``renderD*`` (``include/drm/drm_ioctl.h``).
DRM_MAJOR = 226
#: Major of misc devices (``include/uapi/linux/major.h``).
MISC_MAJOR = 10
#: ``uverbsN`` for ``N < 32`` is ``231:192+N``; from 32 on it is ``<dynamic>:N-32``
#: (``drivers/infiniband/core/uverbs_main.c``: ``IB_UVERBS_MAJOR``,
#: ``IB_UVERBS_BASE_MINOR``, ``IB_UVERBS_NUM_FIXED_MINOR``; both regions are registered as
#: ``infiniband_verbs`` in ``/proc/devices``).
IB_UVERBS_MAJOR = 231
IB_UVERBS_BASE_MINOR = 192
IB_UVERBS_NUM_FIXED_MINOR = 32
#: Largest major a ``dev_t`` holds (12 bits) and one past the largest minor (20 bits).
_MAJOR_LIMIT = 1 << 12
_MINOR_LIMIT = 1 << 20

_IMEX_DIR = "/dev/nvidia-caps-imex-channels"

#: Where a WSL2 host exposes the Windows driver's user-space libraries (driver-root terms).
WSL_LIB_DIR = "/usr/lib/wsl/lib"
#: The Windows driver store, one directory per driver package (driver-root terms).
WSL_DRIVERS_DIR = "/usr/lib/wsl/drivers"
#: The files the toolkit's WSL discovery mounts (``pkg/nvcdi/driver-wsl.go``,
#: ``requiredDriverStoreFiles``), each taken from the first driver store holding it, else
#: from :data:`WSL_LIB_DIR`.
WSL_DRIVER_STORE_FILES: tuple[str, ...] = (
    "libcuda.so.1.1",
    "libcuda_loader.so",
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-ml.so.1",
    "libnvidia-ml_loader.so",
    "libdxcore.so",
    "libnvdxgdmal.so.1",
    "nvcubins.bin",
    "nvidia-smi",
)


# -- parsers (pure) -----------------------------------------------------------------------


# -- helpers that read the host ------------------------------------------------------------


def _numbered(names: Iterable[str], prefix: str) -> list[int]:
    """The sorted ``N`` of the names ``<prefix><N>`` (canonical decimal ``N``)."""
    found = set()
    for name in names:
        if name.startswith(prefix):
            n = canonical_decimal(name[len(prefix) :])
            if n is not None:
                found.add(n)
    return sorted(found)


def _invalid(host_path: str, st: os.stat_result, expected: str) -> DiscoveryError:
    actual = (
        f"char {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        if stat.S_ISCHR(st.st_mode)
        else "not a character device"
    )
    return DiscoveryError(
        "invalid device node",
        path=host_path,
        value=actual,
        hint=f"expected {expected}; fix or remove the node",
    )


def _lstat(host_path: str) -> os.stat_result | None:
    try:
        return os.lstat(host_path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise DiscoveryError(f"cannot stat device node: {e.strerror}", path=host_path) from None


def _described(path: str, host_path: str, st: os.stat_result) -> HostDeviceNode:
    """A present node described from its own ``stat`` (already checked)."""
    return HostDeviceNode(
        path=path,
        host_path=host_path,
        major=os.major(st.st_rdev),
        minor=os.minor(st.st_rdev),
        file_mode=stat.S_IMODE(st.st_mode),
        uid=st.st_uid,
        gid=st.st_gid,
        present=True,
    )


def _read_misc(root: HostRoot) -> dict[str, int] | None:
    """``<proc>/misc`` parsed, or ``None`` when the file does not exist."""
    path = root.proc("misc")
    text = read_optional_text(path, what="/proc/misc")
    return None if text is None else parse_misc(text)


def _misc_node(root: HostRoot, path: str, name: str) -> HostDeviceNode | None:
    """The misc device node ``path`` registered as ``name``, or ``None`` if it is missing.

    The dynamic-minor rule of the module docstring.
    """
    host_path = root.dev(path)
    st = _lstat(host_path)
    if st is None:
        return None
    if not stat.S_ISCHR(st.st_mode) or os.major(st.st_rdev) != MISC_MAJOR:
        raise _invalid(host_path, st, f"char {MISC_MAJOR}:<minor of {name!r} in /proc/misc>")
    minor = os.minor(st.st_rdev)
    misc = _read_misc(root)
    if misc is not None:
        listed = misc.get(name)
        if listed is not None and listed != minor:
            raise _invalid(host_path, st, f"char {MISC_MAJOR}:{listed} ({name} in /proc/misc)")
        if listed is None:
            for other, other_minor in misc.items():
                if other_minor == minor:
                    raise _invalid(
                        host_path,
                        st,
                        f"a {name} node, but /proc/misc gives minor {minor} to {other!r}",
                    )
    return _described(path, host_path, st)


# -- display, DRM -------------------------------------------------------------------------


def _nvidia_major(majors: Mapping[str, int]) -> int:
    return majors.get("nvidia", majors.get("nvidia-frontend", _NVIDIA_MAJOR))


def modeset_node(root: HostRoot, majors: Mapping[str, int]) -> HostDeviceNode:
    """Describe ``/dev/nvidia-modeset``, the node the display capability needs.

    Args:
        root: where to read from.
        majors: character majors by name, from ``/proc/devices``
            (:func:`ocihook.discovery.procfs.parse_devices`); the major is ``nvidia`` (or
            ``nvidia-frontend`` on drivers before 550.40), 195 when neither is listed.

    Returns:
        A :class:`HostDeviceNode` ``<nvidia major>:254`` (``NV_MODESET_MINOR_DEVICE_NUM``,
        nvidia-modprobe ``nvidia-modprobe-utils.h``); ``present=False`` when the host has
        no such node (``nvidia-modeset.ko`` not loaded or the node not made yet).

    Raises:
        DiscoveryError: "invalid device node": the host node is not that char device.
    """
    return device_node(root, "/dev/nvidia-modeset", _nvidia_major(majors), NVIDIA_MODESET_MINOR)


def _drm_entry(name: str) -> tuple[str, int] | None:
    """``("card", N)`` for ``cardN``, ``("render", N)`` for ``renderDN``, else ``None``."""
    for prefix, kind in (("renderD", "render"), ("card", "card")):
        if name.startswith(prefix):
            n = canonical_decimal(name[len(prefix) :])
            return None if n is None else (kind, n)
    return None


def drm_name_unknown(name: str) -> bool:
    """Whether ``name``, an entry of a DRM ``drm/`` directory or of ``/sys/class/drm``,
    looks like a DRM minor (starts with ``card``, ``renderD`` or ``controlD``) yet is none
    of the forms the kernels produce: ``card<N>``, ``renderD<N>``, ``controlD<N>`` (before
    Linux 6.8), or a connector ``card<N>-<connector>`` (``card0-DP-1``)."""
    if _drm_entry(name) is not None:
        return False
    for prefix in ("controlD", "renderD", "card"):
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            if prefix == "card" and "-" in rest:
                rest = rest.split("-", 1)[0]  # a connector of card<N>
            elif prefix == "controlD":
                return canonical_decimal(rest) is None
            else:
                return True
            return canonical_decimal(rest) is None
    return False


def _sysfs_devnum(entry_dir: str, number: int) -> tuple[int, int]:
    """``(major, minor)`` from ``<entry_dir>/dev``; ``(226, number)`` if there is none."""
    dev_path = os.path.join(entry_dir, "dev")
    try:
        with open(dev_path, "rb") as f:
            data = f.read(4096)
    except FileNotFoundError:
        return DRM_MAJOR, number
    except OSError as e:
        raise DiscoveryError(
            f"cannot read the DRM device number: {e.strerror}", path=dev_path
        ) from None
    devnum = parse_sysfs_dev(data.decode("utf-8", "replace"), path=dev_path)
    if devnum != (DRM_MAJOR, number):
        raise DiscoveryError(
            "DRM device number does not match its name",
            path=dev_path,
            value=f"{devnum[0]}:{devnum[1]}",
            hint=f"expected {DRM_MAJOR}:{number} for {os.path.basename(entry_dir)}",
        )
    return devnum


def dri_nodes(root: HostRoot, bus_id: str) -> DriDevices:
    """Describe the DRM nodes of the GPU at ``bus_id`` and their by-path links.

    The GPU's DRM devices are the entries ``card<N>`` and ``renderD<N>`` of
    ``<sys>/bus/pci/devices/<bus id>/drm/`` (sysfs spells the bus id with a 4-digit domain;
    other entries such as ``controlD<N>`` are ignored). Each one's number is read from its
    ``dev`` attribute (``226:N``; when it has none, ``226`` and the ``N`` of the name) and
    must be ``226:N`` (``DRM_MAJOR``, ``include/drm/drm_ioctl.h``; ``drm_sysfs_minor_alloc``
    in ``drivers/gpu/drm/drm_sysfs.c`` names them ``card%d``/``renderD%d`` after the
    minor). The host node ``/dev/dri/<name>`` is
    checked as :func:`~ocihook.discovery.devices.device_node` does (a missing one is described
    with ``present=False``). The links are those udev makes
    (systemd ``rules.d/60-drm.rules``: ``dri/by-path/$env{ID_PATH}-card`` and ``-render``,
    ``ID_PATH`` = ``pci-<bus id>`` from the ``path_id`` builtin), targets relative:
    ``/dev/dri/by-path/pci-0000:3b:00.0-card -> ../card1``. They are derived from sysfs,
    not read from the host's ``/dev/dri/by-path`` (the toolkit reads them there, in
    ``internal/platform-support/dgpu/by-path-hooks.go``, and makes only those that lead to
    a node it injects).

    Args:
        root: where to read from.
        bus_id: the GPU's PCI address, with a 4- or 8-digit domain, any case
            (``00000000:3b:00.0``, as :attr:`ocihook.discovery.records.Gpu.bus_id`).

    Returns:
        A :class:`DriDevices`; with no card, render node nor link when sysfs has no ``drm``
        directory for the GPU (``nvidia-drm.ko`` not loaded).

    Raises:
        DiscoveryError: ``bus_id`` is not a PCI address; a ``dev`` attribute that is not
            ``226:N`` for its ``cardN`` / ``renderDN`` (naming the file); two cards or two
            render nodes for one GPU; a host node that is not the char device it should be
            ("invalid device node").
    """
    key = parse_bus_id(bus_id)
    if key is None:
        raise DiscoveryError("malformed PCI bus id", value=bus_id, hint="expected DDDDDDDD:BB:DD.F")
    sys_id = sysfs_bus_id(key)
    canonical, _ = canonical_bus_id(bus_id, path="")
    found = drm_dir_nodes(root, root.sys(f"bus/pci/devices/{sys_id}/drm"))
    links = tuple(
        (f"/dev/dri/by-path/pci-{sys_id}-{kind}", f"../{os.path.basename(found[kind].path)}")
        for kind in ("card", "render")
        if kind in found
    )
    return DriDevices(
        bus_id=canonical, card=found.get("card"), render=found.get("render"), links=links
    )


def drm_dir_nodes(
    root: HostRoot, drm_dir: str, warnings: list[str] | None = None
) -> dict[str, HostDeviceNode]:
    """The DRM nodes listed in the sysfs directory ``drm_dir`` (a device's ``drm/``).

    Vendor-neutral core of :func:`dri_nodes`, also used for devices that are no PCI
    function of their own (AMD's ``amdgpu_xcp_<N>`` partition devices). The rules are
    those of :func:`dri_nodes`: only ``card<N>`` and ``renderD<N>`` entries count, each
    ``dev`` attribute must be ``226:N``, and the host node ``/dev/dri/<name>`` is checked
    with :func:`~ocihook.discovery.devices.device_node`.

    Args:
        root: where to read from.
        drm_dir: host path of the ``drm`` directory (under the sys root).
        warnings: where to add one line per entry that looks like a DRM node but is
            named in no form known here (``card``/``renderD``/``controlD`` followed by
            something other than a decimal number); such an entry is skipped, never
            silently. ``controlD<N>`` entries (the control nodes of kernels before 6.8)
            are known and skipped.

    Returns:
        ``{"card": node, "render": node}`` with the kinds found (empty when the directory
        does not exist).

    Raises:
        DiscoveryError: a malformed ``dev`` attribute, two nodes of one kind, or a host
            node that is not the char device it should be.
    """
    found: dict[str, HostDeviceNode] = {}
    for name in sorted(listdir(drm_dir, "DRM devices")):
        entry = _drm_entry(name)
        if entry is None:
            if warnings is not None and drm_name_unknown(name):
                warnings.append(
                    f"{os.path.join(drm_dir, name)}: looks like a DRM node but is not named "
                    "card<N> or renderD<N>; skipped"
                )
            continue
        kind, number = entry
        major, minor = _sysfs_devnum(os.path.join(drm_dir, name), number)
        if kind in found:
            raise DiscoveryError(
                f"more than one DRM {kind} node for one GPU",
                path=drm_dir,
                value=f"{os.path.basename(found[kind].path)}, {name}",
            )
        found[kind] = device_node(root, f"/dev/dri/{name}", major, minor)
    return found


# -- IMEX ---------------------------------------------------------------------------------


def imex_channel_nodes(
    root: HostRoot,
    majors: Mapping[str, int],
    channels: Iterable[int] | Literal["all"],
) -> tuple[HostDeviceNode, ...]:
    """Describe IMEX channel nodes ``/dev/nvidia-caps-imex-channels/channel<N>``.

    Channel ``N`` is the char device ``<nvidia-caps-imex-channels major>:N``
    (``NV_CAPS_IMEX_CHANNEL_DEVICE_NAME`` in nvidia-modprobe ``nvidia-modprobe-utils.h``;
    the major from ``/proc/devices``); ``N`` is a minor, so ``0 <= N < 2**20``.

    Args:
        root: where to read from.
        majors: character majors by name, from ``/proc/devices``.
        channels: channel numbers below :data:`IMEX_CHANNEL_LIMIT` (in any order, repeats
            allowed; :attr:`ocihook.request.nvidia.Request.imex_channel_numbers` checks a
            request's), or ``"all"``: every
            ``channel<N>`` node that exists under the dev root (as the toolkit's
            ``pkg/nvcdi/lib-imex.go`` globs ``channel*``; other names are ignored).

    Returns:
        The nodes in channel order, without duplicates. An explicit channel whose host
        node is missing is described with ``present=False`` (the container gets a new
        node). ``"all"`` on a driver without the IMEX major gives ``()``.

    Raises:
        DiscoveryError: explicit channels on a driver that registers no
            ``nvidia-caps-imex-channels`` major; a host node that is not the char device
            it should be ("invalid device node").
    """
    major = majors.get("nvidia-caps-imex-channels")
    if isinstance(channels, str) and channels == "all":
        if major is None:
            return ()
        numbers = _numbered(listdir(root.dev(_IMEX_DIR), "IMEX channels"), "channel")
    else:
        numbers = sorted(set(channels))
        if numbers and major is None:
            raise DiscoveryError(
                "the driver provides no IMEX channels",
                path=root.proc("devices"),
                field="nvidia-caps-imex-channels",
                hint="load an NVIDIA driver with IMEX channel support",
            )
    if major is None:
        return ()
    return tuple(device_node(root, f"{_IMEX_DIR}/channel{n}", major, n) for n in numbers)


# -- feature-gated sets -------------------------------------------------------------------


def nvswitch_nodes(root: HostRoot, majors: Mapping[str, int]) -> tuple[HostDeviceNode, ...]:
    """Describe the NVSwitch nodes (``NVIDIA_NVSWITCH=enabled``).

    ``/dev/nvidia-nvswitchctl`` is ``<nvidia-nvswitch major>:255`` and
    ``/dev/nvidia-nvswitch<N>`` is ``<major>:N`` (``NV_NVSWITCH_CTL_MINOR``,
    ``NV_NVSWITCH_DEVICE_NAME``, nvidia-modprobe ``nvidia-modprobe-utils.h``; the major
    from ``/proc/devices``). The toolkit injects ``/dev/nvidia-nvswitchctl`` and whatever
    ``/dev/nvidia-nvswitch*`` exists (``internal/discover``, ``NewNvSwitchDiscoverer``).

    Returns:
        The control node (``present=False`` when the host lacks it), then each
        ``nvidia-nvswitch<N>`` that exists, by ``N``; ``()`` when ``/proc/devices`` has no
        ``nvidia-nvswitch`` major (no switch driver).

    Raises:
        DiscoveryError: a host node that is not the char device it should be
            ("invalid device node").
    """
    major = majors.get("nvidia-nvswitch")
    if major is None:
        return ()
    nodes = [device_node(root, "/dev/nvidia-nvswitchctl", major, NVSWITCH_CTL_MINOR)]
    for n in _numbered(listdir(root.dev("/dev"), "/dev"), "nvidia-nvswitch"):
        nodes.append(device_node(root, f"/dev/nvidia-nvswitch{n}", major, n))
    return tuple(nodes)


def gdrcopy_nodes(root: HostRoot, majors: Mapping[str, int]) -> tuple[HostDeviceNode, ...]:
    """Describe ``/dev/gdrdrv`` (``NVIDIA_GDRCOPY=enabled``).

    GDRCopy's ``gdrdrv.ko`` registers a dynamic major named ``gdrdrv`` and its node is
    ``<major>:0`` (gdrcopy ``scripts/gdrdrv_devnode.sh``: ``mknod /dev/gdrdrv c <major>
    0``). The toolkit injects ``/dev/gdrdrv`` when it exists.

    Returns:
        ``(node,)`` (``present=False`` when the host lacks the node), or ``()`` when
        ``/proc/devices`` has no ``gdrdrv`` major (module not loaded).

    Raises:
        DiscoveryError: the host node is not that char device ("invalid device node").
    """
    major = majors.get("gdrdrv")
    if major is None:
        return ()
    return (device_node(root, "/dev/gdrdrv", major, 0),)


def gds_nodes(root: HostRoot, majors: Mapping[str, int]) -> tuple[HostDeviceNode, ...]:
    """Describe the GPUDirect Storage nodes ``/dev/nvidia-fs<N>`` (``NVIDIA_GDS=enabled``).

    ``nvidia-fs.ko`` registers a dynamic major named ``nvidia-fs`` and makes
    ``nvidia-fs<N>`` with minor ``N`` for ``N`` below its ``max_devices`` parameter
    (default 16; gds-nvidia-fs ``src/nvfs-core.c``, ``nvfs_init``). The toolkit injects
    whatever ``/dev/nvidia-fs*`` exists and then also mounts ``/run/udev`` and
    ``/etc/cufile.json`` (``internal/discover/gds.go``); those files are not devices and
    are not described here.

    Returns:
        Each existing ``nvidia-fs<N>``, by ``N``; ``()`` when there is none or
        ``/proc/devices`` has no ``nvidia-fs`` major.

    Raises:
        DiscoveryError: a host node that is not ``<nvidia-fs major>:N`` ("invalid device
            node").
    """
    major = majors.get("nvidia-fs")
    if major is None:
        return ()
    names = listdir(root.dev("/dev"), "/dev")
    return tuple(
        device_node(root, f"/dev/nvidia-fs{n}", major, n) for n in _numbered(names, "nvidia-fs")
    )


def _uverbs_node(root: HostRoot, n: int, dynamic: list[tuple[int, ...]]) -> HostDeviceNode:
    """``/dev/infiniband/uverbs<n>`` checked against the kernel's numbering."""
    path = f"/dev/infiniband/uverbs{n}"
    if n < IB_UVERBS_NUM_FIXED_MINOR:
        return device_node(root, path, IB_UVERBS_MAJOR, IB_UVERBS_BASE_MINOR + n)
    host_path = root.dev(path)
    if not dynamic:  # read /proc/devices once, only when a node needs it
        text = read_text(root.proc("devices"), what="/proc/devices")
        found = parse_char_majors(text).get("infiniband_verbs", ())
        dynamic.append(tuple(m for m in found if m != IB_UVERBS_MAJOR))
    majors = dynamic[0]
    minor = n - IB_UVERBS_NUM_FIXED_MINOR
    st = _lstat(host_path)
    if st is not None and stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) in majors:
        return device_node(root, path, os.major(st.st_rdev), minor)
    if st is None:  # vanished since it was listed
        raise DiscoveryError("device node disappeared while reading it", path=host_path)
    expected = (
        f"char <dynamic infiniband_verbs major {'/'.join(map(str, majors))}>:{minor}"
        if majors
        else "a dynamic infiniband_verbs major in /proc/devices (there is none)"
    )
    raise _invalid(host_path, st, expected)


def mofed_nodes(root: HostRoot) -> tuple[HostDeviceNode, ...]:
    """Describe the RDMA nodes MOFED applications need (``NVIDIA_MOFED=enabled``).

    The toolkit injects every ``/dev/infiniband/uverbs*`` and ``/dev/infiniband/rdma_cm``
    that exists (``internal/discover/mofed.go``). Here they are checked first:

    * ``uverbs<N>`` (``drivers/infiniband/core/uverbs_main.c``): for ``N < 32`` the fixed
      region, ``231:192+N``; from ``N = 32`` on the dynamic region, ``<major>:N-32`` where
      ``<major>`` is an ``infiniband_verbs`` major of ``<proc>/devices`` other than 231
      (read only when such a node exists).
    * ``rdma_cm`` is a misc device with a dynamic minor (``drivers/infiniband/core/ucma.c``,
      ``MISC_DYNAMIC_MINOR``, node name ``infiniband/rdma_cm``): the dynamic-minor rule of
      the module docstring, with ``<proc>/misc``.

    Only nodes that exist are described (the numbers depend on the host's adapters), with
    the major:minor read from them; the driver majors need no ``majors`` argument.

    Returns:
        The ``uverbs<N>`` by ``N``, then ``rdma_cm``; ``()`` when ``/dev/infiniband`` has
        none of them.

    Raises:
        DiscoveryError: a node whose type or number is not what the kernel gives it
            ("invalid device node"); an unreadable ``<proc>/devices`` when a dynamic-region
            ``uverbs`` node needs it.
    """
    names = listdir(root.dev("/dev/infiniband"), "/dev/infiniband")
    dynamic: list[tuple[int, ...]] = []
    nodes = [_uverbs_node(root, n, dynamic) for n in _numbered(names, "uverbs")]
    rdma_cm = _misc_node(root, "/dev/infiniband/rdma_cm", "rdma_cm")
    if rdma_cm is not None:
        nodes.append(rdma_cm)
    return tuple(nodes)


# -- WSL2 ---------------------------------------------------------------------------------


def _regular_file(
    root: HostRoot, rel_dir: str, host_dir: str, name: str
) -> tuple[str, str | None] | None:
    """``(host path of the regular file, link text or None)`` for the entry ``name`` of the
    directory ``rel_dir`` (driver-root terms; ``host_dir`` is where it resolved to), a link
    being resolved inside the driver root; ``None`` when it is not a regular file."""
    entry = os.path.join(host_dir, name)
    try:
        st = os.lstat(entry)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise DiscoveryError(f"cannot stat a WSL driver file: {e.strerror}", path=entry) from None
    target = None
    host_path = entry
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(entry)
        except OSError as e:
            raise DiscoveryError(f"cannot read a link: {e.strerror}", path=entry) from None
        host_path = resolve_in_root(root.driver_root, f"{rel_dir}/{name}")
        try:
            st = os.lstat(host_path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as e:
            raise DiscoveryError(
                f"cannot stat a WSL driver file: {e.strerror}", path=host_path
            ) from None
    if not stat.S_ISREG(st.st_mode):
        return None
    return host_path, target


def _elf_soname(host_path: str) -> str | None:
    """The ``DT_SONAME`` of the ELF file at ``host_path`` when it is a plain file name."""
    from ..linux.elfscan import dynamic_names

    try:
        names = dynamic_names(host_path)
    except (OSError, ValueError):
        return None
    soname = names[0] if names else None
    if not soname or "/" in soname or soname in (".", "..") or "\0" in soname:
        return None
    return soname


def windows_to_nvidia_version(windows: str) -> str | None:
    """The NVIDIA driver version of a Windows display driver version:
    ``31.0.15.3667`` -> ``536.67``, ``32.0.15.6094`` -> ``560.94``.

    NVIDIA's Windows version ends with the driver's own version: the last five digits of
    the third and fourth fields written together (``15`` + ``3667`` -> ``53667``) are the
    branch and the release (``536.67``), what ``nvidia-smi`` prints on Windows and WSL.
    ``None`` for anything that is not four dot-separated decimal fields, the last of at
    most four digits.
    """
    parts = windows.strip().split(".")
    if len(parts) != 4 or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    if len(parts[3]) > 4:
        return None
    # the fields are numbers: a fourth field of 605 is 0605
    tail = parts[2][-1] + parts[3].rjust(4, "0")
    return f"{int(tail[:3])}.{tail[3:]}"


def parse_driver_ver(text: str) -> str | None:
    """The version field of the ``DriverVer`` line of an INF file's text, or ``None``."""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep or key.strip().lower() != "driverver":
            continue
        fields = value.split(";", 1)[0].split(",")
        if len(fields) >= 2 and fields[1].strip():
            return fields[1].strip()
    return None


def _decode_inf(data: bytes) -> str:
    """INF files are UTF-16 (with a byte order mark) or 8-bit text."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", "replace")
    return data.decode("utf-8", "replace")


def wsl_driver_version(root: HostRoot, wsl: WslDevices) -> tuple[str, str]:
    """The NVIDIA driver version of a WSL2 host, and where it came from (or why unknown).

    WSL2 has no ``/proc/driver/nvidia/version`` and its libraries carry no version in
    their names (``libcuda.so.1.1``). The Windows driver package that WSL maps into
    :data:`WSL_DRIVERS_DIR` holds its INF file, named after the package directory
    (``nv_dispi.inf_amd64_<hash>/nv_dispi.inf``), whose ``DriverVer`` is the Windows
    version of the driver; :func:`windows_to_nvidia_version` turns it into the NVIDIA
    version (``31.0.15.3667`` -> ``536.67``). The first driver store in
    ``wsl.driver_stores`` with a readable INF and ``DriverVer`` wins.

    Returns:
        ``(version, source)``: ``("536.67", "<host path of the INF>")``, or ``("",
        <reason>)`` when no store tells it.
    """
    for store in wsl.driver_stores:
        package = os.path.basename(store)
        stem, sep, _ = package.partition(".inf_")
        if not sep:
            continue
        path = os.path.join(store, stem + ".inf")
        try:
            with open(path, "rb") as f:
                data = f.read(4 << 20)
        except OSError:
            continue
        windows = parse_driver_ver(_decode_inf(data))
        version = windows_to_nvidia_version(windows) if windows else None
        if version is not None:
            return version, path
    stores = ", ".join(wsl.driver_stores) or WSL_DRIVERS_DIR
    return "", f"no DriverVer in the INF file of the driver store ({stores})"


def wsl_devices(root: HostRoot, searched: set[str] | None = None) -> WslDevices | None:
    """Describe a WSL2 host's GPU: ``/dev/dxg`` and the driver files, or ``None``.

    ``/dev/dxg`` is the paravirtualised GPU of the WSL2 kernel (``drivers/hv/dxgkrnl``,
    ``misc_register`` of ``"dxg"`` with ``MISC_DYNAMIC_MINOR``): it is checked with the
    dynamic-minor rule of the module docstring, and its presence is what makes the host a
    WSL2 host here. The toolkit injects ``/dev/dxg`` as the only device
    (``pkg/nvcdi/device-wsl.go``) and chooses its WSL mode when ``libdxcore.so`` is in
    the ld cache (``internal/info``, ``HasDXCore``).

    The driver lives in the driver root, outside the usual library directories:
    :data:`WSL_LIB_DIR` (``libcuda.so.1.1``, ``libcuda.so``, ``libdxcore.so``,
    ``libnvidia-ml.so.1``, ``libnvwgf2umx.so``, ``nvidia-smi``, ...) and the Windows
    driver store, one directory per driver package under :data:`WSL_DRIVERS_DIR`. The
    toolkit mounts :data:`WSL_DRIVER_STORE_FILES`, each from the first driver store path
    dxcore reports that holds it, else from :data:`WSL_LIB_DIR`, and links
    ``/usr/bin/nvidia-smi`` to the ``nvidia-smi`` it found (``pkg/nvcdi/driver-wsl.go``).
    Without dxcore, the driver stores here are the directories that hold at least one of
    those files, in name order. Paths are resolved inside the driver root
    (:func:`ocihook.linux.pathsafe.resolve_in_root`).

    The directories looked in (driver-root terms: :data:`WSL_LIB_DIR`,
    :data:`WSL_DRIVERS_DIR` and each of its packages) are added to ``searched``, when
    given.

    Returns:
        ``None`` when the dev root has no ``/dev/dxg``; else a :class:`WslDevices`
        (a missing :data:`WSL_LIB_DIR` or driver store gives empty lists and a warning).

    Raises:
        DiscoveryError: ``/dev/dxg`` is not a misc char device with the minor
            ``<proc>/misc`` gives ``dxg`` ("invalid device node"); an unreadable
            directory or a link loop in the driver root.
    """
    dxg = _misc_node(root, "/dev/dxg", "dxg")
    if dxg is None:
        return None
    looked: set[str] = set() if searched is None else searched
    looked.update((WSL_LIB_DIR, WSL_DRIVERS_DIR))
    warnings: list[str] = []
    lib_dir = resolve_in_root(root.driver_root, WSL_LIB_DIR)
    names = sorted(listdir(lib_dir, "WSL driver libraries"))
    if not names:
        warnings.append(f"{lib_dir} is missing or empty: no WSL driver libraries")
    libraries: list[WslFile] = []
    for name in names:
        found = _regular_file(root, WSL_LIB_DIR, lib_dir, name)
        if found is None:
            entry = os.path.join(lib_dir, name)
            if os.path.islink(entry):
                warnings.append(f"{entry} is a link to no regular file; skipped")
            continue
        libraries.append(
            WslFile(
                name=name,
                host_path=found[0],
                link_target=found[1],
                path=f"{WSL_LIB_DIR}/{name}",
            )
        )

    store_dirs: list[tuple[str, str]] = []  # (driver-root path, host path)
    drivers_host = resolve_in_root(root.driver_root, WSL_DRIVERS_DIR)
    for package in sorted(listdir(drivers_host, "the WSL driver store")):
        rel = f"{WSL_DRIVERS_DIR}/{package}"
        looked.add(rel)
        host = resolve_in_root(root.driver_root, rel)
        if not os.path.isdir(host):
            continue
        if any(_regular_file(root, rel, host, f) for f in WSL_DRIVER_STORE_FILES):
            store_dirs.append((rel, host))
    if len(store_dirs) > 1:
        warnings.append(
            "several driver stores hold NVIDIA files: "
            + ", ".join(host for _, host in store_dirs)
            + "; the first holding each file is used"
        )
    driver_files: list[WslFile] = []
    missing: list[str] = []
    for name in WSL_DRIVER_STORE_FILES:
        for rel_dir, host_dir in (*store_dirs, (WSL_LIB_DIR, lib_dir)):
            found = _regular_file(root, rel_dir, host_dir, name)
            if found is not None:
                driver_files.append(
                    WslFile(
                        name=name,
                        host_path=found[0],
                        link_target=found[1],
                        path=f"{rel_dir}/{name}",
                        soname=_elf_soname(found[0]) if ".so" in name else None,
                    )
                )
                break
        else:
            missing.append(name)
    return WslDevices(
        dxg=dxg,
        lib_dir=lib_dir,
        libraries=tuple(libraries),
        driver_stores=tuple(host for _, host in store_dirs),
        driver_files=tuple(driver_files),
        missing=tuple(missing),
        warnings=tuple(warnings),
    )


def device_node(root: HostRoot, path: str, major: int, minor: int) -> HostDeviceNode:
    """Describe ``path``; a host node that exists must be that very char device.

    Raises:
        DiscoveryError: the host node exists but is not a character device with
            ``major:minor`` (libnvidia-container refuses such nodes as "invalid device node").
    """
    host_path = root.dev(path)
    try:
        st = os.lstat(host_path)
    except FileNotFoundError:
        return HostDeviceNode(path=path, host_path=host_path, major=major, minor=minor)
    except OSError as e:
        raise DiscoveryError(f"cannot stat device node: {e.strerror}", path=host_path) from None
    if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != (
        major,
        minor,
    ):
        actual = (
            f"char {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            if stat.S_ISCHR(st.st_mode)
            else "not a character device"
        )
        raise DiscoveryError(
            "invalid device node",
            path=host_path,
            value=actual,
            hint=f"expected char {major}:{minor}; fix or remove the node",
        )
    return HostDeviceNode(
        path=path,
        host_path=host_path,
        major=major,
        minor=minor,
        file_mode=stat.S_IMODE(st.st_mode),
        uid=st.st_uid,
        gid=st.st_gid,
        present=True,
    )


def with_driver_defaults(node: HostDeviceNode, defaults: tuple[int, int, int]) -> HostDeviceNode:
    """``node`` as the driver would create it when the host lacks it: the mode and owner
    of the driver's parameters (:func:`parse_device_file_params`); a present node as is."""
    if node.present:
        return node
    mode, uid, gid = defaults
    return HostDeviceNode(
        node.path, node.host_path, node.major, node.minor, file_mode=mode, uid=uid, gid=gid
    )
