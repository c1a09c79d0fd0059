"""Spec mode: apply a plan to a bundle's ``config.json`` before the runtime creates it.

:func:`apply_plan` is pure (a new document from an old one); :func:`edit_bundle` is the
whole job: read the bundle, discover the host, plan, apply, and write ``config.json``
atomically — or leave it byte-identical when anything fails.

What goes into the document (OCI runtime-spec ``config.md`` / ``config-linux.md``):

* ``process.env`` — each ``KEY=value`` of the edits replaces the same key in place or is
  appended;
* ``linux.devices`` — one entry per device node, replacing an entry with the same path;
  for a rootless container (``linux.namespaces`` has a ``user`` namespace, or ocihook itself
  runs in a user namespace that is not the initial one, as under rootless podman) a
  ``nosuid,noexec`` bind mount of the host node instead — what podman does for
  ``--device`` when rootless: ``mknod`` is refused in a user namespace, and the runtime's
  own fallback binds the *container* path of the host (``/dev/nvidia0``), not the node
  under the dev root;
* ``linux.resources.devices`` — one ``allow`` rule per node (``rw``), appended after the
  runtime's default deny rule so that exactly these nodes become usable;
* ``mounts`` — read-only, nosuid, nodev bind mounts, replacing a mount with the same
  destination;
* ``process.user.additionalGids`` — the host group ids of AMD/Intel device nodes
  (``render``, ``video``) and of NVIDIA nodes that are not world read-writable, each once;
* the soname links and the container's ``/etc/ld.so.cache`` — made by :func:`edit_bundle`
  itself in the root file system, through in-root descriptor operations, before the runtime
  runs (no second process), with each library's soname and ABI read from its host
  file; where that could differ from doing it in the container (a user namespace, a mount
  over a path written: :func:`rootfs_edit_blocker`) or fails, left to the hook below, and
  the debug log says why;
* ``hooks.createContainer`` — ``ocihook hook create-container``: what the edit did not
  make (the links and the cache, see above) and the ``/proc/driver/nvidia`` mask (only
  where the host has that directory), undone together on failure; run from the
  host's interpreter with ``-I``, an explicit ``env`` (nothing from the container's
  environment reaches it, CVE-2025-23266) and a ``timeout``.

Before ``config.json`` is written, :func:`create_mount_targets` makes the bind-mount
targets in the container's root file system itself, through the in-root descriptor
operations of :mod:`ocihook.linux.pathsafe` (links in the image resolved inside the root,
a link *at* a target refused): the runtime then finds them and makes nothing. runc 1.1.5
makes missing targets with a check-then-create sequence that an image flipping a directory
into a symbolic link can race; a target that exists leaves it nothing to
race. Targets under ``/dev``, ``/proc`` and ``/sys`` are left to the runtime, which mounts
fresh file systems there first. The same goes for CDI devices: the targets of the bind
mounts their specs' ``containerEdits`` add are made too. If anything fails, what was made
is removed again and ``config.json`` is left as it was.
"""

from __future__ import annotations

import os
import stat

from ..config.options import HOOK_ENV, HOOK_TIMEOUT, Options, hook_command
from ..core.errors import ApplyError, OcihookError, RequestError, SpecError
from ..core.hostroot import HostRoot
from ..core.records import Record
from ..linux.mounttargets import mount_targets_in_root
from ..linux.pathsafe import close_quietly, open_root, remove_in_root
from ..oci.bundle import Bundle, dump_json, load_bundle, write_json_atomic
from ..oci.edit import add_device_rules, child_list, child_object, copy_json, set_env
from ..pipeline.bundle import plan_for_bundle
from ..pipeline.cdinames import cdi_device_names, drm_requests_beside_cdi, has_annotation_request
from ..plan.edits import ContainerEdits, Hook, Mount, Plan, ProcMask
from ..request.drm import drm_requests_from_spec
from ..request.nvidia import Request, request_from_spec
from ..request.policy import ignored_by_policy, policy_note

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from .live.hooks import RootfsChanges


__all__ = [
    "EditResult",
    "RootfsEdit",
    "apply_plan",
    "create_mount_targets",
    "edit_bundle",
    "has_hooks",
    "realize_hooks",
    "remove_mount_targets",
    "rootfs_edit_blocker",
    "rootless_spec",
    "shown_paths",
]

