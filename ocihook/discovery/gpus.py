"""NVIDIA GPUs, their MIG devices and their device nodes, behind one interface.

:func:`enumerate_gpus` returns a :class:`GpuInventory` from one of two backends:

* ``"procfs"`` — no dependency. Reads ``<proc>/driver/nvidia/gpus/<bus id>/information``
  (one directory per GPU; the index is the PCI bus order, as NVML and ``nvidia-smi``
  number GPUs), ``<proc>/driver/nvidia/version``, and for MIG the capability files
  ``<proc>/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/ci<C>/access`` cross-checked
  with ``<proc>/driver/nvidia-caps/mig-minors``. Brand, architecture, CUDA version and
  MIG UUIDs are unknown (``None``).
* ``"nvml"`` — :mod:`ocihook.discovery.nvml`, through nvidia-ml-py's ``pynvml`` (optional
  extra ``ocihook[nvml]``); adds brand, compute capability, the driver's CUDA version and
  MIG UUIDs. NVML gives no capability minors, so MIG device nodes still come from procfs.

Both give the same ``index``, ``minor``, ``uuid``, ``bus_id``, ``model`` and ``proc_dir``
for the same host. Device nodes are checked under the dev root with :func:`device_node`.

This module is on the path of every container start: it imports neither ``pynvml`` nor
``typing``, ``dataclasses`` or ``re``.
"""

from __future__ import annotations

import os
import stat

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot, read_text
from ..core.records import Record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "BACKENDS",
    "CAPS_DEVICE_DIR",
    "Gpu",
    "GpuInventory",
    "HostDeviceNode",
    "MigDevice",
    "canonical_bus_id",
    "device_node",
    "enumerate_gpus",
    "is_gpu_uuid",
    "mig_management_nodes",
    "parse_capability_file",
    "parse_gpu_information",
    "parse_mig_minors",
    "read_gpus",
]

#: The values :func:`enumerate_gpus` accepts for ``backend``.
BACKENDS = ("auto", "procfs", "nvml")
#: Directory of the capability device nodes, ``nvidia-cap<minor>`` (nvidia-modprobe).
CAPS_DEVICE_DIR = "/dev/nvidia-caps"
#: Character devices have 20 minor bits (Linux ``MINORBITS``).
_MINOR_LIMIT = 1 << 20
#: Mode of a capability node when the capability file does not say (``r--r--r--``).
_DEFAULT_CAP_MODE = 0o444

_HEX = frozenset("0123456789abcdefABCDEF")


def _is_hex(text: str, lengths: tuple[int, ...]) -> bool:
    return len(text) in lengths and set(text) <= _HEX


def _decimal(text: str) -> int | None:
    """``text`` as a non-negative decimal integer (ASCII digits only), else ``None``."""
    return int(text) if text.isascii() and text.isdigit() else None


def _numbered(prefix: str, text: str) -> int | None:
    """The ``N`` of ``<prefix>N`` (``gi3`` -> 3), else ``None``."""
    return _decimal(text[len(prefix) :]) if text.startswith(prefix) else None


