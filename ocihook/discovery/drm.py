"""Vendor-neutral records for GPUs that are reached through DRM nodes (AMD, Intel).

AMD (ROCm) and Intel (Level Zero, i915/xe) GPUs give a container nothing but device
nodes: each GPU's ``/dev/dri/card<N>`` and ``/dev/dri/renderD<M>`` (plus ``/dev/kfd`` for
ROCm), isolated by the device cgroup; no host library is mounted (the user space comes
from the image). So one record describes a GPU of either vendor — :class:`DrmGpu` — and
one describes what a vendor backend found on a host — :class:`DrmHost`. The backends
(:mod:`ocihook.discovery.amd`, :mod:`ocihook.discovery.intel`) fill them from sysfs and
procfs under a :class:`~ocihook.core.hostroot.HostRoot`; the plan builder
(:func:`ocihook.plan.make_drm_plan`) consumes them without knowing the vendor.

This module also holds the small sysfs readers both backends share.
"""

from __future__ import annotations

import os

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot
from ..core.records import Record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from typing import Any

    from .gpus import HostDeviceNode

__all__ = [
    "VENDORS",
    "DrmGpu",
    "DrmHost",
    "discover_vendor",
    "is_bus_id",
    "listdir",
    "present_vendors",
    "read_attr",
]

#: The vendor backends, in the order ``ocihook info`` shows them after NVIDIA.
VENDORS = ("amd", "intel")

_HEX = frozenset("0123456789abcdef")


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


def is_bus_id(text: str) -> bool:
    """``DDDD:BB:DD.F`` in lowercase hex, as sysfs names PCI functions
    (``drivers/pci/probe.c``, ``pci_setup_device``: ``%04x:%02x:%02x.%d``)."""
    domain, _, rest = text.partition(":")
    bus, _, rest = rest.partition(":")
    dev, _, fn = rest.partition(".")
    return (
        len(domain) >= 4
        and set(domain) <= _HEX
        and len(bus) == 2
        and set(bus) <= _HEX
        and len(dev) == 2
        and set(dev) <= _HEX
        and fn in ("0", "1", "2", "3", "4", "5", "6", "7")
    )


def listdir(path: str, what: str) -> list[str]:
    """Names in the directory ``path``, sorted; ``[]`` when it does not exist.

    Raises:
        DiscoveryError: it exists but cannot be read (naming it and ``what`` it is).
    """
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise DiscoveryError(f"cannot list {what}: {e.strerror}", path=path) from None


def read_attr(path: str) -> str | None:
    """A sysfs attribute's text without surrounding white space, or ``None`` when the
    file does not exist. At most 64 KiB are read; undecodable bytes are replaced.

    Raises:
        DiscoveryError: it exists but cannot be read.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(1 << 16)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise DiscoveryError(f"cannot read a sysfs attribute: {e.strerror}", path=path) from None
    return data.decode("utf-8", "replace").strip()


def discover_vendor(vendor: str, root: HostRoot | None = None) -> DrmHost:
    """Run ``vendor``'s backend (:func:`ocihook.discovery.amd.discover` or
    :func:`ocihook.discovery.intel.discover`), importing it only now.

    Raises:
        ValueError: ``vendor`` is not one of :data:`VENDORS`.
        DiscoveryError: as the backend raises it.
    """
    if vendor == "amd":
        from . import amd

        return amd.discover(root)
    if vendor == "intel":
        from . import intel

        return intel.discover(root)
    raise ValueError(f"unknown GPU vendor {vendor!r}")


def present_vendors(root: HostRoot) -> tuple[str, ...]:
    """The vendors of :data:`VENDORS` whose kernel driver is loaded on ``root``'s host
    (``<sys>/module/amdgpu``; ``<sys>/module/i915`` or ``xe``)."""
    from . import amd, intel

    found = []
    if amd.is_present(root):
        found.append("amd")
    if intel.is_present(root):
        found.append("intel")
    return tuple(found)
