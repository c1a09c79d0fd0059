"""Hook mode: apply a plan to a container that the runtime is creating.

:func:`inject` runs as a ``prestart`` or ``createRuntime`` hook (runtime namespaces, host
pid of the container init in the state JSON), and does what libnvidia-container's
``nvidia-container-cli configure`` does:

1. lets the container use exactly the planned device nodes: cgroup v1 ``devices.allow``
   rules and/or allow rules in its cgroup v2 eBPF device program (:mod:`.cgroups`);
2. in the host mount namespace, clones each driver library into a detached mount
   (``open_tree(OPEN_TREE_CLONE)``) and makes it read-only, nosuid, nodev
   (``mount_setattr``) — the sources are resolved on the host, never in the container;
3. enters the container's mount namespace (``setns``) and, with every path resolved
   *inside* the rootfs (``openat2(RESOLVE_IN_ROOT)``, see :mod:`ocihook.linux.pathsafe`):
   creates the device nodes, attaches the library mounts onto new empty files
   (``move_mount``), creates the soname links and rewrites ``/etc/ld.so.cache`` with the
   libraries added (:mod:`ocihook.linux.ldcache`) — nothing from the container's rootfs is ever
   executed, and the container's environment is never used;
4. returns to the host mount namespace.

A rootfs that the runtime made read-only before the hook (crun with ``root.readonly``) is
made writable for step 3 and read-only again before the hook returns (:mod:`.rootfs`).
In a user namespace other than the initial one (rootless engines) the device nodes are
bind mounts of the host's nodes, as ``mknod`` is refused there; a hook without
``CAP_SYS_ADMIN`` (``runc`` run by a user) first joins the container's user namespace.

If any step fails, everything done so far is undone (mounts detached, nodes, links and
files removed, ``ld.so.cache`` restored, cgroup rules denied again) and
:class:`~ocihook.core.errors.ApplyError` is raised; the runtime then aborts the start.

The ``createContainer`` hooks that spec mode registers are in :mod:`.hooks`.
"""

from __future__ import annotations

import os
import stat

from ...core.errors import ApplyError
from ...core.hostroot import HostRoot
from ...oci.bundle import Bundle, State
from ...plan.edits import Plan
from ...request.nvidia import Request
from .cgroups import allow_in_cgroups, systemd_scope_warning
from .libraries import LoaderFile, restore_loader_files, write_loader_files
from .procmask import caps_minors, clone_gpu_proc_dirs, mask_proc_driver, read_proc_files
from .procs import (
    check_container_pid,
    check_inside_container,
    container_root_ids,
    has_cap_sys_admin,
    identity_uid_map,
    parent_pid,
    proc_path,
    refuse_own_mount_namespace,
    same_user_ns,
)
from .rootfs import unlock_readonly_rootfs
from .undo import detach, partial, run_undo

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc imports collections: milliseconds at start
    from collections.abc import Sequence

    from ...config.options import Options
    from ...request.drm import DrmRequest
    from .undo import Undo

__all__ = ["inject"]


