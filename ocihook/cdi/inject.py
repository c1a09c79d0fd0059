"""Inject CDI devices into an OCI runtime spec (``config.json`` as a ``dict``).

Semantics of the reference library: ``pkg/cdi/cache.go`` (``Cache.InjectDevices``: resolve
every name first, collect the edits, apply once), ``pkg/cdi/container-edits.go``
(``ContainerEdits.Append``/``Apply``, ``sortMounts``), ``pkg/cdi/container-edits_unix.go``
(``fillMissingInfo``, ``deviceInfoFromPath``) and ``pkg/cdi/oci.go`` (the OCI shapes),
with the OCI editor operations of opencontainers/runtime-tools ``generate``
(``AddMultipleProcessEnv``, ``RemoveDevice``/``AddDevice``, ``RemoveMount``/``AddMount``,
``AddProcessAdditionalGID``). Field names are the OCI runtime-spec JSON names
(``config.md``, ``config-linux.md``); optional fields are left out when empty, as Go's
``omitempty`` does.

Not implemented: the ``idmap``/``ridmap`` options the newest reference adds to bind mounts
when the container has a user namespace.
"""

from __future__ import annotations

import os
import posixpath
import stat

from ..core.errors import SpecError
from ..oci.edit import child_list, child_object, copy_json, set_env
from .names import CdiError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from .registry import Registry
    from .spec import ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice

__all__ = ["inject_devices", "stale_host_file"]


class _Edits:
    """The concatenation of several :class:`ContainerEdits` (``ContainerEdits.Append``):
    lists are appended in order, a later ``intelRdt`` replaces an earlier one."""

    def __init__(self) -> None:
        self.env: list[str] = []
        self.device_nodes: list[DeviceNode] = []
        self.net_devices: list[NetDevice] = []
        self.hooks: list[Hook] = []
        self.mounts: list[Mount] = []
        self.intel_rdt: IntelRdt | None = None
        self.additional_gids: list[int] = []

    def append(self, edits: ContainerEdits) -> None:
        self.env.extend(edits.env)
        self.device_nodes.extend(edits.device_nodes)
        self.net_devices.extend(edits.net_devices)
        self.hooks.extend(edits.hooks)
        self.mounts.extend(edits.mounts)
        if edits.intel_rdt is not None:
            self.intel_rdt = edits.intel_rdt
        self.additional_gids.extend(edits.additional_gids)


def inject_devices(
    oci_spec: dict[str, Any],
    registry: Registry,
    names: Sequence[str],
    *,
    lstat: Callable[[str], os.stat_result] = os.lstat,
    check_host_files: bool = False,
) -> dict[str, Any]:
    """Return a copy of ``oci_spec`` with the CDI devices ``names`` (qualified names, in
    request order) injected; ``oci_spec`` itself is never modified.

    Every name is resolved first: if any is unknown to ``registry`` a :class:`CdiError`
    (``value`` = the tuple of missing names) lists all of them and nothing is applied; a
    name that two spec files of one priority define (:attr:`Registry.conflicts`) is
    refused naming both files (:func:`_refuse_missing`).
    Then, per requested device, the first time its spec is met the spec's own edits are
    appended, then the device's edits; the whole is applied once, in the order env →
    device nodes (with cgroup rules) → net devices → mounts → hooks → intelRdt →
    additional gids (see :func:`_apply`). ``lstat`` (``os.lstat`` by default) is called on
    each device node's host path. A device node that cannot be completed raises
    :class:`CdiError` (``path`` = the host path). Source: ``pkg/cdi/cache.go``
    ``InjectDevices``.

    With ``check_host_files`` (ocihook's spec mode and wrapper), a spec that no longer
    matches the host is refused before anything is applied (:func:`stale_host_file`): a
    :class:`CdiError` names the spec file and its first device node or bind-mount source
    missing on the host, with how to regenerate it. The reference library does not check
    this: the runtime then fails with ``error mounting ...``.

    Raises:
        CdiError: an unknown name, a stale spec, a device node that cannot be completed.
        SpecError: ``oci_spec``'s ``mounts`` or ``linux.devices`` has an entry that is not
            an object with a string ``destination`` / ``path``.
    """
    resolved = [(name, registry.resolve(name)) for name in names]
    missing = [name for name, entry in resolved if entry is None]
    if missing:
        _refuse_missing(registry, missing)
    edits = _Edits()
    seen_specs: set[tuple[int, str, int]] = set()
    for _name, entry in resolved:
        assert entry is not None
        key = (entry.priority, entry.path, id(entry.spec))
        if key not in seen_specs:
            seen_specs.add(key)
            edits.append(entry.spec.container_edits)
            if check_host_files:
                _refuse_stale(entry.path, entry.spec.container_edits)
        edits.append(entry.device.container_edits)
        if check_host_files:
            _refuse_stale(entry.path, entry.device.container_edits)
    out: dict[str, Any] = copy_json(oci_spec)
    _apply(out, edits, lstat)
    return out