def is_gpu_uuid(text: str) -> bool:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (hex digits, any case)."""
    if not text.startswith("GPU-"):
        return False
    groups = text[4:].split("-")
    return len(groups) == 5 and all(
        _is_hex(g, (n,)) for g, n in zip(groups, (8, 4, 4, 4, 12), strict=True)
    )


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


# -- parsers (pure) -------------------------------------------------------------------------


def parse_gpu_information(text: str, *, path: str | None = None) -> dict[str, str]:
    """Parse a ``/proc/driver/nvidia/gpus/<bus id>/information`` file into a dict.

    Lines are ``Key: <spaces or tabs> value``; each is split on its first ``:``. Lines
    without a colon are ignored. Keys keep their case (``"Device Minor"``). Never raises.
    """
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            info[key.strip()] = value.strip()
    return info


def canonical_bus_id(raw: str, *, path: str) -> tuple[str, tuple[int, int, int, int]]:
    """``0000:3b:00.0`` or ``00000000:3B:00.0`` -> (``00000000:3b:00.0``, sort key).

    Raises:
        DiscoveryError: ``raw`` is not ``domain:bus:device.function`` in hex with a 4- or
            8-digit domain (field ``Bus Location``).
    """
    text = raw.strip()
    domain, _, rest = text.partition(":")
    bus, _, rest = rest.partition(":")
    dev, _, fn = rest.partition(".")
    if not (
        _is_hex(domain, (4, 8))
        and _is_hex(bus, (2,))
        and _is_hex(dev, (2,))
        and fn in ("0", "1", "2", "3", "4", "5", "6", "7")
    ):
        raise DiscoveryError("malformed PCI bus id", path=path, field="Bus Location", value=raw)
    key = (int(domain, 16), int(bus, 16), int(dev, 16), int(fn))
    return f"{key[0]:08x}:{key[1]:02x}:{key[2]:02x}.{key[3]:x}", key


def _is_mig_cap_name(name: str) -> bool:
    """``config``, ``monitor``, ``gpu<N>/gi<G>/access`` or ``gpu<N>/gi<G>/ci<C>/access``."""
    if name in ("config", "monitor"):
        return True
    parts = name.split("/")
    if len(parts) not in (3, 4) or parts[-1] != "access":
        return False
    if _numbered("gpu", parts[0]) is None or _numbered("gi", parts[1]) is None:
        return False
    return len(parts) == 3 or _numbered("ci", parts[2]) is not None


def parse_mig_minors(text: str, *, path: str | None = None) -> tuple[dict[str, int], list[str]]:
    """Parse ``/proc/driver/nvidia-caps/mig-minors`` (module ``nvidia-caps``).

    Each line is ``<capability> <minor>``: ``config 1``, ``monitor 2``,
    ``gpu0/gi1/access 12``, ``gpu0/gi1/ci0/access 13``; ``gpuN`` is the GPU's device
    *minor*, not its index. The file lists every capability the driver could create, not
    only existing MIG devices.

    Args:
        text: the file's contents.
        path: the file, named in warnings.

    Returns:
        ``({capability: minor}, warnings)``. Blank lines are ignored; malformed lines
        (not two fields, an unknown capability name, a minor that is not a decimal below
        2**20) and repeated capabilities (the first wins) are skipped and summarised in
        at most two warnings. Never raises.
    """
    minors: dict[str, int] = {}
    malformed: list[str] = []
    repeated: list[str] = []
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        minor = _decimal(fields[1]) if len(fields) == 2 else None
        if minor is None or minor >= _MINOR_LIMIT or not _is_mig_cap_name(fields[0]):
            malformed.append(line)
        elif fields[0] in minors:
            repeated.append(fields[0])
        else:
            minors[fields[0]] = minor
    where = path or "mig-minors"
    warnings = []
    if malformed:
        warnings.append(
            f"{where}: skipped {len(malformed)} malformed line(s), first {malformed[0][:80]!r}"
        )
    if repeated:
        warnings.append(
            f"{where}: {len(repeated)} capability(ies) listed twice, first {repeated[0]!r};"
            " the first minor was kept"
        )
    return minors, warnings


def parse_capability_file(text: str, *, path: str | None = None) -> tuple[int, int]:
    """Parse an NVIDIA capability file into ``(minor, mode)``.

    The files ``/proc/driver/nvidia/capabilities/mig/{config,monitor}`` and
    ``.../capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access`` read
    ``DeviceFileMinor: <n>``, ``DeviceFileMode: <decimal mode>``, ``DeviceFileModify: 0|1``
    (driver ``nv-caps.c``; nvidia-modprobe creates ``/dev/nvidia-caps/nvidia-cap<n>``
    from them). ``DeviceFileMode`` is decimal (``292`` = ``0o444``); when absent the
    mode is ``0o444``.

    Raises:
        DiscoveryError: ``DeviceFileMinor`` missing or not a decimal below 2**20, or
            ``DeviceFileMode`` not a decimal at most ``0o7777``.
    """
    info = parse_gpu_information(text)
    raw_minor = info.get("DeviceFileMinor")
    minor = _decimal(raw_minor) if raw_minor is not None else None
    if minor is None or minor >= _MINOR_LIMIT:
        raise DiscoveryError(
            "missing or malformed capability minor",
            path=path,
            field="DeviceFileMinor",
            value=raw_minor,
        )
    raw_mode = info.get("DeviceFileMode")
    if raw_mode is None:
        return minor, _DEFAULT_CAP_MODE
    mode = _decimal(raw_mode)
    if mode is None or mode > 0o7777:
        raise DiscoveryError(
            "malformed capability file mode", path=path, field="DeviceFileMode", value=raw_mode
        )
    return minor, mode


# -- device nodes ---------------------------------------------------------------------------


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


#: ``(mode, uid, gid)`` nvidia.ko gives the device files it creates when its parameters
#: do not say (the module's defaults: ``0666``, root).
DEVICE_FILE_DEFAULTS = (0o666, 0, 0)


def parse_device_file_params(text: str) -> tuple[int, int, int] | None:
    """``(mode, uid, gid)`` of the device files the NVIDIA driver creates, from its
    ``/proc/driver/nvidia/params``: ``DeviceFileMode`` (decimal, ``438`` = ``0o666``),
    ``DeviceFileUID`` and ``DeviceFileGID`` (decimal; the nvidia.ko module parameters
    ``NVreg_DeviceFileMode`` / ``UID`` / ``GID``). A missing key keeps its default
    (:data:`DEVICE_FILE_DEFAULTS`); ``None`` when a value is not a decimal in range (mode
    at most ``0o7777``, ids below ``2**32``). Never raises."""
    info = parse_gpu_information(text)
    out = list(DEVICE_FILE_DEFAULTS)
    for i, (key, limit) in enumerate(
        (("DeviceFileMode", 0o7777), ("DeviceFileUID", 2**32 - 1), ("DeviceFileGID", 2**32 - 1))
    ):
        raw = info.get(key)
        if raw is None:
            continue
        value = _decimal(raw) if len(raw) <= 10 else None
        if value is None or value > limit:
            return None
        out[i] = value
    return out[0], out[1], out[2]


def with_driver_defaults(node: HostDeviceNode, defaults: tuple[int, int, int]) -> HostDeviceNode:
    """``node`` as the driver would create it when the host lacks it: the mode and owner
    of the driver's parameters (:func:`parse_device_file_params`); a present node as is."""
    if node.present:
        return node
    mode, uid, gid = defaults
    return HostDeviceNode(
        node.path, node.host_path, node.major, node.minor, file_mode=mode, uid=uid, gid=gid
    )


