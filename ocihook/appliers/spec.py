"""Spec mode: apply a plan to a bundle's ``config.json`` before the runtime creates it.

:func:`apply_plan` is pure (a new document from an old one); :func:`edit_bundle` is the
whole job: read the bundle, discover the host, plan, apply, and write ``config.json``
atomically — or leave it byte-identical when anything fails.

What goes into the document (OCI runtime-spec ``config.md`` / ``config-linux.md``):

* ``process.env`` — each ``KEY=value`` of the edits replaces the same key in place or is
  appended;
* ``linux.devices`` — one entry per device node, replacing an entry with the same path;
* ``linux.resources.devices`` — one ``allow`` rule per node (``rw``), appended after the
  runtime's default deny rule so that exactly these nodes become usable;
* ``mounts`` — read-only, nosuid, nodev bind mounts, replacing a mount with the same
  destination;
* ``process.user.additionalGids`` — the host group ids of AMD/Intel device nodes
  (``render``, ``video``) and of NVIDIA nodes that are not world read-writable, each once;
* ``hooks.createContainer`` — ``ocihook hook create-container``: the soname links, then
  the container's ``/etc/ld.so.cache``, undone together on failure; run from the host's
  interpreter with ``-I``, an explicit ``env`` (nothing from the container's environment
  reaches it, CVE-2025-23266) and a ``timeout``.
"""

from __future__ import annotations

import json
import os
import sys

from ..core.errors import ApplyError, OcihookError, RequestError, SpecError
from ..core.hostroot import HostRoot
from ..core.records import Record
from ..oci.bundle import Bundle, dump_json, load_bundle, write_json_atomic
from ..plan import (
    ContainerEdits,
    ContainerLayout,
    Hook,
    Mount,
    Plan,
    links_to_mounts,
    make_plan,
    merge_plans,
)
from ..request import DrmRequest, Request, RequestPolicy, drm_requests_from_spec, request_from_spec

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from ..config import Config
    from ..discovery.gpus import HostDeviceNode
    from ..discovery.nvidia import NvidiaHost

__all__ = [
    "HOOK_ENV",
    "HOOK_PROGRAM",
    "HOOK_TIMEOUT",
    "EditResult",
    "Options",
    "apply_plan",
    "edit_bundle",
    "hook_command",
    "layout_for_rootfs",
    "log_plan",
    "occupied_links",
    "options_from_config",
    "realize_hooks",
    "request_device_nodes",
    "request_mounts",
]

#: Environment given to every hook ocihook registers: nothing from the container.
HOOK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)


#: The program the hook command runs: ``ocihook``'s entry point, given with ``-c`` rather
#: than ``-m ocihook`` because ``-m`` imports runpy and importlib.util (~5 ms per start).
HOOK_PROGRAM = "import sys; from ocihook._main import main; sys.exit(main())"


def hook_command() -> tuple[str, ...]:
    """argv prefix that runs ocihook from this installation: the real interpreter
    (``sys.executable``, never a shim) in isolated mode (``-I``: no ``PYTHON*`` variables,
    no user site, no current directory on ``sys.path``) with :data:`HOOK_PROGRAM`."""
    return (sys.executable, "-I", "-c", HOOK_PROGRAM)


#: Seconds a runtime gives each hook ocihook registers before killing it: a hook stuck
#: on something the image planted must not hang the container start forever.
HOOK_TIMEOUT = 30


def realize_hooks(edits: ContainerEdits, command: Sequence[str]) -> tuple[Hook, ...]:
    """The createContainer hook that carries out ``edits.symlinks``,
    ``edits.ldcache_libraries`` and ``edits.proc_mask`` inside the container — one hook, so
    that a failure in a later step undoes the earlier ones — followed by ``edits.hooks``.
    (``/proc/driver/nvidia`` cannot be masked through ``config.json``: runtimes refuse
    mounts inside ``/proc``.)

    Args:
        edits: the container edits.
        command: argv prefix of ocihook (see :func:`hook_command`).
    """
    hooks: list[Hook] = []
    if edits.symlinks or edits.ldcache_libraries or edits.proc_mask:
        args = [*command, "hook", "create-container"]
        for s in edits.symlinks:
            args += ["--link", f"{s.target}::{s.link}"]
        for lib in edits.ldcache_libraries:
            args += ["--lib", lib]
        if edits.cuda_compat is not None:
            c = edits.cuda_compat
            host = c.host_driver or str(c.host_major)
            args += ["--cuda-compat", "::".join((c.directory, host, c.host_cuda)).rstrip(":")]
        if edits.proc_mask is not None:
            args += ["--mask-proc", edits.proc_mask.host_dir]
            for name in edits.proc_mask.gpu_dirs:
                args += ["--proc-gpu", name]
        hooks.append(Hook("createContainer", command[0], tuple(args), HOOK_ENV, HOOK_TIMEOUT))
    return (*hooks, *edits.hooks)