def _refuse_missing(registry: Registry, missing: Sequence[str]) -> None:
    """Raise the one-line :class:`CdiError` for the requested names ``registry`` cannot
    resolve: when one is defined by two spec files of one priority, the message names the
    files (:meth:`~ocihook.cdi.registry.Collision.message`) and then any unknown names;
    else it lists the unknown names.

    Raises:
        CdiError: always; ``value`` = the tuple of ``missing`` names (the message names
            the spec files; ``path`` is left for the caller's ``config.json``).
    """
    clashing = [n for n in missing if n in registry.conflicts]
    unknown = [n for n in missing if n not in registry.conflicts]
    if not clashing:
        raise CdiError(
            "unresolvable CDI devices " + ", ".join(missing),
            value=tuple(missing),
            hint="check the device names against the CDI spec directories",
        )
    collision = registry.conflict_of(clashing[0])
    assert collision is not None
    others = [n for n in clashing if n not in collision.names]
    message = (
        f"requested CDI device{'s' if len(clashing) > 1 else ''} {', '.join(clashing)} "
        f"in conflict: {collision.message()}"
    )
    if others:
        message += f"; {', '.join(others)} in conflict too (ocihook cdi list names the files)"
    if unknown:
        message += f"; unresolvable CDI devices {', '.join(unknown)}"
    raise CdiError(message, value=tuple(missing), hint=collision.hint())


def _is_bind(mount: Mount) -> bool:
    """Whether ``mount`` binds a host path (``source``): type ``bind``/``rbind``, or a
    ``bind``/``rbind`` option, or no type at all (a CDI mount's default)."""
    return mount.type in ("", "bind", "rbind") or any(o in ("bind", "rbind") for o in mount.options)


def stale_host_file(edits: ContainerEdits) -> str | None:
    """The first host file ``edits`` needs that does not exist (links followed, as the
    runtime follows them), else ``None``: a bind mount's source, a hook's program, and a
    device node's host file where the node needs one — it names a ``hostPath``, or lacks
    the type and major the runtime would make it from (a node given in full, without a
    ``hostPath``, the runtime creates without a host file, as ``_complete_node`` and the
    reference's ``fillMissingInfo`` accept). A spec generated before a driver upgrade
    names the old driver's library files (``libcuda.so.535.104.05``): this finds the
    first. A hook that runs ocihook's ``-c`` program with an interpreter
    (:func:`ocihook.config.options.cdi_hook_command`) needs the package too: the directory
    the program names must hold it (:func:`ocihook.config.options.missing_program_module`;
    the interpreter outlives a removed virtual environment's packages)."""
    for node in edits.device_nodes:
        given = node.type != "" and ((node.major or 0) != 0 or node.type == "p")
        if (node.host_path or not given) and not _exists(node.host_path or node.path):
            return node.host_path or node.path
    for mount in edits.mounts:
        if _is_bind(mount) and mount.source.startswith("/") and not _exists(mount.source):
            return mount.source
    for hook in edits.hooks:
        if hook.path.startswith("/") and not _exists(hook.path):
            return hook.path
        if "-c" in hook.args[1:4]:
            from ..config.options import missing_program_module

            missing = missing_program_module(hook.args)
            if missing is not None:
                return missing
    return None


def _exists(path: str) -> bool:
    """Whether ``path`` exists; ``True`` for a name no file can have (a NUL byte, a lone
    surrogate), which the device-node completion and the runtime report in their words."""
    try:
        os.stat(path)
    except ValueError:
        return True
    except OSError:
        return False
    return True