def _cap_node(root: HostRoot, major: int, minor: int, mode: int) -> HostDeviceNode:
    """``/dev/nvidia-caps/nvidia-cap<minor>``; a missing host node gets the driver's mode."""
    node = device_node(root, f"{CAPS_DEVICE_DIR}/nvidia-cap{minor}", major, minor)
    if node.present:
        return node
    return HostDeviceNode(node.path, node.host_path, major, minor, file_mode=mode)


# -- MIG through procfs ---------------------------------------------------------------------


class _CapProblem(Exception):
    """A capability that cannot be used; the message becomes a warning or an error."""


class _MigContext:
    """What MIG discovery needs once per enumeration: the ``nvidia-caps`` major and the
    ``mig-minors`` table (read on first use), and the warnings given so far."""

    def __init__(self, root: HostRoot, majors: Mapping[str, int], warnings: list[str]):
        self.root = root
        self.major = majors.get("nvidia-caps")
        self.warnings = warnings
        self._table: dict[str, int] | None = None
        self._no_major_warned = False

    def table(self) -> dict[str, int]:
        if self._table is None:
            path = self.root.proc("driver/nvidia-caps/mig-minors")
            try:
                text = read_text(path, what="MIG minors file")
            except DiscoveryError as e:
                self.warnings.append(f"{e.message}: {path}; capability minors not cross-checked")
                self._table = {}
            else:
                self._table, table_warnings = parse_mig_minors(text, path=path)
                self.warnings.extend(table_warnings)
        return self._table

    def caps_major(self) -> int | None:
        if self.major is None and not self._no_major_warned:
            self._no_major_warned = True
            self.warnings.append(
                "nvidia-caps is not loaded (/proc/devices has no nvidia-caps major):"
                " MIG devices and MIG capabilities skipped"
            )
        return self.major

    def resolve(self, name: str, cap_file: str) -> tuple[int, int]:
        """``(minor, mode)`` of capability ``name`` from its capability file, checked
        against ``mig-minors``.

        Raises:
            _CapProblem: the file is missing, unreadable or malformed, or ``mig-minors``
                gives another minor.
        """
        try:
            text = read_text(cap_file, what="capability file")
            minor, mode = parse_capability_file(text, path=cap_file)
        except DiscoveryError as e:
            raise _CapProblem(str(e)) from None
        listed = self.table().get(name)
        if listed is not None and listed != minor:
            raise _CapProblem(f"{cap_file} says minor {minor} but mig-minors says {name} {listed}")
        return minor, mode

    def mig_device(
        self,
        gpu_index: int,
        gpu_minor: int,
        gi: int,
        ci: int,
        *,
        uuid: str | None = None,
        nvml_index: int | None = None,
    ) -> MigDevice | None:
        """The MIG device ``gi``/``ci`` of GPU ``gpu_minor`` with its capability nodes, or
        ``None`` (with a warning) when its capabilities are missing or inconsistent.

        Raises:
            DiscoveryError: a host capability node is not the device it should be.
        """
        major = self.caps_major()
        if major is None:
            return None
        gi_dir = self.root.proc(f"driver/nvidia/capabilities/gpu{gpu_minor}/mig/gi{gi}")
        gi_file = os.path.join(gi_dir, "access")
        ci_file = os.path.join(gi_dir, f"ci{ci}", "access")
        prefix = f"gpu{gpu_minor}/gi{gi}"
        try:
            gi_minor, gi_mode = self.resolve(f"{prefix}/access", gi_file)
            ci_minor, ci_mode = self.resolve(f"{prefix}/ci{ci}/access", ci_file)
        except _CapProblem as e:
            self.warnings.append(f"MIG device gi {gi} ci {ci} of GPU {gpu_index} skipped: {e}")
            return None
        return MigDevice(
            parent_index=gpu_index,
            parent_minor=gpu_minor,
            gi=gi,
            ci=ci,
            gi_node=_cap_node(self.root, major, gi_minor, gi_mode),
            ci_node=_cap_node(self.root, major, ci_minor, ci_mode),
            gi_cap_file=gi_file,
            ci_cap_file=ci_file,
            uuid=uuid,
            nvml_index=nvml_index,
        )

    def procfs_mig_devices(self, gpu: Gpu) -> tuple[MigDevice, ...]:
        """The MIG devices procfs shows for ``gpu``: one per existing
        ``capabilities/gpu<minor>/mig/gi<G>/ci<C>/access`` file, in ``(gi, ci)`` order."""
        mig_dir = self.root.proc(f"driver/nvidia/capabilities/gpu{gpu.minor}/mig")
        found: list[tuple[int, int]] = []
        for gi_name in _listdir(mig_dir):
            gi = _numbered("gi", gi_name)
            if gi is None:
                continue
            for ci_name in _listdir(os.path.join(mig_dir, gi_name)):
                ci = _numbered("ci", ci_name)
                if ci is not None and os.path.isfile(
                    os.path.join(mig_dir, gi_name, ci_name, "access")
                ):
                    found.append((gi, ci))
        devices = []
        for gi, ci in sorted(found):
            device = self.mig_device(gpu.index, gpu.minor, gi, ci)
            if device is not None:
                devices.append(device)
        return tuple(devices)