def _set_env(env: list[str], entries: Sequence[str]) -> None:
    for entry in entries:
        key = entry.partition("=")[0]
        for i, old in enumerate(env):
            if old.partition("=")[0] == key:
                env[i] = entry
                break
        else:
            env.append(entry)


def _obj(doc: dict[str, Any], key: str, *, path: str, field: str) -> dict[str, Any]:
    value = doc.setdefault(key, {})
    if not isinstance(value, dict):
        raise SpecError(f"{field} must be an object", path=path, field=field)
    return value


def _list(doc: dict[str, Any], key: str, *, path: str, field: str) -> list[Any]:
    value = doc.setdefault(key, [])
    if value is None:
        value = doc[key] = []
    if not isinstance(value, list):
        raise SpecError(f"{field} must be a list", path=path, field=field)
    return value


def apply_plan(
    config: dict[str, Any],
    plan: Plan,
    *,
    command: Sequence[str] | None = None,
    path: str = "config.json",
) -> dict[str, Any]:
    """Return a copy of the OCI document ``config`` with ``plan``'s edits applied.

    Args:
        config: the parsed ``config.json`` (not modified).
        plan: what to apply.
        command: argv prefix for the hooks ocihook registers (default
            :func:`hook_command`).
        path: file name for error messages.

    Raises:
        SpecError: a field to edit has the wrong JSON type (``linux.devices`` not a list...).
    """
    doc: dict[str, Any] = json.loads(json.dumps(config))  # a deep copy of a JSON document
    e = plan.edits
    if e.is_empty():
        return doc
    if e.env:
        process = _obj(doc, "process", path=path, field="process")
        _set_env(_list(process, "env", path=path, field="process.env"), e.env)
    linux = _obj(doc, "linux", path=path, field="linux")
    if e.device_nodes:
        devices = _list(linux, "devices", path=path, field="linux.devices")
        for n in e.device_nodes:
            entry = {
                "path": n.path,
                "type": n.type,
                "major": n.major,
                "minor": n.minor,
                "fileMode": n.file_mode,
                "uid": n.uid,
                "gid": n.gid,
            }
            for i, old in enumerate(devices):
                if isinstance(old, dict) and old.get("path") == n.path:
                    devices[i] = entry
                    break
            else:
                devices.append(entry)
    if e.cgroup_rules:
        resources = _obj(linux, "resources", path=path, field="linux.resources")
        rules = _list(resources, "devices", path=path, field="linux.resources.devices")
        for r in e.cgroup_rules:
            rule: dict[str, Any] = {"allow": r.allow, "type": r.type, "access": r.access}
            if r.major is not None:
                rule["major"] = r.major
            if r.minor is not None:
                rule["minor"] = r.minor
            if rule not in rules:
                rules.append(rule)
    if e.mounts:
        mounts = _list(doc, "mounts", path=path, field="mounts")
        for m in e.mounts:
            entry = {
                "destination": m.destination,
                "type": m.type,
                "source": m.source,
                "options": list(m.options),
            }
            for i, old in enumerate(mounts):
                if isinstance(old, dict) and old.get("destination") == m.destination:
                    mounts[i] = entry
                    break
            else:
                mounts.append(entry)
    hooks = realize_hooks(e, command or hook_command())
    if hooks:
        spec_hooks = _obj(doc, "hooks", path=path, field="hooks")
        for h in hooks:
            stage = _list(spec_hooks, h.stage, path=path, field=f"hooks.{h.stage}")
            entry = {"path": h.path, "args": list(h.args), "env": list(h.env)}
            if h.timeout is not None:
                entry["timeout"] = h.timeout
            if entry not in stage:
                stage.append(entry)
    if e.additional_gids:  # CDI's rule: gids already present are not repeated
        process = _obj(doc, "process", path=path, field="process")
        user = _obj(process, "user", path=path, field="process.user")
        gids = _list(user, "additionalGids", path=path, field="process.user.additionalGids")
        gids.extend(g for g in e.additional_gids if g not in gids)
    return doc