def _refuse_stale(spec_path: str, edits: ContainerEdits) -> None:
    missing = stale_host_file(edits)
    if missing is None:
        return
    shown = missing if missing.isprintable() else ascii(missing)[1:-1]
    raise CdiError(
        f"stale CDI spec: {shown} is not on the host",
        path=spec_path,
        hint="the driver, the GPUs or ocihook's installation changed since the spec was written: "
        "regenerate it "
        "(systemctl start ocihook-cdi-refresh.service, or "
        f"ocihook cdi generate --output {spec_path}); config.json is unchanged",
    )


def _apply(spec: dict[str, Any], edits: _Edits, lstat: Callable[[str], os.stat_result]) -> None:
    """Apply ``edits`` to ``spec`` in place (``ContainerEdits.Apply``)."""
    if edits.env:
        set_env(child_list(child_object(spec, "process"), "env"), edits.env, replace_last=True)
    for node in edits.device_nodes:
        _apply_device_node(spec, node, lstat)
    for dev in edits.net_devices:
        child_object(child_object(spec, "linux"), "netDevices")[dev.host_interface_name] = {
            "name": dev.name
        }
    if edits.mounts:
        mounts = child_list(spec, "mounts")
        for i, old in enumerate(mounts):
            if not isinstance(old, dict) or not isinstance(old.get("destination"), str):
                raise SpecError(
                    "each mount must be an object with a string destination",
                    field=f"mounts[{i}].destination" if isinstance(old, dict) else f"mounts[{i}]",
                    value=old.get("destination") if isinstance(old, dict) else old,
                )
        for mount in edits.mounts:
            for i, old in enumerate(mounts):
                if old.get("destination") == mount.destination:
                    del mounts[i]  # the first match only (runtime-tools RemoveMount)
                    break
            mounts.append(_oci_mount(mount))
        # stable sort by depth (container-edits.go orderedMounts)
        mounts.sort(key=lambda m: posixpath.normpath(m["destination"]).count("/"))
    for hook in edits.hooks:
        child_list(child_object(spec, "hooks"), hook.hook_name).append(_oci_hook(hook))
    if edits.intel_rdt is not None:
        child_object(spec, "linux")["intelRdt"] = _oci_intel_rdt(edits.intel_rdt)
    for gid in edits.additional_gids:
        if gid == 0:
            continue
        gids = child_list(child_object(child_object(spec, "process"), "user"), "additionalGids")
        if gid not in gids:
            gids.append(gid)


_HOST_TYPES = {stat.S_IFBLK: "b", stat.S_IFCHR: "c", stat.S_IFIFO: "p"}


def _complete_node(
    node: DeviceNode, lstat: Callable[[str], os.stat_result]
) -> tuple[str, str, int, int, int | None]:
    """``(host_path, type, major, minor, file_mode)`` of ``node`` with what is missing
    taken from the host (``container-edits_unix.go`` ``fillMissingInfo``).

    A node is minimally specified when it has a type and a major other than 0 (type ``p``
    needs no major): then only an unset file mode is filled and a failing ``lstat`` is
    ignored. Otherwise the host node must exist and be a block, character or FIFO device;
    it fills the type (a declared one must match), the file mode when unset and, unless
    the type is ``p``, major and minor when the major is unset or 0.
    """
    host_path = node.host_path or node.path
    dev_type = node.type
    major = node.major or 0
    minor = node.minor or 0
    file_mode = node.file_mode
    minimal = dev_type != "" and (major != 0 or dev_type == "p")
    try:
        st = lstat(host_path)
    except (OSError, ValueError) as err:
        # ValueError: a NUL byte or a lone surrogate (from a \u escape), which no path
        # holds; Go's os.Lstat fails with EINVAL there
        if minimal:
            return host_path, dev_type, major, minor, file_mode
        reason = err.strerror if isinstance(err, OSError) else "invalid argument"
        reason = reason or str(err)
        shown = host_path if host_path.isprintable() else ascii(host_path)[1:-1]
        raise CdiError(f'failed to stat CDI host device "{shown}": {reason}', path=shown) from None
    host_type = _HOST_TYPES.get(stat.S_IFMT(st.st_mode))
    if host_type is None:
        if minimal:  # deviceInfoFromPath fails, which is ignored here
            return host_path, dev_type, major, minor, file_mode
        raise CdiError(
            f'failed to stat CDI host device "{host_path}": not a device node', path=host_path
        )
    if file_mode is None:
        file_mode = stat.S_IMODE(st.st_mode)
    if minimal:
        return host_path, dev_type, major, minor, file_mode
    if dev_type == "":
        dev_type = host_type
    if dev_type != host_type:
        raise CdiError(
            f'CDI device ("{node.path}", "{host_path}"), host type mismatch '
            f"({dev_type}, {host_type})",
            path=host_path,
            value=dev_type,
        )
    if dev_type != "p" and major == 0:
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
    return host_path, dev_type, major, minor, file_mode


