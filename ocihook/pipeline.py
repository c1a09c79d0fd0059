"""The pipeline: the one place that runs host discovery and reads the image to make a
plan for a bundle — *discovery → request → plan* — shared by the spec applier, hook mode
and the commands.

:func:`plan_for_bundle` discovers each requested vendor's host, plans, merges the plans
and logs the decisions; :func:`cdi_device_names` says when a request is for the CDI path
instead; :func:`layout_for_rootfs` and :func:`occupied_links` read the image (inside its
rootfs, never following its links out).
"""

from __future__ import annotations

import os

from .core.errors import RequestError, SpecError
from .plan import (
    ContainerEdits,
    ContainerLayout,
    Mount,
    Plan,
    links_to_mounts,
    make_plan,
    merge_plans,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from .config.options import Options
    from .core.hostroot import HostRoot
    from .discovery.nvidia import NvidiaHost
    from .discovery.records import HostDeviceNode
    from .oci.bundle import Bundle
    from .request import DrmRequest, Request

__all__ = [
    "cdi_device_names",
    "layout_for_rootfs",
    "log_plan",
    "occupied_links",
    "plan_for_bundle",
    "request_device_nodes",
    "request_mounts",
]


def cdi_device_names(config: dict[str, Any], request: Request, options: Options) -> tuple[str, ...]:
    """The CDI devices a ``config.json`` requests (qualified names, request order, each
    once), or ``()`` when it is for the legacy path.

    Sources: ``annotations`` keys starting with one of ``options.annotation_prefixes``
    (comma lists of qualified names, CDI ``SPEC.md`` "Annotations"; skipped for an
    unprivileged container when ``accept-cdi-annotations-when-unprivileged = false``);
    when they name no device, the device list of ``NVIDIA_VISIBLE_DEVICES`` (or of the
    request's other source: swarm variables, volume mounts) when it names a CDI device
    (``nvidia.com/gpu=0``) or ``options.mode`` is ``"cdi"``: then every entry that is not
    qualified gets ``options.default_kind`` (``0`` -> ``nvidia.com/gpu=0``, ``all`` ->
    ``nvidia.com/gpu=all``). Annotations *replace* the NVIDIA request, as in the NVIDIA
    Container Toolkit (``internal/config/image`` ``CUDA.VisibleDevices``, ``internal/
    modifier/cdi.go``): a CUDA image's default ``NVIDIA_VISIBLE_DEVICES=all`` beside an
    annotation naming GPU 1 gives GPU 1 only. The AMD/Intel variables' CDI names are added
    in either case. ``"legacy"`` mode returns ``()`` (annotations are not read).

    Raises:
        CdiError: a malformed annotation (``field`` = its key) or device name.
    """
    from .cdi.names import is_qualified_name, parse_annotations, parse_qualified_name
    from .core.errors import CdiError
    from .request import annotations_trusted

    if options.mode == "legacy":
        return ()
    annotations = config.get("annotations")
    from_annotations: tuple[str, ...] = ()
    if annotations is not None and not isinstance(annotations, dict):
        raise SpecError("annotations must be an object", field="annotations")
    if annotations and annotations_trusted(config, options.policy):
        _keys, from_annotations = parse_annotations(annotations, options.annotation_prefixes)
    devices: tuple[str, ...] = ()
    if request.kind == "all":
        devices = ("all",)
    elif request.kind == "list":
        devices = request.devices
    from_env: list[str] = []
    if options.mode == "cdi" or any(is_qualified_name(d) for d in devices):
        for d in devices:
            # an entry with "/" or "=" is meant as a qualified name: checked as written
            name = d if ("=" in d or "/" in d) else f"{options.default_kind}={d}"
            try:
                parse_qualified_name(name)
            except CdiError as err:
                raise CdiError(
                    err.message, field=f"{request.source}[NVIDIA_VISIBLE_DEVICES]", value=d
                ) from None
            from_env.append(name)
    if from_annotations:  # the toolkit: annotations replace NVIDIA_VISIBLE_DEVICES
        from_env = []
    from_env.extend(_drm_cdi_names(config, options))
    names: list[str] = []
    for name in (*from_env, *from_annotations):
        if name not in names:
            names.append(name)
    return tuple(names)


def _has_annotation_request(config: dict[str, Any], options: Options) -> bool:
    """Whether ``config`` has an annotation with one of ``options.annotation_prefixes``
    (outside ``legacy`` mode), so that its CDI devices replace the environment's request."""
    annotations = config.get("annotations")
    if options.mode == "legacy" or not isinstance(annotations, dict):
        return False
    return any(
        isinstance(k, str) and k.startswith(options.annotation_prefixes) for k in annotations
    )


def _drm_cdi_names(config: dict[str, Any], options: Options) -> list[str]:
    """The CDI names in ``AMD_VISIBLE_DEVICES``/``INTEL_VISIBLE_DEVICES``: when one entry is
    a qualified name (or ``options.mode`` is ``"cdi"``), every entry is, the others given
    the vendor's kind (``amd.com/gpu``, ``intel.com/gpu``). None when the policy ignores
    the container's environment (:func:`ocihook.request.env_trusted`)."""
    from .cdi.names import parse_qualified_name
    from .core.errors import CdiError
    from .request import DRM_CDI_KINDS, DRM_VARIABLES, env_from_spec, env_trusted, is_drm_cdi_name

    env = env_from_spec(config)
    names: list[str] = []
    if not env_trusted(config, options.policy):
        return names
    for vendor, variable in DRM_VARIABLES.items():
        items = [i.strip() for i in env.get(variable, "").split(",") if i.strip()]
        if not items or any(i in ("void", "none") for i in items):
            continue
        if options.mode != "cdi" and not any(is_drm_cdi_name(i) for i in items):
            continue
        for item in items:
            name = item if is_drm_cdi_name(item) else f"{DRM_CDI_KINDS[vendor]}={item}"
            try:
                parse_qualified_name(name)
            except CdiError as err:
                raise CdiError(err.message, field=f"process.env[{variable}]", value=item) from None
            names.append(name)
    return names


def plan_for_bundle(
    bundle: Bundle,
    request: Request,
    root: HostRoot | None,
    options: Options,
    mode: str,
    drm_requests: Sequence[DrmRequest] = (),
) -> Plan:
    """Discover the host and make the plan that gives ``bundle``'s container what
    ``request`` (NVIDIA) and ``drm_requests`` (AMD, Intel) ask for (both appliers share
    this): device nodes and mounts the request names, the container's library layout,
    driver links that would land on existing files turned into mounts; the plan is logged
    under ``mode`` (``"spec"``, ``"hook prestart"``, ...). Each vendor's host is
    discovered only when the container asks for its GPUs; the plans are merged with
    :func:`ocihook.plan.merge_plans`.

    Raises:
        DiscoveryError: the host has no usable driver for a requested vendor.
        RequestError: the request cannot be met (``path`` = ``config.json``).
    """
    plans: list[Plan] = []
    try:
        if not request.is_void:
            from .discovery.nvidia import SUPPORTED_CAPABILITIES, discover_cached

            host = discover_cached(root, capabilities=request.capabilities & SUPPORTED_CAPABILITIES)
            plans.append(
                make_plan(
                    host,
                    request,
                    layout_for_rootfs(bundle.rootfs),
                    request_device_nodes(host, request),
                    request_mounts(host, request),
                    cuda_compat=options.cuda_compat,
                    check_requirements=options.check_requirements,
                    supported=options.supported,
                )
            )
        for drm_request in drm_requests:
            from .discovery.drm import discover_vendor
            from .plan import make_drm_plan

            plans.append(make_drm_plan(discover_vendor(drm_request.vendor, root), drm_request))
    except RequestError as e:
        raise e.with_path(bundle.config_path) from None
    plan = plans[0] if plans else Plan("", (), (), ContainerEdits())
    for more in plans[1:]:
        plan = merge_plans(plan, more)
    plan = links_to_mounts(plan, occupied_links(bundle.rootfs, plan))
    log_plan(request, plan, mode)
    return plan


def _drm_requests_beside_cdi(
    config: dict[str, Any], options: Options, path: str
) -> tuple[DrmRequest, ...]:
    """The AMD/Intel requests that stay with host discovery when the container also names
    CDI devices: those of a variable that holds no CDI name (``mode = "cdi"``: none).

    Raises:
        RequestError: a malformed entry in such a variable (``path`` set).
    """
    from .request import (
        DRM_VARIABLES,
        drm_request_from_env,
        env_from_spec,
        env_trusted,
        is_drm_cdi_name,
    )

    if options.mode == "cdi" or not env_trusted(config, options.policy):
        return ()
    env = env_from_spec(config, path=path)
    found = []
    for vendor, variable in DRM_VARIABLES.items():
        if any(is_drm_cdi_name(item) for item in env.get(variable, "").split(",")):
            continue
        try:
            req = drm_request_from_env(vendor, env)
        except RequestError as e:
            raise e.with_path(path) from None
        if req is not None:
            found.append(req)
    return tuple(found)


def log_plan(request: Request, plan: Plan, mode: str) -> None:
    """Log the decisions behind ``plan`` at debug level (:mod:`ocihook.core.log`): what was
    asked, which GPUs were chosen, every device node, cgroup rule, mount and link."""
    from .core import log

    log.debug(
        "request",
        mode=mode,
        kind=request.kind,
        devices=",".join(request.devices) or "-",
        source=request.source,
        capabilities=",".join(sorted(request.capabilities)),
    )
    log.debug(
        "gpus chosen",
        gpus=",".join(f"{i}:{u}:minor{m}" for i, u, m in plan.gpus) or "-",
        capabilities=",".join(plan.capabilities),
    )
    if plan.drm_gpus:
        log.debug("drm gpus chosen", gpus=",".join(f"{v}:{i}:{d}" for v, i, d in plan.drm_gpus))
    e = plan.edits
    for n in e.device_nodes:
        log.debug("device node", path=n.path, major=n.major, minor=n.minor, host=n.host_path)
    for r in e.cgroup_rules:
        log.debug("cgroup rule", type=r.type, major=r.major, minor=r.minor, access=r.access)
    for m in e.mounts:
        log.debug("mount", destination=m.destination, source=m.source, options=",".join(m.options))
    for s in e.symlinks:
        log.debug("link", link=s.link, target=s.target)
    for w in plan.warnings:
        log.info("warning", text=w)


def request_device_nodes(host: NvidiaHost, request: Request) -> tuple[HostDeviceNode, ...]:
    """The device nodes a request asks for beyond GPUs, read from the host: the MIG
    ``config``/``monitor`` capability nodes (privileged containers; checked when the
    request was read), IMEX channels, and the NVSwitch, GDRCopy, GDS and MOFED sets
    (:mod:`ocihook.discovery.devices`).

    Raises:
        DiscoveryError: a node is not the device it should be.
        RequestError: an IMEX channel out of range.
    """
    out: list[HostDeviceNode] = []
    if request.mig_config or request.mig_monitor:
        from .discovery.mig import mig_management_nodes

        wanted = {1} if request.mig_config else set()
        wanted |= {2} if request.mig_monitor else set()
        mgmt = mig_management_nodes(host.root, host.majors)
        out += [n for n in mgmt if n.minor in wanted]
    if request.imex_channels or request.features:
        from .discovery import devices

        if request.imex_channels:
            channels: Any = (
                "all" if "all" in request.imex_channels else [int(c) for c in request.imex_channels]
            )
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
    from .linux.pathsafe import resolve_in_root

    out: list[Mount] = []
    cufile = resolve_in_root(host.root.driver_root, "/etc/cufile.json")
    if os.path.isfile(cufile):
        out.append(Mount(source=cufile, destination="/etc/cufile.json"))
    udev = resolve_in_root(host.root.dev_root, "/run/udev")
    if os.path.isdir(udev):
        out.append(Mount(udev, "/run/udev", ("ro", "nosuid", "nodev", "noexec", "rbind")))
    return tuple(out)


def occupied_links(rootfs: str, plan: Plan) -> set[str]:
    """The link paths of ``plan`` where the image in ``rootfs`` has a regular file (not
    a link, which is replaced): see :func:`ocihook.plan.links_to_mounts`. Paths are
    resolved inside the rootfs; an unreadable or hostile tree counts as free (creating the
    link then fails safely and says why)."""
    import stat

    from .linux.pathsafe import resolve_in_root

    out: set[str] = set()
    for s in plan.edits.symlinks:
        parent, _, name = s.link.rpartition("/")
        try:
            st = os.lstat(os.path.join(resolve_in_root(rootfs, parent or "/"), name))
        except Exception:
            continue
        if stat.S_ISREG(st.st_mode):
            out.add(s.link)
    return out


def layout_for_rootfs(rootfs: str) -> ContainerLayout:
    """Choose the container layout by looking at the image: ``/etc/debian_version``
    resolved inside ``rootfs`` (libnvidia-container ``src/nvc_container.c``)."""
    from .linux.pathsafe import resolve_in_root

    try:
        is_debian = os.path.isfile(resolve_in_root(rootfs, "/etc/debian_version"))
    except Exception:  # an unreadable or hostile tree: fall back to the generic layout
        is_debian = False
    return ContainerLayout.for_image(is_debian)