class Options(Record):
    """The operator's settings that shape a plan (from :mod:`ocihook.config`).

    Attributes:
        policy: which request sources are honoured (:class:`ocihook.request.RequestPolicy`).
        supported: driver capabilities containers may have (``None``: all).
        check_requirements: check ``NVIDIA_REQUIRE_*`` (off with ``disable-require``).
        cuda_compat: use the image's CUDA forward-compatibility libraries when newer
            (``cuda-compat = "ldconfig"``; off with ``"disabled"``).
        cgroups: add device cgroup rules in hook mode (off with ``no-cgroups``).
        mode: ``"auto"`` (CDI when the request names CDI devices), ``"cdi"`` (every
            requested device is a CDI device) or ``"legacy"`` (never CDI).
        cdi_spec_dirs: CDI spec directories, lowest priority first.
        default_kind: CDI kind given to unqualified device names in CDI requests.
        annotation_prefixes: OCI annotation key prefixes that request CDI devices.
    """

    policy: RequestPolicy = RequestPolicy()
    supported: frozenset[str] | None = None
    check_requirements: bool = True
    cuda_compat: bool = True
    cgroups: bool = True
    mode: str = "auto"
    cdi_spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    default_kind: str = "nvidia.com/gpu"
    annotation_prefixes: tuple[str, ...] = ("cdi.k8s.io/",)


def options_from_config(cfg: Config) -> Options:
    """The :class:`Options` of a loaded configuration."""
    return Options(
        policy=RequestPolicy(
            accept_env_unprivileged=cfg.accept_nvidia_visible_devices_envvar_when_unprivileged,
            accept_volume_mounts=cfg.accept_nvidia_visible_devices_as_volume_mounts,
            swarm_resource=cfg.swarm_envvars,
        ),
        supported=cfg.driver_capabilities,
        check_requirements=not cfg.disable_require,
        cuda_compat=cfg.cuda_compat != "disabled",
        cgroups=not cfg.no_cgroups,
        mode=cfg.mode,
        cdi_spec_dirs=cfg.cdi_spec_dirs,
        default_kind=cfg.default_kind,
        annotation_prefixes=cfg.annotation_prefixes,
    )


def cdi_device_names(config: dict[str, Any], request: Request, options: Options) -> tuple[str, ...]:
    """The CDI devices a ``config.json`` requests (qualified names, request order, each
    once), or ``()`` when it is for the legacy path.

    Sources: ``annotations`` keys starting with one of ``options.annotation_prefixes``
    (comma lists of qualified names, CDI ``SPEC.md`` "Annotations"); when they name no
    device, the device list of ``NVIDIA_VISIBLE_DEVICES`` (or of the request's other
    source: swarm variables, volume mounts) when it names a CDI device
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
    from ..cdi.names import is_qualified_name, parse_annotations, parse_qualified_name
    from ..core.errors import CdiError

    if options.mode == "legacy":
        return ()
    annotations = config.get("annotations")
    from_annotations: tuple[str, ...] = ()
    if annotations is not None and not isinstance(annotations, dict):
        raise SpecError("annotations must be an object", field="annotations")
    if annotations:
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
    the vendor's kind (``amd.com/gpu``, ``intel.com/gpu``)."""
    from ..cdi.names import parse_qualified_name
    from ..core.errors import CdiError
    from ..request import DRM_CDI_KINDS, DRM_VARIABLES, env_from_spec, is_drm_cdi_name

    env = env_from_spec(config)
    names: list[str] = []
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
            from ..discovery.nvidia import SUPPORTED_CAPABILITIES, discover

            host = discover(root, capabilities=request.capabilities & SUPPORTED_CAPABILITIES)
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
            from ..discovery.drm import discover_vendor
            from ..plan import make_drm_plan

            plans.append(make_drm_plan(discover_vendor(drm_request.vendor, root), drm_request))
    except RequestError as e:
        raise e.with_path(bundle.config_path) from None
    plan = plans[0] if plans else Plan("", (), (), ContainerEdits())
    for more in plans[1:]:
        plan = merge_plans(plan, more)
    plan = links_to_mounts(plan, occupied_links(bundle.rootfs, plan))
    log_plan(request, plan, mode)
    return plan


