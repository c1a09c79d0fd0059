"""MIG through procfs: the ``nvidia-caps`` capability nodes of MIG devices and of MIG
management (``config``/``monitor``), cross-checked against ``mig-minors`` (NVIDIA MIG user
guide; libnvidia-container ``nvc_mig.c``)."""

from __future__ import annotations

import os

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot, listdir, read_text
from .devices import device_node
from .procfs import numbered, parse_capability_file, parse_mig_minors
from .records import Gpu, HostDeviceNode, MigDevice

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Mapping


#: Directory of the capability device nodes, ``nvidia-cap<minor>`` (nvidia-modprobe).
CAPS_DEVICE_DIR = "/dev/nvidia-caps"


#: Mode of a capability node when the capability file does not say (``r--r--r--``).


def _cap_node(root: HostRoot, major: int, minor: int, mode: int) -> HostDeviceNode:
    """``/dev/nvidia-caps/nvidia-cap<minor>``; a missing host node gets the driver's mode."""
    node = device_node(root, f"{CAPS_DEVICE_DIR}/nvidia-cap{minor}", major, minor)
    if node.present:
        return node
    return HostDeviceNode(node.path, node.host_path, major, minor, file_mode=mode)


class _CapProblem(Exception):
    """A capability that cannot be used; the message becomes a warning or an error."""


class MigContext:
    """What MIG discovery needs once per enumeration: the ``nvidia-caps`` major and the
    ``mig-minors`` table (read on first use), and the warnings given so far.

    ``root``: the host root whose ``/proc`` is read; ``majors``: character device majors
    by driver name, as ``/proc/devices`` lists them (``devices.txt`` of the kernel);
    ``warnings``: the caller's list, appended to (not copied). The table is
    ``/proc/driver/nvidia-caps/mig-minors`` (``<capability path> <minor>`` lines,
    :func:`ocihook.discovery.procfs.parse_mig_minors`); a table that cannot be read is
    a warning and an empty table, never an exception.
    """

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
        for gi_name in listdir(mig_dir, "MIG capabilities"):
            gi = numbered("gi", gi_name)
            if gi is None:
                continue
            for ci_name in listdir(os.path.join(mig_dir, gi_name), "MIG capabilities"):
                ci = numbered("ci", ci_name)
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
    ctx = MigContext(root, majors, [])
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