def _listdir(path: str) -> list[str]:
    """Names in ``path``; ``[]`` when it is missing or not a directory."""
    try:
        return os.listdir(path)
    except OSError:
        return []


def mig_management_nodes(root: HostRoot, majors: Mapping[str, int]) -> tuple[HostDeviceNode, ...]:
    """The MIG ``config`` and ``monitor`` capability nodes the host has, in that order.

    Each is ``/dev/nvidia-caps/nvidia-cap<minor>`` with the ``nvidia-caps`` major of
    ``/proc/devices``; it exists when ``<proc>/driver/nvidia/capabilities/mig/<name>``
    does, whose ``DeviceFileMinor`` must agree with ``config``/``monitor`` in
    ``<proc>/driver/nvidia-caps/mig-minors`` (NVIDIA MIG user guide; the toolkit's
    ``NVIDIA_MIG_CONFIG_DEVICES`` / ``NVIDIA_MIG_MONITOR_DEVICES``, privileged only).

    Args:
        root: where to read from.
        majors: character majors by driver name (``parse_devices`` of ``/proc/devices``).

    Returns:
        0 to 2 nodes: ``()`` on a host without MIG capabilities or without the
        ``nvidia-caps`` module (no major).

    Raises:
        DiscoveryError: a capability file is malformed or disagrees with ``mig-minors``,
            or a host node is not the device it should be.
    """
    major = majors.get("nvidia-caps")
    if major is None:
        return ()
    ctx = _MigContext(root, majors, [])
    nodes = []
    for name in ("config", "monitor"):
        cap_file = root.proc(f"driver/nvidia/capabilities/mig/{name}")
        if not os.path.exists(cap_file):
            continue
        try:
            minor, mode = ctx.resolve(name, cap_file)
        except _CapProblem as e:
            raise DiscoveryError(f"unusable MIG {name} capability: {e}", path=cap_file) from None
        nodes.append(_cap_node(root, major, minor, mode))
    return tuple(nodes)