def _apply_device_node(
    spec: dict[str, Any], node: DeviceNode, lstat: Callable[[str], os.stat_result]
) -> None:
    """Add one device node to ``linux.devices`` (and a cgroup rule for b/c) as
    ``ContainerEdits.Apply`` does; uid/gid default to ``process.user``'s when > 0."""
    _host, dev_type, major, minor, file_mode = _complete_node(node, lstat)
    dev: dict[str, Any] = {"path": node.path, "type": dev_type, "major": major, "minor": minor}
    if file_mode is not None:
        dev["fileMode"] = file_mode
    user = (spec.get("process") or {}).get("user") or {}
    for attr, key in (("uid", "uid"), ("gid", "gid")):
        value = getattr(node, attr)
        if value is None and "process" in spec and (user.get(key) or 0) > 0:
            value = user[key]
        if value is not None:
            dev[key] = value
    devices = child_list(child_object(spec, "linux"), "devices")
    for i, old in enumerate(devices):
        if not isinstance(old, dict) or not isinstance(old.get("path"), str):
            raise SpecError(
                "each device must be an object with a string path",
                field=f"linux.devices[{i}]",
                value=old.get("path") if isinstance(old, dict) else old,
            )
    for i, old in enumerate(devices):  # runtime-tools RemoveDevice: first match
        if old.get("path") == node.path:
            del devices[i]
            break
    for i, old in enumerate(devices):  # runtime-tools AddDevice: replace or append
        if old.get("path") == node.path:
            devices[i] = dev
            break
    else:
        devices.append(dev)
    if dev_type in ("b", "c"):
        access = {"": "rwm", "none": ""}.get(node.permissions, node.permissions)
        rule: dict[str, Any] = {"allow": True, "type": dev_type, "major": major, "minor": minor}
        if access:
            rule["access"] = access
        child_list(child_object(child_object(spec, "linux"), "resources"), "devices").append(rule)


def _oci_mount(mount: Mount) -> dict[str, Any]:
    """The OCI ``mounts[]`` entry for a CDI mount (``oci.go`` ``Mount.toOCI``)."""
    out: dict[str, Any] = {"destination": mount.destination}
    if mount.type:
        out["type"] = mount.type
    out["source"] = mount.source
    if mount.options:
        out["options"] = list(mount.options)
    return out


def _oci_hook(hook: Hook) -> dict[str, Any]:
    """The OCI hook entry for a CDI hook (``oci.go`` ``Hook.toOCI``)."""
    out: dict[str, Any] = {"path": hook.path}
    if hook.args:
        out["args"] = list(hook.args)
    if hook.env:
        out["env"] = list(hook.env)
    if hook.timeout is not None:
        out["timeout"] = hook.timeout
    return out


def _oci_intel_rdt(rdt: IntelRdt) -> dict[str, Any]:
    """The OCI ``linux.intelRdt`` object (``oci.go`` ``IntelRdt.toOCI``; ``enableCMT`` and
    ``enableMBM`` are kept for specs older than 1.1.0 that set them)."""
    out: dict[str, Any] = {}
    for attr, key in (
        ("clos_id", "closID"),
        ("l3_cache_schema", "l3CacheSchema"),
        ("mem_bw_schema", "memBwSchema"),
    ):
        if getattr(rdt, attr):
            out[key] = getattr(rdt, attr)
    if rdt.schemata:
        out["schemata"] = list(rdt.schemata)
    for attr, key in (
        ("enable_monitoring", "enableMonitoring"),
        ("enable_cmt", "enableCMT"),
        ("enable_mbm", "enableMBM"),
    ):
        if getattr(rdt, attr):
            out[key] = True
    return out