def inject(
    state: State,
    bundle: Bundle,
    request: Request,
    root: HostRoot,
    *,
    cgroups: bool = True,
    stage: str = "prestart",
    options: Options | None = None,
    drm_requests: Sequence[DrmRequest] = (),
) -> Plan:
    """Hook mode: give the container being created what ``request`` asks for.

    Args:
        state: the state JSON the runtime wrote on stdin.
        bundle: the container's bundle.
        request: what it asks for (not void).
        root: the host to read.
        cgroups: add device cgroup rules (off for rootless containers).
        stage: ``prestart`` or ``createRuntime`` (runtime namespaces; ``state.pid`` is the
            host pid of the container init, whose mount namespace is entered), or
            ``createContainer`` (already in the container's mount namespace, before
            ``pivot_root``; the host pid is the hook's parent — runc reports 1 and crun 0
            in the state; OCI runtime-spec ``config.md`` "POSIX-platform Hooks").
        options: the operator's settings.
        drm_requests: the container's AMD and Intel requests
            (:func:`ocihook.request.drm_requests_from_spec`).

    Returns:
        The plan that was applied. A live process's supplementary groups cannot change:
        when the plan's ``additional_gids`` are not all among the process user's groups in
        ``config.json`` (a non-root user), a warning says so.

    Raises:
        StateError: no usable container process (see :func:`check_container_pid`).
        RequestError, DiscoveryError: as in planning.
        ApplyError: a step failed; everything done was undone first.
    """
    from ...config.options import Options
    from ...core.errors import StateError
    from ...linux import pathsafe
    from ...linux import syscalls as _linux
    from ...pipeline.bundle import plan_for_bundle

    if not os.path.isdir(bundle.rootfs):
        raise ApplyError(
            "the container rootfs is not a directory",
            path=bundle.rootfs,
            hint="check root.path in the bundle's config.json",
        )
    inside = stage == "createContainer"
    if inside:
        pid = parent_pid()
        check_inside_container(pid)
    else:
        pid = state.pid
        if pid <= 1:
            raise StateError(
                "the state has no host pid of the container process",
                path="<stdin>",
                field="pid",
                value=pid,
                hint="use the createContainer stage with this runtime, or prestart",
            )
        check_container_pid(pid)
    plan = plan_for_bundle(
        bundle, request, root, options or Options(), f"hook {stage}", drm_requests
    )
    plan = _check_groups(bundle, plan)
    edits = plan.edits
    # A user namespace that is not the initial one (the container's own, or the one a
    # rootless engine made): mknod is refused there, the host's nodes are bind-mounted.
    bind_nodes = not identity_uid_map(pid)
    # ocihook without CAP_SYS_ADMIN (runc run by a user starts its hooks unprivileged):
    # join the container's user namespace, whose owner it is, and clone the host files
    # from inside the container's mount namespace, where they are still visible before
    # pivot_root and where that namespace's capabilities allow mounting.
    join_userns = not inside and not same_user_ns(pid) and not has_cap_sys_admin()
    root_ids = None if inside or join_userns else container_root_ids(pid)
    undo: list[Undo] = []
    tree_fds: list[int] = []
    node_fds: list[int] | None = [] if bind_nodes else None
    gpu_fds: dict[str, int] = {}
    proc_files: dict[str, bytes] = {}
    host_ns = -1
    root_fd = -1
    scope_warning = None
    loader_files: list[LoaderFile] = []

    def clone_sources() -> None:
        if edits.proc_mask is not None:
            gpu_fds.update(clone_gpu_proc_dirs(edits.proc_mask))
        for m in edits.mounts:
            try:
                tree_fds.append(
                    _linux.bind_mount_detached(
                        m.source,
                        readonly="ro" in m.options,
                        nosuid="nosuid" in m.options,
                        nodev="nodev" in m.options,
                        noexec="noexec" in m.options,
                    )
                )
            except OSError as e:
                raise ApplyError(f"cannot clone driver file: {e.strerror}", path=m.source) from None
        for n in edits.device_nodes:
            if node_fds is None:
                break
            try:
                node_fds.append(
                    _linux.bind_mount_detached(
                        n.host_path, readonly=False, nosuid=True, nodev=False, noexec=True
                    )
                )
            except OSError as e:
                raise ApplyError(
                    f"cannot clone the host device node: {e.strerror}",
                    path=n.host_path,
                    hint="a container in a user namespace gets the host's nodes "
                    "bind-mounted; they must exist under the dev root",
                ) from None

    try:
        if cgroups and edits.cgroup_rules:
            allow_in_cgroups(pid, edits.cgroup_rules, undo, rootless=bind_nodes)
            scope_warning = systemd_scope_warning(pid)
        if edits.proc_mask is not None:
            minors = caps_minors([(n.path, n.minor) for n in edits.device_nodes])
            proc_files = read_proc_files(edits.proc_mask.host_dir, minors)
        if not join_userns:
            clone_sources()
        if not inside:
            host_ns = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            if join_userns:
                _enter(pid, "ns/user", _linux.CLONE_NEWUSER)
            _enter(pid, "ns/mnt", _linux.CLONE_NEWNS)
            if join_userns:
                clone_sources()  # no way back to the host's namespaces: nothing to undo
            else:
                undo.append(lambda: _linux.setns(host_ns, _linux.CLONE_NEWNS))
        relock = unlock_readonly_rootfs(bundle.rootfs)  # crun: read-only before the hook
        if relock is not None:
            undo.append(relock)
        root_fd = pathsafe.open_root(bundle.rootfs)
        if root_ids is not None:  # files the container's user namespace can own
            old_ids = _linux.set_fs_ids(*root_ids)
            try:
                made = _apply_in_container(
                    root_fd, bundle.rootfs, plan, tree_fds, undo, node_fds, loader_files
                )
            finally:
                _linux.set_fs_ids(*old_ids)
        else:
            made = _apply_in_container(
                root_fd, bundle.rootfs, plan, tree_fds, undo, node_fds, loader_files
            )
        if edits.proc_mask is not None:
            mask_proc_driver(root_fd, proc_files, gpu_fds, undo)
        if relock is not None:
            relock()  # before leaving the container's mount namespace
        if not inside and not join_userns:  # success: back to the host namespace
            _linux.setns(host_ns, _linux.CLONE_NEWNS)
        undo.clear()
        # what was made in the rootfs, for the poststop hook to remove (leftovers.py)
        from .leftovers import record_created

        problem = record_created(
            bundle, made, {s.link: s.target for s in edits.symlinks}, loader_files
        )
        if problem is not None:
            plan = plan.replace(warnings=(*plan.warnings, problem))
    except BaseException as e:
        run_undo(undo)
        from ...core import log

        log.error("hook failed, changes undone", error=str(e) or type(e).__name__)
        raise
    finally:
        for fd in (*tree_fds, *gpu_fds.values(), *(node_fds or ())):
            os.close(fd)
        if root_fd >= 0:
            os.close(root_fd)
        if host_ns >= 0:
            os.close(host_ns)
    if scope_warning is not None:
        plan = _with_warning(plan, scope_warning)
    return plan


