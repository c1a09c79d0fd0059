"""Request-driven discovery: the host device nodes and mounts a request asks for beyond
GPUs and driver files (MIG management, IMEX channels, the feature-gated sets, GDS), read
from the host only when asked for.
"""

from __future__ import annotations

import os

from ..plan.edits import Mount

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from ..discovery.nvidia import NvidiaHost
    from ..discovery.records import HostDeviceNode
    from ..request.nvidia import Request

__all__ = ["request_device_nodes", "request_mounts"]


def request_device_nodes(host: NvidiaHost, request: Request) -> tuple[HostDeviceNode, ...]:
    """The device nodes a request asks for beyond GPUs, read from the host: the MIG
    ``config``/``monitor`` capability nodes (privileged containers; checked when the
    request was read), IMEX channels, and the NVSwitch, GDRCopy, GDS and MOFED sets
    (:mod:`ocihook.discovery.devices`).

    Raises:
        DiscoveryError: a node is not the device it should be, or IMEX channels on a
            driver without them.
    """
    out: list[HostDeviceNode] = []
    if request.mig_config or request.mig_monitor:
        from ..discovery.mig import mig_management_nodes

        wanted = {1} if request.mig_config else set()
        wanted |= {2} if request.mig_monitor else set()
        mgmt = mig_management_nodes(host.root, host.majors)
        out += [n for n in mgmt if n.minor in wanted]
    if request.imex_channels or request.features:
        from ..discovery import devices

        if request.imex_channels:
            channels = request.imex_channel_numbers
            out += devices.imex_channel_nodes(host.root, host.majors, channels)
        if "nvswitch" in request.features:
            out += devices.nvswitch_nodes(host.root, host.majors)
        if "gdrcopy" in request.features:
            out += devices.gdrcopy_nodes(host.root, host.majors)
        if "gds" in request.features:
            out += devices.gds_nodes(host.root, host.majors)
        if "mofed" in request.features:
            out += devices.mofed_nodes(host.root)
    return tuple(out)


def request_mounts(host: NvidiaHost, request: Request) -> tuple[Mount, ...]:
    """Mounts a request asks for beyond driver files: with ``NVIDIA_GDS=enabled``, the
    driver root's ``/etc/cufile.json`` (read-only) and the dev root's ``/run/udev``
    (read-only, nosuid, nodev, noexec), when they exist (NVIDIA Container Toolkit
    ``internal/discover/gds.go``)."""
    if "gds" not in request.features:
        return ()
    from ..linux.pathsafe import resolve_in_root

    out: list[Mount] = []
    cufile = resolve_in_root(host.root.driver_root, "/etc/cufile.json")
    if os.path.isfile(cufile):
        out.append(Mount(source=cufile, destination="/etc/cufile.json"))
    udev = resolve_in_root(host.root.dev_root, "/run/udev")
    if os.path.isdir(udev):
        out.append(Mount(udev, "/run/udev", ("ro", "nosuid", "nodev", "noexec", "rbind")))
    return tuple(out)