#: Container directories the runtime mounts a new file system on before the bind mounts
#: (runc's default mounts): a target made in the image below them would be hidden.
_RUNTIME_MOUNTED = ("/dev", "/proc", "/sys")


def _remove_created(root_fd: int, created: Sequence[str]) -> list[str]:
    """Remove the paths of ``created`` (made by this edit) in reverse order; returns those
    that could not be removed (busy, or the removal failed), for the error to name."""
    left = []
    for path in reversed(created):
        try:
            remove_in_root(root_fd, path)
        except ApplyError:
            left.append(path)
    return left


def remove_mount_targets(rootfs: str, created: Sequence[str]) -> list[str]:
    """Remove the bind-mount targets ``created`` (``EditResult.targets``: container paths
    made by an edit, in the order made) from the root file system ``rootfs``, in reverse
    order, inside the root. Returns those that could not be removed (busy, no longer empty,
    the rootfs gone), for a message to name."""
    try:
        root_fd = open_root(rootfs)
    except ApplyError:
        return list(created)
    try:
        return _remove_created(root_fd, created)
    finally:
        close_quietly(root_fd)


def shown_paths(paths: Sequence[str]) -> str:
    """``paths`` for a message: the first five, then how many more."""
    more = f" and {len(paths) - 5} more" if len(paths) > 5 else ""
    return ", ".join(paths[:5]) + more


def _undo_targets(rootfs: str, created: Sequence[str], err: ApplyError) -> ApplyError:
    """Remove the mount targets ``created`` in ``rootfs`` after ``err``; what cannot be
    removed is named in ``err``'s hint (never left silently). Returns ``err``."""
    left = remove_mount_targets(rootfs, created)
    if left:
        note = f"these empty mount targets it made are left in the rootfs: {shown_paths(left)}"
        err.hint = f"{err.hint}; {note}" if err.hint else note
    return err


def create_mount_targets(rootfs: str, mounts: Sequence[Mount]) -> tuple[str, ...]:
    """Make the targets of the bind mounts ``mounts`` in the root file system ``rootfs``
    (a host path), so that the runtime need not: an empty regular file for a file (or
    socket) source, a directory for a directory source; missing parents are made too.

    Lookups go through :func:`ocihook.linux.mounttargets.mount_targets_in_root` (each parent
    directory resolved once, as :func:`~ocihook.linux.pathsafe.makedirs_in_root` does):
    every link of the image resolves inside ``rootfs``, never on the host; an existing
    target of the right kind is used as it is. Targets under :data:`_RUNTIME_MOUNTED`
    are skipped. A missing ``rootfs`` makes nothing (the runtime reports it); a target
    path that cannot name a file is refused before anything is made.

    Returns:
        The container paths made, in the order made (the caller may remove them again, in
        reverse, with :func:`ocihook.linux.pathsafe.remove_in_root`).

    Raises:
        ApplyError: a target is a symbolic link or of the wrong kind, or making one failed
            (EROFS, ENOSPC, ENOTDIR...); what was made is removed first, and what
            cannot be removed is named in its hint.
    """
    if not os.path.isdir(rootfs):
        return ()
    targets: list[tuple[str, bool]] = []
    for m in mounts:
        if m.type != "bind" and "bind" not in m.options and "rbind" not in m.options:
            continue
        dest = _container_path(m.destination)
        if _runtime_mounted(dest):
            continue
        try:
            nameable = b"\0" not in os.fsencode(dest)
        except UnicodeEncodeError:  # a lone surrogate
            nameable = False
        if not nameable:  # no file has that name
            raise ApplyError(
                "cannot make a mount target: the path cannot name a file", path=ascii(dest)
            )
        try:
            is_dir = stat.S_ISDIR(os.stat(m.source).st_mode)
        except OSError:
            is_dir = False  # a missing source: the runtime names it
        targets.append((dest, is_dir))
    root_fd = open_root(rootfs)
    created: list[str] = []
    try:
        mount_targets_in_root(root_fd, targets, created=created)
    except ApplyError as err:
        failed: ApplyError | None = err
    else:
        failed = None
    finally:
        close_quietly(root_fd)
    if failed is not None:
        raise _undo_targets(rootfs, created, failed)
    return tuple(created)


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
        flags = dict(edits.ldcache_flags)
        for lib in edits.ldcache_libraries:
            args += ["--lib", f"{lib}::{flags[lib]:#06x}" if lib in flags else lib]
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


