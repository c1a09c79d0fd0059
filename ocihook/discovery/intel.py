"""Intel GPUs (i915 and xe drivers, Level Zero): discovery from sysfs under a HostRoot.

As Intel's GPU device plugin and DRA driver (intel-device-plugins-for-kubernetes,
intel-resource-drivers-for-kubernetes) find them:

* the GPUs are the PCI devices of the ``<sys>/class/drm/card<N>`` entries whose
  ``device/vendor`` is ``0x8086`` (``PCI_VENDOR_ID_INTEL``) and that have a
  ``device/drm/`` directory (connector entries such as ``card0-DP-1`` are not GPUs), and
  of the ``renderD<N>`` entries of a device without a card node (a GPU whose display is
  off); each device once. An Intel entry named like a DRM node in no known form is
  reported in the warnings, not dropped silently;
* a GPU's nodes are the entries of ``device/drm/`` except ``controlD*``, as
  ``/dev/dri/<name>`` (checked as :func:`~ocihook.discovery.devices.drm_dir_nodes` does);
* its PCI address is the path component before ``drm`` in the ``class/drm/card<N>`` link
  (``../../devices/pci0000:00/0000:00:02.0/drm/card0``), its driver the name the
  ``device/driver`` link leads to (``i915`` or ``xe``);
* an SR-IOV physical function with virtual functions enabled (``device/sriov_numvfs``
  above 0) is skipped: its VFs are the GPUs to hand out (the device plugin's rule);
* the Level Zero user-mode driver finds GPUs through the ``/dev/dri/by-path/pci-<BDF>-card``
  and ``-render`` links (systemd ``60-drm.rules``), so each GPU carries those links.

The index is the position in PCI bus order (``ZE_ENABLE_PCI_ID_DEVICE_ORDER=1`` order), so
an integrated GPU at ``0000:00:02.0`` is 0. Nothing here writes anything.
"""

from __future__ import annotations

import os

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot, listdir, read_attr
from ..core.vocab import is_sysfs_bus_id as is_bus_id
from .records import DrmGpu, DrmHost

__all__ = ["INTEL_VENDOR_ID", "discover", "is_present"]

#: PCI vendor id of Intel (``include/linux/pci_ids.h``, ``PCI_VENDOR_ID_INTEL``).
INTEL_VENDOR_ID = "0x8086"
_DRIVERS = ("i915", "xe")


def is_present(root: HostRoot) -> bool:
    """Whether an Intel GPU driver (``i915`` or ``xe``) is loaded (``<sys>/module/<name>``)."""
    return any(os.path.isdir(root.sys(f"module/{name}")) for name in _DRIVERS)


def _card_number(name: str) -> int | None:
    rest = name[4:] if name.startswith("card") else ""
    return int(rest) if rest.isascii() and rest.isdigit() else None


def _render_number(name: str) -> int | None:
    rest = name[7:]
    return int(rest) if rest.isascii() and rest.isdigit() and len(rest) <= 9 else None


def _is_intel(entry: str) -> bool:
    """Whether the ``/sys/class/drm`` entry ``entry`` belongs to an Intel PCI device."""
    return read_attr(os.path.join(entry, "device", "vendor")) == INTEL_VENDOR_ID


def _bus_id_of(link_dir: str) -> str | None:
    """The PCI address in the target of a ``class/drm/card<N>`` link, or ``None``."""
    try:
        target = os.readlink(link_dir)
    except OSError:
        target = os.path.realpath(link_dir)
    parts = target.rstrip("/").split("/")
    if len(parts) >= 3 and parts[-2] == "drm" and is_bus_id(parts[-3]):
        return parts[-3]
    return None


def discover(root: HostRoot | None = None) -> DrmHost:
    """Discover the Intel GPUs a container can get (see the module docstring).

    Args:
        root: where to read from (default: the real host).

    Returns:
        A :class:`~ocihook.discovery.records.DrmHost` with ``vendor="intel"``, the GPUs in PCI
        bus order, no shared nodes; skipped entries are explained in ``warnings``.

    Raises:
        DiscoveryError: no i915/xe module is loaded and no Intel GPU is listed; a
            malformed DRM ``dev`` attribute or a host node that is not the device it
            should be ("invalid device node").
    """
    from .devices import drm_dir_nodes

    root = root or HostRoot()
    drm_class = root.sys("class/drm")
    warnings: list[str] = []
    found: list[tuple[str, DrmGpu]] = []
    from .devices import drm_name_unknown

    entries: list[tuple[int, int, str]] = []  # (render-only last, number, name)
    for name in listdir(drm_class, "DRM devices"):
        number = _card_number(name)
        if number is not None:
            entries.append((0, number, name))
        elif name.startswith("renderD") and (n := _render_number(name)) is not None:
            entries.append((1, n, name))
        elif drm_name_unknown(name) and _is_intel(os.path.join(drm_class, name)):
            warnings.append(
                f"{os.path.join(drm_class, name)}: an Intel DRM device not named card<N> or "
                "renderD<N>; skipped"
            )
    seen: set[str] = set()  # the PCI device directories met, each GPU once
    for _, _, name in sorted(entries):
        entry = os.path.join(drm_class, name)
        device = os.path.join(entry, "device")
        if not _is_intel(entry):
            continue
        real = os.path.realpath(device)
        if real in seen:
            continue
        seen.add(real)
        drm_dir = os.path.join(device, "drm")
        if not os.path.isdir(drm_dir):
            continue
        bus_id = _bus_id_of(entry)
        if bus_id is None:
            warnings.append(f"{entry}: no PCI address in its sysfs path; skipped")
            continue
        numvfs = read_attr(os.path.join(device, "sriov_numvfs"))
        # a non-zero decimal count (not int(): sysfs text is not to be trusted blindly)
        if numvfs and numvfs.isascii() and numvfs.isdigit() and numvfs.strip("0"):
            warnings.append(
                f"{bus_id}: SR-IOV physical function with {numvfs} virtual functions "
                "enabled; skipped (its VFs are the GPUs)"
            )
            continue
        nodes = drm_dir_nodes(root, drm_dir, warnings)
        render = nodes.get("render")
        if render is None:
            warnings.append(f"{bus_id}: {name} has no render node; skipped")
            continue
        card = nodes.get("card")
        links = tuple(
            (f"/dev/dri/by-path/pci-{bus_id}-{kind}", f"../{os.path.basename(node.path)}")
            for kind, node in (("card", card), ("render", render))
            if node is not None
        )
        driver_link = os.path.join(device, "driver")
        driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else ""
        gpu = DrmGpu(
            vendor="intel",
            index=-1,
            bus_id=bus_id,
            render=render,
            card=card,
            driver=driver,
            device_id=read_attr(os.path.join(device, "device")),
            links=links,
            sysfs_dir=entry,
        )
        found.append((bus_id, gpu))
    if not found and not is_present(root):
        raise DiscoveryError(
            "no Intel GPU driver (i915 or xe) is loaded",
            path=root.sys("module"),
            hint="load i915 or xe, or check --dev-root",
        )
    found.sort(key=lambda f: f[0])
    gpus = tuple(gpu.replace(index=i) for i, (_, gpu) in enumerate(found))
    for node in (n for g in gpus for n in g.nodes):
        if not node.present:
            warnings.append(f"{node.host_path} does not exist; the container gets a new node")
    return DrmHost(
        vendor="intel",
        root=root,
        gpus=gpus,
        driver_version=None,
        warnings=tuple(warnings),
    )
