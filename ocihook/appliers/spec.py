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
  (``render``, ``video``), each once;
* ``hooks.createContainer`` — ``ocihook hook create-container``: the soname links, then
  the container's ``/etc/ld.so.cache``, undone together on failure; run from the host's
  interpreter with ``-I``, an explicit ``env`` (nothing from the container's environment
  reaches it, CVE-2025-23266) and a ``timeout``.
"""

from __future__ import annotations

from ..core.errors import ApplyError, OcihookError, SpecError
from ..core.hostroot import HostRoot
from ..core.records import Record
from ..oci.bundle import Bundle, dump_json, load_bundle, write_json_atomic
from ..oci.edit import child_list, child_object, copy_json, set_env
from ..pipeline import _drm_requests_beside_cdi, cdi_device_names, plan_for_bundle
from ..plan import (
    ContainerEdits,
    Hook,
    Plan,
)
from ..request import Request, drm_requests_from_spec, request_from_spec
from ..settings import HOOK_ENV, HOOK_TIMEOUT, Options, hook_command

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


__all__ = ["EditResult", "apply_plan", "edit_bundle", "realize_hooks"]


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
    doc: dict[str, Any] = copy_json(config)
    e = plan.edits
    if e.is_empty():
        return doc
    if e.env:
        process = child_object(doc, "process", path=path, field="process")
        set_env(child_list(process, "env", path=path, field="process.env"), e.env)
    linux = child_object(doc, "linux", path=path, field="linux")
    if e.device_nodes:
        devices = child_list(linux, "devices", path=path, field="linux.devices")
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
        resources = child_object(linux, "resources", path=path, field="linux.resources")
        rules = child_list(resources, "devices", path=path, field="linux.resources.devices")
        for r in e.cgroup_rules:
            rule: dict[str, Any] = {"allow": r.allow, "type": r.type, "access": r.access}
            if r.major is not None:
                rule["major"] = r.major
            if r.minor is not None:
                rule["minor"] = r.minor
            if rule not in rules:
                rules.append(rule)
    if e.mounts:
        mounts = child_list(doc, "mounts", path=path, field="mounts")
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
        spec_hooks = child_object(doc, "hooks", path=path, field="hooks")
        for h in hooks:
            stage = child_list(spec_hooks, h.stage, path=path, field=f"hooks.{h.stage}")
            entry = {"path": h.path, "args": list(h.args), "env": list(h.env)}
            if h.timeout is not None:
                entry["timeout"] = h.timeout
            if entry not in stage:
                stage.append(entry)
    if e.additional_gids:  # CDI's rule: gids already present are not repeated
        process = child_object(doc, "process", path=path, field="process")
        user = child_object(process, "user", path=path, field="process.user")
        gids = child_list(user, "additionalGids", path=path, field="process.user.additionalGids")
        gids.extend(g for g in e.additional_gids if g not in gids)
    return doc


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


def _edit_bundle_cdi(
    bundle: Bundle,
    request: Request,
    names: tuple[str, ...],
    options: Options,
    dry_run: bool,
    drm_plan: Plan | None = None,
    command: Sequence[str] | None = None,
    indent: str | None = "\t",
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
    set_env(doc["process"]["env"], ["NVIDIA_VISIBLE_DEVICES=void"])
    if drm_plan is not None:  # AMD/Intel GPUs asked for beside the CDI devices
        doc = apply_plan(doc, drm_plan, command=command, path=bundle.config_path)
    if dry_run:
        after = dump_json(doc, indent=indent)
        return EditResult(bundle, request, None, bundle.raw, after, False, names)
    try:
        after = write_json_atomic(bundle.config_path, doc, indent=indent)
    except OSError as e:
        raise ApplyError(
            f"cannot replace config.json: {e.strerror}", path=bundle.config_path
        ) from None
    return EditResult(bundle, request, None, bundle.raw, after, True, names)


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
    indent: str | None = "\t",
) -> EditResult:
    """Spec mode: give the container of ``bundle_dir`` what its ``config.json`` asks for.

    Args:
        bundle_dir: the bundle directory.
        root: the host to read (default the real host).
        dry_run: compute the new document but do not write it.
        command: argv prefix of ocihook for the hooks it registers.
        options: the operator's settings (default: the built-in defaults).
        indent: how the new ``config.json`` is written: tab-indented (default, like
            ``runc spec``: ``ocihook edit`` is run by people), or ``None``: compact, by the
            C encoder (the wrapper runtime: only runc reads it).

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
    request = request_from_spec(bundle.config, path=bundle.config_path, policy=options.policy)
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
        return _edit_bundle_cdi(
            bundle, request, cdi_names, options, dry_run, drm_plan, command, indent
        )
    drm_requests = drm_requests_from_spec(bundle.config, path=bundle.config_path)
    if request.is_void and not drm_requests:
        return EditResult(bundle, request, None, bundle.raw, bundle.raw, False)
    plan = plan_for_bundle(bundle, request, root, options, "spec", drm_requests)
    doc = apply_plan(bundle.config, plan, command=command, path=bundle.config_path)
    if dry_run:
        after = dump_json(doc, indent=indent)
        return EditResult(bundle, request, plan, bundle.raw, after, False)
    try:
        after = write_json_atomic(bundle.config_path, doc, indent=indent)
    except OSError as e:
        raise ApplyError(
            f"cannot replace config.json: {e.strerror}", path=bundle.config_path
        ) from None
    return EditResult(bundle, request, plan, bundle.raw, after, True)