# -- enumeration ----------------------------------------------------------------------------


def read_gpus(root: HostRoot) -> tuple[tuple[Gpu, ...], list[str]]:
    """The GPUs of ``<proc>/driver/nvidia/gpus`` in PCI bus order, without MIG devices.

    Directories whose ``information`` says ``GPU Excluded: Yes`` (older drivers:
    ``Blacklisted: Yes``) are skipped with a warning; a missing ``gpus`` directory means
    no GPUs (with a warning).

    Returns:
        ``(gpus, warnings)``.

    Raises:
        DiscoveryError: the directory cannot be listed, or an ``information`` file is
            unreadable or has a malformed bus id, device minor or GPU UUID.
    """
    gpus_dir = root.proc("driver/nvidia/gpus")
    warnings: list[str] = []
    try:
        names = os.listdir(gpus_dir)
    except FileNotFoundError:
        return (), [f"{gpus_dir} does not exist: no GPUs"]
    except OSError as e:
        raise DiscoveryError(f"cannot list GPUs: {e.strerror}", path=gpus_dir) from None
    found: list[tuple[tuple[int, int, int, int], str, dict[str, str], str]] = []
    for name in names:
        info_path = os.path.join(gpus_dir, name, "information")
        text = read_text(info_path, what="GPU information file")
        info = parse_gpu_information(text, path=info_path)
        excluded = info.get("GPU Excluded", info.get("Blacklisted", "No"))
        if excluded.strip().lower() == "yes":
            warnings.append(f"GPU {name} is excluded by the driver; skipped")
            continue
        bus_id, key = canonical_bus_id(info.get("Bus Location", name), path=info_path)
        found.append((key, bus_id, info, info_path))
    found.sort(key=lambda t: t[0])
    gpus = []
    for index, (_key, bus_id, info, info_path) in enumerate(found):
        minor_text = info.get("Device Minor")
        if minor_text is None or _decimal(minor_text) is None:
            raise DiscoveryError(
                "missing or malformed device minor",
                path=info_path,
                field="Device Minor",
                value=minor_text,
            )
        uuid = info.get("GPU UUID", "")
        if not is_gpu_uuid(uuid):
            raise DiscoveryError(
                "missing or malformed GPU UUID", path=info_path, field="GPU UUID", value=uuid
            )
        gpus.append(
            Gpu(
                index=index,
                minor=int(minor_text),
                uuid=uuid,
                bus_id=bus_id,
                model=info.get("Model", "unknown"),
                proc_dir=os.path.dirname(info_path),
            )
        )
    return tuple(gpus), warnings


def _replace_gpu(gpu: Gpu, **changes: object) -> Gpu:
    values = {name: getattr(gpu, name) for name in Gpu.__fields__}
    values.update(changes)
    return Gpu(**values)


def _procfs_driver_version(root: HostRoot, warnings: list[str]) -> str | None:
    from .nvidia import parse_driver_version  # lazy: nvidia.py imports this module

    path = root.proc("driver/nvidia/version")
    try:
        return parse_driver_version(read_text(path, what="NVIDIA driver version file"), path=path)
    except DiscoveryError as e:
        warnings.append(f"no driver version: {e}")
        return None


def _enumerate_procfs(root: HostRoot, majors: Mapping[str, int]) -> GpuInventory:
    warnings: list[str] = []
    driver_version = _procfs_driver_version(root, warnings)
    gpus, gpu_warnings = read_gpus(root)
    warnings.extend(gpu_warnings)
    ctx = _MigContext(root, majors, warnings)
    with_mig = tuple(
        _replace_gpu(gpu, mig_devices=mig) if (mig := ctx.procfs_mig_devices(gpu)) else gpu
        for gpu in gpus
    )
    return GpuInventory(
        gpus=with_mig,
        driver_version=driver_version,
        cuda_version=None,
        backend="procfs",
        warnings=tuple(warnings),
    )


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
    inventory = _enumerate_procfs(root, majors)
    if fallback is None:
        return inventory
    return GpuInventory(
        gpus=inventory.gpus,
        driver_version=inventory.driver_version,
        cuda_version=None,
        backend="procfs",
        warnings=(fallback, *inventory.warnings),
    )