def _check_cdi_target(doc: dict[str, Any], path: str) -> None:
    """Raise :class:`SpecError` (``field`` = the JSON path) when a ``config.json`` field that
    CDI container edits change has the wrong type (runtime-spec ``config.md``,
    ``config-linux.md``); ``null`` counts as absent."""

    def want(value: object, kind: type, field: str, *, optional: bool = True) -> None:
        if (value is None and optional) or isinstance(value, kind):
            return
        what = "an object" if kind is dict else "an array"
        raise SpecError(f"{field} must be {what}", path=path, field=field)

    def items(value: object, kind: type, field: str) -> None:
        want(value, list, field)
        for i, item in enumerate(value if isinstance(value, list) else ()):
            want(item, kind, f"{field}[{i}]", optional=False)

    process = doc.get("process")
    want(process, dict, "process")
    if isinstance(process, dict):
        items(process.get("env"), str, "process.env")
        user = process.get("user")
        want(user, dict, "process.user")
        if isinstance(user, dict):
            for key in ("uid", "gid"):
                value = user.get(key)
                if value is not None and (type(value) is not int or value < 0):
                    raise SpecError(
                        f"process.user.{key} must be a non-negative integer",
                        path=path,
                        field=f"process.user.{key}",
                        value=value,
                    )
            items(user.get("additionalGids"), int, "process.user.additionalGids")
    linux = doc.get("linux")
    want(linux, dict, "linux")
    if isinstance(linux, dict):
        items(linux.get("devices"), dict, "linux.devices")
        resources = linux.get("resources")
        want(resources, dict, "linux.resources")
        if isinstance(resources, dict):
            items(resources.get("devices"), dict, "linux.resources.devices")
        want(linux.get("intelRdt"), dict, "linux.intelRdt")
        want(linux.get("netDevices"), dict, "linux.netDevices")
    items(doc.get("mounts"), dict, "mounts")
    hooks = doc.get("hooks")
    want(hooks, dict, "hooks")
    if isinstance(hooks, dict):
        for stage, entries in hooks.items():
            items(entries, dict, f"hooks.{stage}")


def _drm_requests_beside_cdi(
    config: dict[str, Any], options: Options, path: str
) -> tuple[DrmRequest, ...]:
    """The AMD/Intel requests that stay with host discovery when the container also names
    CDI devices: those of a variable that holds no CDI name (``mode = "cdi"``: none).

    Raises:
        RequestError: a malformed entry in such a variable (``path`` set).
    """
    from ..request import DRM_VARIABLES, drm_request_from_env, env_from_spec, is_drm_cdi_name

    if options.mode == "cdi":
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


def _edit_bundle_cdi(
    bundle: Bundle,
    request: Request,
    names: tuple[str, ...],
    options: Options,
    dry_run: bool,
    drm_plan: Plan | None = None,
    command: Sequence[str] | None = None,
) -> EditResult:
    from ..cdi.inject import inject_devices
    from ..cdi.registry import Registry
    from ..core.errors import CdiError

    _check_cdi_target(bundle.config, bundle.config_path)
    registry = Registry.load(options.cdi_spec_dirs)
    try:
        doc = inject_devices(bundle.config, registry, names)
    except CdiError as e:
        if registry.errors:
            broken = ", ".join(sorted(registry.errors))
            e.hint = f"{e.hint or ''}; CDI spec files that failed to load: {broken}".lstrip("; ")
        raise e.with_path(bundle.config_path) from None
    # The devices are in; a legacy hook (hook mode registered too) must not act again.
    if not isinstance(doc.get("process"), dict):
        doc["process"] = {}
    if not isinstance(doc["process"].get("env"), list):
        doc["process"]["env"] = []
    _set_env(doc["process"]["env"], ["NVIDIA_VISIBLE_DEVICES=void"])
    if drm_plan is not None:  # AMD/Intel GPUs asked for beside the CDI devices
        doc = apply_plan(doc, drm_plan, command=command, path=bundle.config_path)
    if dry_run:
        return EditResult(bundle, request, None, bundle.raw, dump_json(doc), False, names)
    try:
        after = write_json_atomic(bundle.config_path, doc)
    except OSError as e:
        raise ApplyError(
            f"cannot replace config.json: {e.strerror}", path=bundle.config_path
        ) from None
    return EditResult(bundle, request, None, bundle.raw, after, True, names)


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
        from ..discovery.gpus import mig_management_nodes

        wanted = {1} if request.mig_config else set()
        wanted |= {2} if request.mig_monitor else set()
        mgmt = mig_management_nodes(host.root, host.majors)
        out += [n for n in mgmt if n.minor in wanted]
    if request.imex_channels or request.features:
        from ..discovery import devices

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
    from ..linux.pathsafe import resolve_in_root

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

    from ..linux.pathsafe import resolve_in_root

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
    from ..linux.pathsafe import resolve_in_root

    try:
        is_debian = os.path.isfile(resolve_in_root(rootfs, "/etc/debian_version"))
    except Exception:  # an unreadable or hostile tree: fall back to the generic layout
        is_debian = False
    return ContainerLayout.for_image(is_debian)