def _with_warning(plan: Plan, warning: str) -> Plan:
    """``plan`` with ``warning`` added (and logged)."""
    from ...core import log

    log.warning(warning)
    return Plan(
        plan.driver_version,
        plan.gpus,
        plan.capabilities,
        plan.edits,
        (*plan.warnings, warning),
        plan.drm_gpus,
    )


def _enter(pid: int, name: str, nstype: int) -> None:
    """``setns`` into the namespace ``/proc/<pid>/<name>`` (``ns/mnt``, ``ns/user``).

    Raises:
        ApplyError: it cannot be opened or entered.
        StateError: a mount namespace that is this process's own (a pid reused since it
            was checked).
    """
    from ...linux import syscalls as _linux

    ns_path = proc_path(HostRoot(), pid, name)
    try:
        ns_fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise ApplyError(
            f"cannot open the container's namespace: {e.strerror}", path=ns_path
        ) from None
    try:
        if nstype == _linux.CLONE_NEWNS:
            refuse_own_mount_namespace(ns_fd, pid)  # on the descriptor entered below
        _linux.setns(ns_fd, nstype)
    except OSError as e:
        raise ApplyError(f"cannot enter the namespace: {e.strerror}", path=ns_path) from None
    finally:
        os.close(ns_fd)


def _check_groups(bundle: Bundle, plan: Plan) -> Plan:
    """``plan`` with a warning added when its ``additional_gids`` are not all groups of the
    container's process user (``process.user`` of ``config.json``): the runtime has set
    the groups from the file it read before the hook ran, so the hook cannot add them, and
    a non-root user will not open the nodes. uid 0 needs none of them."""
    process = bundle.config.get("process")
    user = process.get("user") if isinstance(process, dict) else None
    user = user if isinstance(user, dict) else {}
    if not plan.edits.additional_gids or user.get("uid", 0) == 0:
        return plan
    have = {user.get("gid", 0)}
    extra = user.get("additionalGids")
    if isinstance(extra, list):
        have.update(extra)
    missing = [g for g in plan.edits.additional_gids if g not in have]
    if not missing:
        return plan
    warning = (
        f"the container user {user.get('uid')} lacks the groups {missing} of its GPU nodes and "
        "a hook cannot add groups to a created container: use spec mode (ocihook edit) or "
        "list them in process.user.additionalGids"
    )
    from ...core import log

    log.warning(warning)
    return Plan(
        plan.driver_version,
        plan.gpus,
        plan.capabilities,
        plan.edits,
        (*plan.warnings, warning),
        plan.drm_gpus,
    )


