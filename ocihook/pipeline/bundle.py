"""Bundle to plan: the one place that runs host discovery and reads the image to make a
plan for a bundle — *discovery → request → plan* — shared by the spec applier, hook mode
and the commands.

:func:`plan_for_bundle` discovers each requested vendor's host, plans, merges the plans
and logs the decisions; :func:`layout_for_rootfs` and :func:`occupied_links` read the image
(inside its rootfs, never following its links out). Which requests go to the CDI path
instead is :mod:`ocihook.pipeline.cdinames`; the host nodes and mounts a request asks for
beyond GPUs are :mod:`ocihook.pipeline.extras`.
"""

from __future__ import annotations

import os

from ..core.errors import RequestError
from ..plan.edits import ContainerEdits, Plan

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..config.options import Options
    from ..core.hostroot import HostRoot
    from ..oci.bundle import Bundle
    from ..plan.build import ContainerLayout
    from ..request.drm import DrmRequest
    from ..request.nvidia import Request

__all__ = ["is_debian_image", "layout_for_rootfs", "log_plan", "occupied_links", "plan_for_bundle"]


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
    :func:`ocihook.plan.build.merge_plans`.

    Raises:
        DiscoveryError: the host has no usable driver for a requested vendor.
        RequestError: the request cannot be met (``path`` = ``config.json``).
    """
    plans: list[Plan] = []
    try:
        if not request.is_void:
            plans.append(_nvidia_plan(bundle.rootfs, request, root, options))
        for drm_request in drm_requests:
            from ..discovery.drm import discover_vendor
            from ..plan.build import make_drm_plan

            plans.append(make_drm_plan(discover_vendor(drm_request.vendor, root), drm_request))
    except RequestError as e:
        raise e.with_path(bundle.config_path) from None
    plan = plans[0] if plans else Plan("", (), (), ContainerEdits())
    if len(plans) > 1:
        from ..plan.build import merge_plans

        for more in plans[1:]:
            plan = merge_plans(plan, more)
    occupied = occupied_links(bundle.rootfs, plan)
    if occupied:
        from ..plan.build import links_to_mounts

        plan = links_to_mounts(plan, occupied)
    log_plan(request, plan, mode)
    return plan


def _nvidia_plan(rootfs: str, request: Request, root: HostRoot | None, options: Options) -> Plan:
    """The NVIDIA plan for ``request`` (not void) and the image in ``rootfs``, before its
    own files are looked at: replayed from the compiled edits
    (:mod:`ocihook.pipeline.compiled`) when the request is compilable, else made from
    discovery."""
    from ..core.hostroot import HostRoot
    from .compiled import compilable, compiled_plan

    debian = is_debian_image(rootfs)
    if compilable(request):
        return compiled_plan(root or HostRoot(), request, options, debian)
    from ..discovery.nvidia import SUPPORTED_CAPABILITIES, discover_cached
    from ..plan.build import ContainerLayout, make_plan
    from .extras import request_device_nodes, request_mounts

    host = discover_cached(root, capabilities=request.capabilities & SUPPORTED_CAPABILITIES)
    return make_plan(
        host,
        request,
        ContainerLayout.for_image(debian),
        request_device_nodes(host, request),
        request_mounts(host, request),
        cuda_compat=options.cuda_compat,
        check_requirements=options.check_requirements,
        supported=options.supported,
    )


def log_plan(request: Request, plan: Plan, mode: str) -> None:
    """Log the decisions behind ``plan`` at debug level (:mod:`ocihook.core.log`): what was
    asked, which GPUs were chosen, every device node, cgroup rule, mount and link."""
    from ..core import log

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
        log.warning(w)


def occupied_links(rootfs: str, plan: Plan) -> set[str]:
    """The link paths of ``plan`` where the image in ``rootfs`` has a regular file (not
    a link, which is replaced): see :func:`ocihook.plan.build.links_to_mounts`. Paths are
    resolved inside the rootfs; an unreadable or hostile tree counts as free (creating the
    link then fails safely and says why)."""
    import stat

    from ..linux.pathsafe import resolve_in_root

    out: set[str] = set()
    parents: dict[str, str | None] = {}  # each directory resolved once
    for s in plan.edits.symlinks:
        parent, _, name = s.link.rpartition("/")
        if parent not in parents:
            try:
                parents[parent] = resolve_in_root(rootfs, parent or "/")
            except Exception:
                parents[parent] = None
        resolved = parents[parent]
        if resolved is None:
            continue
        try:
            st = os.lstat(os.path.join(resolved, name))
        except Exception:
            continue
        if stat.S_ISREG(st.st_mode):
            out.add(s.link)
    return out


def layout_for_rootfs(rootfs: str) -> ContainerLayout:
    """The :class:`~ocihook.plan.build.ContainerLayout` of the image in ``rootfs``
    (:func:`is_debian_image`)."""
    from ..plan.build import ContainerLayout

    return ContainerLayout.for_image(is_debian_image(rootfs))


def is_debian_image(rootfs: str) -> bool:
    """Choose the container layout by looking at the image: the Debian multiarch layout
    (``/usr/lib/<triplet>``) when ``/etc/debian_version`` resolves inside ``rootfs``
    (libnvidia-container ``src/nvc_container.c``) or when the image's glibc loader lives
    in a multiarch directory (a distroless-like image built from Debian's packages without
    that file: :attr:`ocihook.linux.loaders.Loader.multiarch_dir`); else ``/usr/lib64``
    (RHEL-like, and musl images, whose loader is then told about it:
    :func:`ocihook.appliers.live.libraries.write_musl_paths`): whether the image has the
    Debian layout. An unreadable or hostile tree gets the generic layout. Only file
    types, links and ELF headers are read."""
    from ..linux.pathsafe import resolve_in_root

    try:
        is_debian = os.path.isfile(resolve_in_root(rootfs, "/etc/debian_version"))
    except Exception:  # an unreadable or hostile tree: fall back to the generic layout
        is_debian = False
    if not is_debian:
        from ..linux.loaders import find_loaders

        is_debian = any(loader.multiarch_dir for loader in find_loaders(rootfs))
    return is_debian