class EditResult(Record):
    """Outcome of :func:`edit_bundle`.

    Attributes:
        bundle: the bundle as read.
        request: what the container asked for.
        plan: the plan (``None`` for a void request).
        before: ``config.json`` bytes before.
        after: ``config.json`` bytes after (equal to ``before`` when nothing changed).
        written: whether the file was replaced.
        cdi_devices: the CDI devices injected from the CDI registry (then ``plan`` is
            ``None``), in request order; ``()`` for the legacy path.
    """

    bundle: Bundle
    request: Request
    plan: Plan | None
    before: bytes
    after: bytes
    written: bool
    cdi_devices: tuple[str, ...] = ()


def edit_bundle(
    bundle_dir: str,
    root: HostRoot | None = None,
    *,
    dry_run: bool = False,
    command: Sequence[str] | None = None,
    options: Options | None = None,
) -> EditResult:
    """Spec mode: give the container of ``bundle_dir`` what its ``config.json`` asks for.

    Args:
        bundle_dir: the bundle directory.
        root: the host to read (default the real host).
        dry_run: compute the new document but do not write it.
        command: argv prefix of ocihook for the hooks it registers.
        options: the operator's settings (default: the built-in defaults).

    Returns:
        An :class:`EditResult`. A void request changes nothing (``written`` False).

    Raises:
        SpecError: missing or malformed ``config.json``.
        RequestError: the request cannot be met (unknown GPU, unknown capability, an
            ``AMD_VISIBLE_DEVICES``/``INTEL_VISIBLE_DEVICES`` entry that is malformed or
            names no GPU of the host).
        DiscoveryError: the host has no usable driver (for AMD: no KFD).
        CdiError: a CDI request (see :func:`cdi_device_names`) is malformed or names a
            device no spec in ``options.cdi_spec_dirs`` defines; the devices are injected
            from the CDI registry with :func:`ocihook.cdi.inject_devices` instead of host
            discovery, and ``NVIDIA_VISIBLE_DEVICES`` is set to ``void``. An AMD/Intel
            variable holding no CDI name is still planned from the host and applied too.
        ApplyError: ``config.json`` could not be replaced (it is left as it was).
    """
    options = options or Options()
    bundle = load_bundle(bundle_dir)
    try:
        request = request_from_spec(bundle.config, path=bundle.config_path, policy=options.policy)
    except RequestError:
        # annotations replace the environment's request (the toolkit does not read it then)
        if not _has_annotation_request(bundle.config, options):
            raise
        request = Request("void", source="annotations")
    try:
        cdi_names = cdi_device_names(bundle.config, request, options)
    except OcihookError as e:
        raise e.with_path(bundle.config_path) from None
    if cdi_names:
        beside = _drm_requests_beside_cdi(bundle.config, options, bundle.config_path)
        drm_plan = None
        if beside:
            void = Request("void", source=request.source)
            drm_plan = plan_for_bundle(bundle, void, root, options, "spec", beside)
        return _edit_bundle_cdi(bundle, request, cdi_names, options, dry_run, drm_plan, command)
    drm_requests = drm_requests_from_spec(bundle.config, path=bundle.config_path)
    if request.is_void and not drm_requests:
        return EditResult(bundle, request, None, bundle.raw, bundle.raw, False)
    plan = plan_for_bundle(bundle, request, root, options, "spec", drm_requests)
    doc = apply_plan(bundle.config, plan, command=command, path=bundle.config_path)
    if dry_run:
        after = dump_json(doc)
        return EditResult(bundle, request, plan, bundle.raw, after, False)
    try:
        after = write_json_atomic(bundle.config_path, doc)
    except OSError as e:
        raise ApplyError(
            f"cannot replace config.json: {e.strerror}", path=bundle.config_path
        ) from None
    return EditResult(bundle, request, plan, bundle.raw, after, True)
