"""Vendor-neutral records for GPUs that are reached through DRM nodes (AMD, Intel).

AMD (ROCm) and Intel (Level Zero, i915/xe) GPUs give a container nothing but device
nodes: each GPU's ``/dev/dri/card<N>`` and ``/dev/dri/renderD<M>`` (plus ``/dev/kfd`` for
ROCm), isolated by the device cgroup; no host library is mounted (the user space comes
from the image). So one record describes a GPU of either vendor — :class:`DrmGpu` — and
one describes what a vendor backend found on a host — :class:`DrmHost`. The backends
(:mod:`ocihook.discovery.amd`, :mod:`ocihook.discovery.intel`) fill them from sysfs and
procfs under a :class:`~ocihook.core.hostroot.HostRoot`; the plan builder
(:func:`ocihook.plan.build.make_drm_plan`) consumes them without knowing the vendor.

This module also holds the small sysfs readers both backends share.
"""

from __future__ import annotations

from ..core.hostroot import HostRoot
from .records import DrmHost

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    pass

__all__ = [
    "VENDORS",
    "discover_vendor",
    "present_vendors",
]

#: The vendor backends, in the order ``ocihook info`` shows them after NVIDIA.
VENDORS = ("amd", "intel")


def discover_vendor(vendor: str, root: HostRoot | None = None) -> DrmHost:
    """Run ``vendor``'s backend (:func:`ocihook.discovery.amd.discover` or
    :func:`ocihook.discovery.intel.discover`), imported only when it runs.

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