def _apply_in_container(
    root_fd: int,
    rootfs: str,
    plan: Plan,
    tree_fds: Sequence[int],
    undo: list[Undo],
    node_fds: Sequence[int] | None = None,
    files: list[LoaderFile] | None = None,
) -> list[str]:
    """The container-side steps of :func:`inject`; runs inside the container's mount
    namespace and records undo actions (run in reverse order) for every change. Returns
    the container paths it made, in the order made; the loader files it wrote
    (:func:`.libraries.write_loader_files`) are appended to ``files``.

    ``node_fds`` (a container with a user namespace): detached clones of the host's device
    nodes, bind-mounted onto new files in the container's ``/dev`` instead of ``mknod``,
    which a user namespace's ``/dev`` does not allow (runc does the same for such
    containers)."""
    from ...linux import pathsafe as ps
    from ...linux import syscalls as _linux

    edits = plan.edits
    created: list[str] = []

    def remove_created() -> None:
        for path in reversed(created):
            ps.remove_in_root(root_fd, path)

    undo.append(remove_created)
    try:
        if node_fds is not None:
            for node, tree in zip(edits.device_nodes, node_fds, strict=True):
                parent, _, name = node.path.rpartition("/")
                parent_fd = ps.makedirs_in_root(root_fd, parent or "/", created=created)
                try:
                    target = ps.create_file_at(parent_fd, parent, name, 0o644, created=created)
                finally:
                    os.close(parent_fd)
                try:
                    _linux.attach_mount(tree, target)
                finally:
                    os.close(target)
                undo.append(partial(detach, root_fd, node.path))
        for node in () if node_fds is not None else edits.device_nodes:
            if node.major is None or node.minor is None:
                raise ApplyError("device node without a device number", value=node.path)
            mode = 0o666 if node.file_mode is None else node.file_mode
            ps.mknod_in_root(
                root_fd, node.path, stat.S_IFCHR | mode, node.major, node.minor, created=created
            )
            if node.uid or node.gid:  # the host node's owner, e.g. the video group
                parent_fd = ps.makedirs_in_root(root_fd, os.path.dirname(node.path))
                try:
                    os.chown(
                        os.path.basename(node.path),
                        node.uid or 0,
                        node.gid or 0,
                        dir_fd=parent_fd,
                        follow_symlinks=False,
                    )
                finally:
                    os.close(parent_fd)
        parents: dict[str, int] = {}  # one in-root lookup per target directory
        try:
            for m, tree_fd in zip(edits.mounts, tree_fds, strict=True):
                parent, _, name = m.destination.rpartition("/")
                parent = parent or "/"
                if stat.S_ISDIR(os.fstat(tree_fd).st_mode):  # a directory (MPS pipes, udev)
                    target_fd = ps.makedirs_in_root(root_fd, m.destination, created=created)
                else:
                    if parent not in parents:
                        parents[parent] = ps.makedirs_in_root(root_fd, parent, created=created)
                    try:
                        target_fd = ps.create_file_at(
                            parents[parent], parent, name, created=created
                        )
                    except ApplyError:
                        # a socket mounted there by an earlier run of this hook shows as a
                        # socket, not as the empty file made for it: idempotent too
                        if _mounted_at(parents[parent], name, tree_fd):
                            continue
                        raise
                try:
                    if _same_file(target_fd, tree_fd):
                        continue  # mounted there already (the hook ran twice): idempotent
                    _linux.attach_mount(tree_fd, target_fd)
                finally:
                    os.close(target_fd)
                undo.append(partial(detach, root_fd, m.destination))
        finally:
            for fd in parents.values():
                os.close(fd)
        replaced: list[tuple[str, str]] = []
        try:
            ps.symlinks_in_root(
                root_fd,
                [(s.link, s.target) for s in edits.symlinks],
                created=created,
                replaced=replaced,
            )
        finally:  # a link replaced before a failure is put back too
            for link, previous in replaced:
                undo.append(partial(ps.symlink_in_root, root_fd, link, previous))
        if edits.ldcache_libraries:
            written = write_loader_files(
                root_fd,
                rootfs,
                edits.ldcache_libraries,
                edits.cuda_compat,
                known=dict(edits.ldcache_flags),
            )
            undo.append(partial(restore_loader_files, root_fd, written))
            if files is not None:
                files.extend(written)
    except OSError as e:
        raise ApplyError(
            f"cannot change the container: {e.strerror}",
            path=e.filename if isinstance(e.filename, str) else rootfs,
        ) from None
    return created


def _mounted_at(parent_fd: int, name: str, tree_fd: int) -> bool:
    """Whether ``name`` in the directory ``parent_fd`` (not followed) is the file of the
    detached mount ``tree_fd`` already."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except OSError:
        return False
    try:
        return _same_file(fd, tree_fd)
    finally:
        os.close(fd)


def _same_file(a: int, b: int) -> bool:
    """Whether two descriptors name the same file (a bind mount shows its source's
    device and inode)."""
    sa, sb = os.fstat(a), os.fstat(b)
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