def _first_index(entries: list[Any], field: str) -> dict[str, int]:
    """The index of the first object of ``entries`` whose ``field`` is each string."""
    at: dict[str, int] = {}
    for i, old in enumerate(entries):
        if isinstance(old, dict) and isinstance(key := old.get(field), str):
            at.setdefault(key, i)
    return at


def _replace_or_append(entries: list[Any], at: dict[str, int], key: str, new: Any) -> None:
    """Put ``new`` in place of the first entry whose field is ``key`` (``at``, from
    :func:`_first_index`, kept up to date), or append it."""
    i = at.get(key)
    if i is None:
        at[key] = len(entries)
        entries.append(new)
    else:
        entries[i] = new


def apply_plan(
    config: dict[str, Any],
    plan: Plan,
    *,
    command: Sequence[str] | None = None,
    path: str = "config.json",
    bind_nodes: bool | None = None,
) -> dict[str, Any]:
    """Return a copy of the OCI document ``config`` with ``plan``'s edits applied.

    Args:
        config: the parsed ``config.json`` (not modified).
        plan: what to apply.
        command: argv prefix for the hooks ocihook registers (default
            :func:`hook_command`).
        path: file name for error messages.
        bind_nodes: give the device nodes as bind mounts of the host nodes rather than
            ``linux.devices`` entries (rootless); ``None``: :func:`rootless_spec` decides.

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
    if bind_nodes is None:
        bind_nodes = rootless_spec(doc)
    node_mounts: list[dict[str, Any]] = []
    if e.device_nodes and bind_nodes:
        node_mounts = [
            {
                "destination": n.path,
                "type": "bind",
                "source": n.host_path,
                "options": ["bind", "nosuid", "noexec"],
            }
            for n in e.device_nodes
        ]
    elif e.device_nodes:
        devices = child_list(linux, "devices", path=path, field="linux.devices")
        at = _first_index(devices, "path")
        for n in e.device_nodes:
            entry: dict[str, Any] = {
                "path": n.path,
                "type": n.type,
                "major": n.major,
                "minor": n.minor,
                "fileMode": n.file_mode,
                "uid": n.uid,
                "gid": n.gid,
            }
            _replace_or_append(devices, at, n.path, entry)
    if e.cgroup_rules:
        add_device_rules(doc, e.cgroup_rules, path=path)
    if e.mounts or node_mounts:
        mounts = child_list(doc, "mounts", path=path, field="mounts")
        wanted: list[dict[str, Any]] = node_mounts + [
            {
                "destination": m.destination,
                "type": m.type,
                "source": m.source,
                "options": list(m.options),
            }
            for m in e.mounts
        ]
        at = _first_index(mounts, "destination")
        for mount in wanted:
            _replace_or_append(mounts, at, mount["destination"], mount)
    if command is None and (e.symlinks or e.ldcache_libraries or e.proc_mask is not None):
        command = hook_command()  # reads sys.path: only when a hook needs it
    hooks = realize_hooks(e, command or ())
    if hooks:
        spec_hooks = child_object(doc, "hooks", path=path, field="hooks")
        for h in hooks:
            stage = child_list(spec_hooks, h.hook_name, path=path, field=f"hooks.{h.hook_name}")
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


def rootless_spec(doc: dict[str, Any], *, uid_map: str = "/proc/self/uid_map") -> bool:
    """Whether the container of ``doc`` is rootless: ``linux.namespaces`` lists a ``user``
    namespace (``runc spec --rootless``, ``--userns``), or ocihook runs in a user
    namespace other than the initial one (``uid_map`` not ``0 0 4294967295``: a rootless
    engine's, shared with its containers). An unreadable map counts as the initial one."""
    linux = doc.get("linux")
    namespaces = linux.get("namespaces") if isinstance(linux, dict) else None
    if isinstance(namespaces, list) and any(
        isinstance(n, dict) and n.get("type") == "user" for n in namespaces
    ):
        return True
    try:
        with open(uid_map) as f:
            lines = [line.split() for line in f if line.strip()]
    except OSError:
        return False
    return lines != [["0", "0", "4294967295"]]


def _cdi_mounts(doc: dict[str, Any]) -> tuple[Mount, ...]:
    """The mounts a CDI edit added to ``doc`` (``ocihook.edits``, written by
    :func:`ocihook.appliers.editrecord.record_edit` for this very edit: the CDI specs'
    ``containerEdits.mounts`` as OCI ``mounts[]`` entries, and those of AMD/Intel GPUs
    planned beside them), for :func:`create_mount_targets`, which makes the targets of
    the bind mounts among them (``type`` ``bind``, or a ``bind``/``rbind`` option) as it
    does for the legacy path. Entries that are not objects with string ``source`` and
    ``destination`` are skipped (the runtime judges them)."""
    from .editrecord import read_record

    record = read_record(doc)
    added = record.get("added") if isinstance(record, dict) else None
    entries = added.get("mounts") if isinstance(added, dict) else None
    out: list[Mount] = []
    for m in entries if isinstance(entries, list) else ():
        if not isinstance(m, dict):
            continue
        source, destination = m.get("source"), m.get("destination")
        if not isinstance(source, str) or not isinstance(destination, str):
            continue
        options = m.get("options")
        kind = m.get("type")
        out.append(
            Mount(
                source,
                destination,
                tuple(o for o in options if isinstance(o, str))
                if isinstance(options, list)
                else (),
                kind if isinstance(kind, str) else "",
            )
        )
    return tuple(out)


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
    names: tuple[str, ...],
    options: Options,
    drm_plan: Plan | None = None,
    command: Sequence[str] | None = None,
) -> dict[str, Any]:
    from ..cdi.inject import inject_devices
    from ..cdi.registry import Registry
    from ..core.errors import CdiError

    _check_cdi_target(bundle.config, bundle.config_path)
    from ..linux.cachestore import store_dir

    # YAML specs parsed once per file, kept in the store (no PyYAML per start)
    registry = Registry.load(options.cdi_spec_dirs, cache_dir=store_dir())
    try:
        doc = inject_devices(bundle.config, registry, names, check_host_files=True)
    except CdiError as e:
        if registry.errors:
            broken = ", ".join(sorted(registry.errors))
            e.hint = f"{e.hint or ''}; CDI spec files that failed to load: {broken}".lstrip("; ")
        raise e.with_path(bundle.config_path) from None
    except SpecError as e:
        raise e.with_path(bundle.config_path) from None
    # The devices are in; a legacy hook (hook mode registered too) must not act again.
    if not isinstance(doc.get("process"), dict):
        doc["process"] = {}
    if not isinstance(doc["process"].get("env"), list):
        doc["process"]["env"] = []
    set_env(doc["process"]["env"], ["NVIDIA_VISIBLE_DEVICES=void"])
    # so are AMD's and Intel's variables that named CDI devices (hook mode refuses those)
    from ..request.drm import drm_cdi_entries

    voided = sorted({v for v, _ in drm_cdi_entries(bundle.config, policy=options.policy)})
    set_env(doc["process"]["env"], [f"{v}=void" for v in voided])
    if drm_plan is not None:  # AMD/Intel GPUs asked for beside the CDI devices
        doc = apply_plan(doc, drm_plan, command=command, path=bundle.config_path)
    return doc


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
        ignored: the requests the unprivileged policy ignored
            (:func:`ocihook.request.policy.ignored_by_policy`; message:
            :func:`ocihook.request.policy_note`).
        in_rootfs: the soname links and the container's ``ld.so.cache`` were made in the
            root file system by the edit itself (:func:`rootfs_edit_blocker` found nothing
            in the way), so no createContainer hook carries them; for a dry run: they
            would be.
        caller_mask: with ``mask_by_caller``, the ``/proc/driver/nvidia`` mask the caller
            of the runtime's ``create`` is to mount in the created container
            (:func:`ocihook.appliers.live.procmask.mask_created_container`) because no hook
            carries it; ``None`` otherwise.
        rootfs_edit: with ``defer_rootfs``, the soname links and ``ld.so.cache`` entries
            handed to the caller (``in_rootfs`` is then True): made already (its
            ``changes`` set and open, for the caller to close or roll back) or for the
            caller to make (:meth:`RootfsEdit.run`) before the container starts; ``None``
            without ``defer_rootfs`` (the edit keeps what it made) or when they are left
            to the hook.
        targets: the bind-mount targets the edit made in the rootfs (container paths, in
            the order made: :func:`remove_mount_targets` takes them out again).
    """

    bundle: Bundle
    request: Request
    plan: Plan | None
    before: bytes
    after: bytes
    written: bool
    cdi_devices: tuple[str, ...] = ()
    ignored: tuple[str, ...] = ()
    in_rootfs: bool = False
    caller_mask: ProcMask | None = None
    rootfs_edit: RootfsEdit | None = None
    targets: tuple[str, ...] = ()


def _runtime_mounted(path: str) -> bool:
    """Whether container ``path`` is below a file system the runtime mounts itself
    (:data:`_RUNTIME_MOUNTED`): a link there (``/dev/dri/by-path/...``) can only be made in
    the container, by the hook."""
    return any(path == d or path.startswith(d + "/") for d in _RUNTIME_MOUNTED)


def _container_path(path: str) -> str:
    """``path`` (absolute) in one spelling: ``.`` and ``..`` taken out and slashes
    collapsed (``/./`` is ``/``, ``//usr/lib/`` is ``/usr/lib``), as the runtime joins it
    to the rootfs."""
    import posixpath

    return "/" + posixpath.normpath("/" + path).strip("/")


def _covers(destination: str, path: str) -> bool:
    return destination == "/" or path == destination or path.startswith(destination + "/")


def rootfs_edit_blocker(
    config: dict[str, Any], rootfs: str, edits: ContainerEdits
) -> tuple[str | None, dict[str, str]]:
    """Whether spec mode can make ``edits``' soname links and ``ld.so.cache`` entries in
    the root file system ``rootfs`` itself, before the runtime creates the container
    (one process per GPU container), instead of leaving them to the
    createContainer hook.

    Refused when the result inside the container could differ from the hook's:

    * ``rootfs`` is not a directory (the runtime reports it);
    * the container is rootless or has a user namespace (:func:`rootless_spec`): files the
      hook makes are owned by the container's root, those made on the host would not be,
      and an idmapped rootfs shows host ids differently;
    * a mount of ``config`` (an engine's volume, a tmpfs) is at or above a path written or
      read — a link, ``/etc/ld.so.cache``, a musl loader's ``/etc/ld-musl-<arch>.path``,
      the image's CUDA compat directory — so that the
      container would see the mount, not what was written below it;
    * a library to enter in the cache has no host file among the plan's bind mounts (its
      soname and ABI are read from the host file: the mount is not there yet).

    Returns:
        ``(reason, sources)``: ``reason`` is ``None`` when the edit can be made, else why
        not (for the debug log); ``sources`` maps each cache library's container path to
        its host file.
    """
    if not os.path.isdir(rootfs):
        return f"the rootfs {rootfs} is not a directory", {}
    if rootless_spec(config):
        return "the container has a user namespace", {}
    written = [s.link for s in edits.symlinks if not _runtime_mounted(s.link)]
    if edits.ldcache_libraries:
        written.append("/etc/ld.so.cache")
    if edits.cuda_compat is not None:
        written.append(edits.cuda_compat.directory)
    mounts = config.get("mounts")
    for m in mounts if isinstance(mounts, list) else ():
        dest = m.get("destination") if isinstance(m, dict) else None
        if not isinstance(dest, str) or not dest:
            continue
        dest = _container_path(dest)  # a relative one is the rootfs's: runc makes it absolute
        for path in written:
            if _covers(dest, path):
                return f"the mount at {dest} covers {path}", {}
        if edits.ldcache_libraries and dest.startswith("/etc/ld-musl-"):
            return f"the mount at {dest} covers a musl loader's path file", {}
    by_destination = {m.destination: m.source for m in edits.mounts}
    links = {s.link: s.target for s in edits.symlinks}
    sources: dict[str, str] = {}
    for lib in edits.ldcache_libraries:
        target = links.get(lib)
        if target is not None and "/" not in target:
            dest = f"{os.path.dirname(lib)}/{target}"
        else:
            dest = lib
        source = by_destination.get(dest)
        if source is None:
            return f"the library {lib} is not one of the bind mounts", {}
        sources[lib] = source
    return None, sources


def _light_plan(plan: Plan, mask_by_caller: bool) -> tuple[Plan, ProcMask | None]:
    """``plan`` without what the edit made in the rootfs: the hook keeps only the links
    below ``/dev`` (made by the runtime after the edit) and the ``/proc/driver/nvidia``
    mask, that only where the host has the directory — and with ``mask_by_caller``, when
    no link is left for the hook, the mask is returned for the caller instead."""
    e = plan.edits
    # the container's procfs shows the host kernel's: no directory there, nothing to mask
    mask = e.proc_mask if e.proc_mask and os.path.isdir(e.proc_mask.host_dir) else None
    late = tuple(s for s in e.symlinks if _runtime_mounted(s.link))
    caller = mask if mask_by_caller and not late else None
    if caller is not None:
        mask = None
    light = e.replace(
        symlinks=late, ldcache_libraries=(), ldcache_flags=(), cuda_compat=None, proc_mask=mask
    )
    return plan.replace(edits=light), caller


def edit_bundle(
    bundle_dir: str,
    root: HostRoot | None = None,
    *,
    dry_run: bool = False,
    command: Sequence[str] | None = None,
    options: Options | None = None,
    indent: str | None = "\t",
    mask_by_caller: bool = False,
    durable: bool = True,
    defer_rootfs: bool = False,
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
        mask_by_caller: the caller runs the runtime's ``create`` itself and mounts the
            ``/proc/driver/nvidia`` mask in the created container
            (``EditResult.caller_mask``), so that no hook has to (the wrapper runtime).
        durable: ``fsync`` the new ``config.json`` and its directory (default). The
            wrapper runtime passes ``False``: the runtime reads the file at once, and
            after a power loss the engine makes the bundle again (containerd's and
            CRI-O's live on tmpfs, where ``fsync`` does nothing anyway); the rename
            still makes the replacement atomic.
        defer_rootfs: the soname links and ``ld.so.cache`` made in the rootfs are
            handed to the caller (``EditResult.rootfs_edit``), to close, or roll back if
            the runtime fails (the wrapper runtime). With ``mask_by_caller``, when the
            mask is left to the caller and ``config.json`` has no hook of any stage
            (:func:`has_hooks`: a hook could look at the rootfs before the container
            starts), they are left for the caller to make (:meth:`RootfsEdit.run`) while
            the runtime creates the container, before it is started; otherwise they are
            made here, as without ``defer_rootfs``.

    What an earlier edit added is recorded in the annotation ``ocihook.edits``
    (:mod:`ocihook.appliers.editrecord`) and taken out before the plan is made: editing
    again for a different request gives the GPUs of that request only (a void one: none);
    for the same request the document is unchanged and not written.

    Returns:
        An :class:`EditResult`. A void request changes nothing (``written`` False), except
        that an earlier edit is taken out.

    Raises:
        SpecError: missing or malformed ``config.json``; the ``ocihook.edits`` annotation
            is not ocihook's record; or the document holds ocihook's createContainer hook
            without that record (edited by an ocihook that kept none) and asks for GPUs
            (they would add up).
        RequestError: the request cannot be met (unknown GPU, unknown capability, an
            ``AMD_VISIBLE_DEVICES``/``INTEL_VISIBLE_DEVICES`` entry that is malformed or
            names no GPU of the host).
        DiscoveryError: the host has no usable driver (for AMD: no KFD).
        CdiError: a CDI request (see :func:`cdi_device_names`) is malformed or names a
            device no spec in ``options.cdi_spec_dirs`` defines; the devices are injected
            from the CDI registry with :func:`ocihook.cdi.inject_devices` instead of host
            discovery, and ``NVIDIA_VISIBLE_DEVICES`` is set to ``void``. An AMD/Intel
            variable holding no CDI name is still planned from the host and applied too.
        ApplyError: ``config.json`` could not be replaced (it is left as it was), or a
            bind-mount target could not be made in the root file system
            (:func:`create_mount_targets`: a symbolic link at a target, a read-only root).
    """
    from .editrecord import edited_without_record, record_edit, undo_recorded_edit

    options = options or Options()
    read = load_bundle(bundle_dir)
    # an earlier edit is taken out first, so the plan is made for the request as it is now
    config, had_record = undo_recorded_edit(read.config, path=read.config_path)
    bundle = read.replace(config=config)
    try:
        request = request_from_spec(bundle.config, path=bundle.config_path, policy=options.policy)
    except RequestError:
        # annotations replace the environment's request (the toolkit does not read it then)
        if not has_annotation_request(bundle.config, options):
            raise
        request = Request("void", source="annotations")
    ignored = ignored_by_policy(bundle.config, options.policy, options.annotation_prefixes)
    if ignored:
        from ..core import log

        log.info("request ignored", reason=policy_note(ignored))
    result = _edit_request(bundle, request, root, options, command)
    if result is None:  # nothing requested (any more)
        if not had_record:
            return EditResult(read, request, None, read.raw, read.raw, False, (), ignored)
        return _finish(read, request, None, config, dry_run, (), ignored, indent, durable)
    doc, plan, cdi_names = result
    if not had_record and edited_without_record(read.config):
        raise SpecError(
            "config.json was edited by ocihook before, without the record of what it added "
            "(annotation ocihook.edits): editing it again would add GPUs to those it has",
            path=read.config_path,
            hint="start from the engine's original config.json",
        )
    if plan is None:
        assert doc is not None  # the CDI path
        return _finish(
            read,
            request,
            plan,
            record_edit(config, doc),
            dry_run,
            cdi_names,
            ignored,
            indent,
            durable,
        )
    in_rootfs, pending = _rootfs_edit(bundle, plan.edits, dry_run)
    caller_mask = None
    applied = plan
    changes = deferred = None
    if in_rootfs:
        applied, caller_mask = _light_plan(plan, mask_by_caller)
    if pending is not None:
        later = defer_rootfs and caller_mask is not None and not has_hooks(bundle.config)
        if not later:
            try:
                changes = pending.run()
            except OcihookError as err:
                from ..core import log

                log.debug(
                    "soname links and ld.so.cache left to the createContainer hook",
                    reason=f"making them failed ({err}): the hook tries again",
                )
                in_rootfs, applied, caller_mask, pending = False, plan, None, None
        if defer_rootfs:
            deferred = pending
    doc = apply_plan(bundle.config, applied, command=command, path=bundle.config_path)
    try:
        done = _finish(
            read, request, plan, record_edit(config, doc), dry_run, (), ignored, indent, durable
        )
    except BaseException:
        if changes is not None:
            changes.rollback()
        raise
    if changes is not None and deferred is None:
        changes.close()
    return done.replace(in_rootfs=in_rootfs, caller_mask=caller_mask, rootfs_edit=deferred)


class RootfsEdit:
    """The soname links and ``ld.so.cache`` entries of a plan, to be made in a bundle's
    root file system by :meth:`run` (:func:`ocihook.appliers.live.hooks.edit_rootfs`,
    through in-root descriptor operations; a library's soname and ABI read from its host
    file, the bind mount not being there yet).

    Attributes:
        changes: what :meth:`run` made (its descriptor open until the caller closes or
            rolls it back), or ``None`` before it ran.
    """

    def __init__(self, bundle: Bundle, edits: ContainerEdits, sources: dict[str, str]) -> None:
        self.rootfs = bundle.rootfs
        self.config = bundle.config
        self.edits = edits
        self.sources = sources
        self.changes: RootfsChanges | None = None

    def run(self) -> RootfsChanges:
        """Make them, once: a second call returns the changes the first made. Returns the
        changes, for the caller to close or roll back.

        Raises:
            ApplyError: a step failed; what was made before it is undone first.
        """
        if self.changes is not None:
            return self.changes
        from .live.hooks import edit_rootfs

        e = self.edits
        pairs = [(s.target, s.link) for s in e.symlinks if not _runtime_mounted(s.link)]
        self.changes = edit_rootfs(
            self.rootfs,
            self.config,
            pairs,
            e.ldcache_libraries,
            cuda_compat=e.cuda_compat,
            sources=self.sources,
            known=dict(e.ldcache_flags),
        )
        return self.changes


def has_hooks(config: dict[str, Any]) -> bool:
    """Whether the runtime could run a hook of ``config``: a member whose name is
    ``hooks`` in any case (runc reads ``config.json`` with Go's ``encoding/json``, which
    matches member names without regard to case) that is not null and not an object whose
    members are all empty."""
    for key, hooks in config.items():
        # casefold: Go also folds U+017F (long s) to "s" and U+212A (Kelvin) to "k"
        if key.casefold() != "hooks" or hooks is None:
            continue
        if not isinstance(hooks, dict) or any(hooks.values()):
            return True
    return False


def _rootfs_edit(
    bundle: Bundle, e: ContainerEdits, dry_run: bool
) -> tuple[bool, RootfsEdit | None]:
    """Whether ``e``'s soname links (but those below ``/dev``) and ``ld.so.cache`` entries
    can be made in the bundle's rootfs (:func:`rootfs_edit_blocker` finds nothing in the
    way), and, unless ``dry_run``, the :class:`RootfsEdit` that makes them. A refusal
    leaves them to the hook and is logged at debug level."""
    if not (e.symlinks or e.ldcache_libraries):
        return False, None
    reason, sources = rootfs_edit_blocker(bundle.config, bundle.rootfs, e)
    if reason is not None:
        from ..core import log

        log.debug("soname links and ld.so.cache left to the createContainer hook", reason=reason)
        return False, None
    return True, None if dry_run else RootfsEdit(bundle, e, sources)


def _finish(
    read: Bundle,
    request: Request,
    plan: Plan | None,
    doc: dict[str, Any],
    dry_run: bool,
    cdi_names: tuple[str, ...] = (),
    ignored: tuple[str, ...] = (),
    indent: str | None = "\t",
    durable: bool = True,
) -> EditResult:
    """Write ``doc`` (``indent``, ``durable``: see :func:`edit_bundle`) unless
    ``dry_run`` or it equals the document ``read`` holds."""
    if doc == read.config:
        return EditResult(read, request, plan, read.raw, read.raw, False, cdi_names, ignored)
    if dry_run:
        after = dump_json(doc, indent=indent)
        return EditResult(read, request, plan, read.raw, after, False, cdi_names, ignored)
    # the bind-mount targets are made here, inside the rootfs, not left to the runtime
    mounts = plan.edits.mounts if plan is not None else _cdi_mounts(doc)
    created = create_mount_targets(read.rootfs, mounts) if mounts else ()
    try:
        after = write_json_atomic(read.config_path, doc, indent=indent, durable=durable)
    except OSError as e:
        err = ApplyError(f"cannot replace config.json: {e.strerror}", path=read.config_path)
        raise _undo_targets(read.rootfs, created, err) if created else err from None
    return EditResult(
        read, request, plan, read.raw, after, True, cdi_names, ignored, targets=created
    )


def _edit_request(
    bundle: Bundle,
    request: Request,
    root: HostRoot | None,
    options: Options,
    command: Sequence[str] | None,
) -> tuple[dict[str, Any] | None, Plan | None, tuple[str, ...]] | None:
    """For CDI devices: the edited document for ``request`` (``bundle.config`` without
    any earlier edit), ``None`` and the CDI devices injected; for the legacy path:
    ``None``, the plan and ``()`` (:func:`edit_bundle` applies it); ``None`` when nothing
    is requested."""
    try:
        cdi_names = cdi_device_names(bundle.config, request, options)
    except OcihookError as e:
        raise e.with_path(bundle.config_path) from None
    if cdi_names:
        beside = drm_requests_beside_cdi(bundle.config, options, bundle.config_path)
        drm_plan = None
        if beside:
            void = Request("void", source=request.source)
            drm_plan = plan_for_bundle(bundle, void, root, options, "spec", beside)
        doc = _edit_bundle_cdi(bundle, cdi_names, options, drm_plan, command)
        return doc, None, cdi_names
    drm_requests = drm_requests_from_spec(
        bundle.config, path=bundle.config_path, policy=options.policy
    )
    if request.is_void and not drm_requests:
        return None
    plan = plan_for_bundle(bundle, request, root, options, "spec", drm_requests)
    return None, plan, ()  # applied by edit_bundle, which decides where the links are made
