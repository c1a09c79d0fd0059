"""The plan's values: the container edits that give a container what it asked for, in
CDI's "container edits" terms (device nodes, mounts, hooks, env) and the OCI runtime
spec's, and the :class:`Plan` that holds them. Pure values; :mod:`ocihook.plan.build`
computes them, the appliers carry them out.
"""

from __future__ import annotations

from ..core.records import Record
from .procmask import ProcMask

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from typing import Any

    from .compat import CudaCompat

__all__ = [
    "IPC_MOUNT_OPTIONS",
    "LIBRARY_MOUNT_OPTIONS",
    "CgroupRule",
    "ContainerEdits",
    "DeviceNode",
    "Hook",
    "IntelRdt",
    "Mount",
    "NetDevice",
    "Plan",
    "ProcMask",
    "Symlink",
]

#: Options of driver file bind mounts (libnvidia-container ``src/nvc_mount.c``).
LIBRARY_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")
#: Options of IPC sockets and directories (libnvidia-container ``src/nvc_mount.c``).
IPC_MOUNT_OPTIONS = ("nosuid", "nodev", "noexec", "bind")


class DeviceNode(Record):
    """A device node to create in the container: an OCI ``linux.devices[]`` entry, and a
    CDI ``deviceNodes[]`` entry (CDI ``SPEC.md``, "Device Nodes"; the CDI loader,
    :func:`ocihook.cdi.spec.load_spec`, reads its JSON fields into these attributes).

    A plan's nodes have every number set; a CDI spec's may leave them to the host node
    (``None``, ``""``), which CDI injection reads (:mod:`ocihook.cdi.inject`).

    Attributes:
        path: container path (``/dev/nvidia0``).
        host_path: the host node it mirrors (under the dev root); ``""``: ``path``.
        type: ``"c"`` (character device), ``"b"``, ``"u"``, ``"p"``; ``""``: the host
            node's.
        major, minor: device number; ``None``: the host node's.
        file_mode: permission bits, e.g. ``0o666``; ``None``: the host node's.
        permissions: CDI's cgroup access (``"rw"``, ``"rwm"``); ``""``: ``rwm``.
        uid, gid: owner inside the container; ``None``: the runtime's default.
    """

    path: str
    host_path: str = ""
    type: str = ""
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str = ""
    uid: int | None = None
    gid: int | None = None


class CgroupRule(Record):
    """A device cgroup rule (OCI ``linux.resources.devices[]`` entry).

    ``major``/``minor`` of ``None`` mean any; ``access`` is a subset of ``"rwm"``.
    """

    allow: bool
    type: str
    major: int | None
    minor: int | None
    access: str


class Mount(Record):
    """A mount to add to the container: an OCI ``mounts[]`` entry, and a CDI ``mounts[]``
    entry (CDI ``SPEC.md``, "Mounts": ``hostPath`` is :attr:`source`, ``containerPath``
    :attr:`destination`).

    Attributes:
        source: host path (resolved, inside the driver root), or a file system source
            (``tmpfs``).
        destination: container path.
        options: mount options, e.g. ``("ro", "nosuid", "nodev", "bind")``.
        type: file system type, ``"bind"``; ``""`` in a CDI spec: the runtime's default.
    """

    source: str
    destination: str
    options: tuple[str, ...] = LIBRARY_MOUNT_OPTIONS
    type: str = "bind"


class Symlink(Record):
    """A symbolic link ``link -> target`` to create in the container.

    ``link`` is an absolute container path; ``target`` is written as is (relative
    targets such as ``libcuda.so.535.261.03`` are resolved from the link's directory).
    """

    link: str
    target: str


class Hook(Record):
    """An OCI hook entry to add (``hooks.<hook_name>[]``; CDI ``SPEC.md``, "OCI Hooks").

    Attributes:
        hook_name: the OCI hook stage: ``prestart``, ``createRuntime``,
            ``createContainer``, ``startContainer``, ``poststart`` or ``poststop``.
        path: the program; ``args[0]`` is its argv[0].
        args, env: its arguments and ``KEY=value`` environment.
        timeout: seconds, or ``None`` for none.
    """

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


class IntelRdt(Record):
    """Intel RDT settings (CDI ``SPEC.md``, "Intel RDT"; 0.7.0+). ``schemata`` and
    ``enable_monitoring`` need 1.1.0; ``enable_cmt``/``enable_mbm`` exist only before
    1.1.0."""

    clos_id: str = ""
    l3_cache_schema: str = ""
    mem_bw_schema: str = ""
    schemata: tuple[str, ...] = ()
    enable_monitoring: bool = False
    enable_cmt: bool = False
    enable_mbm: bool = False


class NetDevice(Record):
    """A host network interface to move into the container (CDI ``SPEC.md``, "Network
    Devices"; 1.1.0+)."""

    host_interface_name: str
    name: str


class ContainerEdits(Record):
    """Everything to change in a container, in CDI's "container edits" terms: a plan's
    edits, and a CDI spec's ``containerEdits`` (CDI ``SPEC.md``, "Container Edits"), whose
    JSON fields are ``env``, ``device_nodes``, ``hooks``, ``mounts``, ``intel_rdt``,
    ``additional_gids`` and ``net_devices``; the other fields are the plan's own.

    Attributes:
        env: ``KEY=value`` strings to set (spec mode only; a live container's environment
            cannot change).
        device_nodes: nodes to create.
        cgroup_rules: device cgroup rules to add.
        mounts: bind mounts to add, in order.
        symlinks: links to create after the mounts.
        ldcache_libraries: container paths of the mounted libraries that must be entered
            in the container's ``/etc/ld.so.cache`` (after ``symlinks``).
        ldcache_flags: ``(container path, ld.so.cache flags)`` of those libraries of
            ``ldcache_libraries`` whose soname is the path's file name, as discovery
            read them from the host's ``ld.so.cache`` (:attr:`DriverLibrary.abi_flags
            <ocihook.discovery.driverfiles.DriverLibrary.abi_flags>`): they are entered
            without reading the file again. Not part of the JSON form; a library missing
            here is read (its ELF header, never loaded).
        hooks: further hooks to register (none yet; the spec applier adds its own for
            ``symlinks``, ``ldcache_libraries`` and ``proc_mask``).
        proc_mask: how to mask ``/proc/driver/nvidia`` (after everything else), or ``None``.
        cuda_compat: CUDA forward compatibility from the image (with ``compute``), or
            ``None``.
        additional_gids: host group ids the container process must have to open the
            device nodes (AMD/Intel: ``render``, ``video``; NVIDIA: the groups of nodes
            that are not world read-writable, :func:`node_groups`), for
            ``process.user.additionalGids``; never 0 in a plan.
        intel_rdt: Intel RDT settings (CDI specs only), or ``None``.
        net_devices: network interfaces to move in (CDI specs only).
    """

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    cgroup_rules: tuple[CgroupRule, ...] = ()
    mounts: tuple[Mount, ...] = ()
    symlinks: tuple[Symlink, ...] = ()
    ldcache_libraries: tuple[str, ...] = ()
    ldcache_flags: tuple[tuple[str, int], ...] = ()
    hooks: tuple[Hook, ...] = ()
    proc_mask: ProcMask | None = None
    cuda_compat: CudaCompat | None = None
    additional_gids: tuple[int, ...] = ()
    intel_rdt: IntelRdt | None = None
    net_devices: tuple[NetDevice, ...] = ()

    def is_empty(self) -> bool:
        """True when there is nothing to change."""
        return not (
            self.env
            or self.device_nodes
            or self.cgroup_rules
            or self.mounts
            or self.symlinks
            or self.ldcache_libraries
            or self.hooks
            or self.proc_mask
            or self.additional_gids
            or self.intel_rdt
            or self.net_devices
        )


class Plan(Record):
    """What to do for one container. Pure value; :meth:`to_dict` gives its JSON form
    (schema: ``specs/plan.schema.json``).

    Attributes:
        driver_version: host NVIDIA driver version (``""`` when no NVIDIA GPU is asked for).
        gpus: ``(index, uuid, minor)`` of each selected NVIDIA GPU, in request order.
        capabilities: the driver capabilities provided, sorted.
        edits: the container edits.
        warnings: what was skipped, for the log.
        drm_gpus: ``(vendor, index, id)`` of each selected AMD or Intel GPU (id: the UUID,
            else the PCI address), in request order.
    """

    driver_version: str
    gpus: tuple[tuple[int, str, int], ...]
    capabilities: tuple[str, ...]
    edits: ContainerEdits
    warnings: tuple[str, ...] = ()
    drm_gpus: tuple[tuple[str, int, str], ...] = ()

    def log_fields(self) -> dict[str, object]:
        """What this plan gives a container, as log fields: the GPUs (NVIDIA UUIDs;
        AMD/Intel ids: UUID, else PCI address) and the counts of device nodes, mounts and
        links."""
        gpus = [uuid for _index, uuid, _minor in self.gpus]
        gpus += [f"{vendor}:{gpu_id}" for vendor, _index, gpu_id in self.drm_gpus]
        return {
            "gpus": ",".join(gpus) or "none",
            "device_nodes": len(self.edits.device_nodes),
            "mounts": len(self.edits.mounts),
            "links": len(self.edits.symlinks),
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``specs/plan.schema.json``); ``drmGpus`` and
        ``containerEdits.additionalGids`` only when not empty."""
        e = self.edits
        doc: dict[str, Any] = {
            "driverVersion": self.driver_version,
            "gpus": [{"index": i, "uuid": u, "minor": m} for i, u, m in self.gpus],
            "capabilities": list(self.capabilities),
            "containerEdits": {
                "env": list(e.env),
                "deviceNodes": [
                    {
                        "path": d.path,
                        "hostPath": d.host_path,
                        "type": d.type,
                        "major": d.major,
                        "minor": d.minor,
                        "fileMode": d.file_mode,
                        "uid": d.uid,
                        "gid": d.gid,
                    }
                    for d in e.device_nodes
                ],
                "cgroupRules": [
                    {
                        "allow": r.allow,
                        "type": r.type,
                        "major": r.major,
                        "minor": r.minor,
                        "access": r.access,
                    }
                    for r in e.cgroup_rules
                ],
                "mounts": [
                    {
                        "source": m.source,
                        "destination": m.destination,
                        "type": m.type,
                        "options": list(m.options),
                    }
                    for m in e.mounts
                ],
                "symlinks": [{"link": s.link, "target": s.target} for s in e.symlinks],
                "ldcacheLibraries": list(e.ldcache_libraries),
                "hooks": [
                    {"stage": h.hook_name, "path": h.path, "args": list(h.args), "env": list(h.env)}
                    for h in e.hooks
                ],
                "procMask": None
                if e.proc_mask is None
                else {"hostDir": e.proc_mask.host_dir, "gpuDirs": list(e.proc_mask.gpu_dirs)},
                "cudaCompat": None
                if e.cuda_compat is None
                else {
                    "dir": e.cuda_compat.directory,
                    "hostMajor": e.cuda_compat.host_major,
                    "hostDriver": e.cuda_compat.host_driver,
                    "hostCuda": e.cuda_compat.host_cuda,
                },
            },
            "warnings": list(self.warnings),
        }
        if e.additional_gids:
            doc["containerEdits"]["additionalGids"] = list(e.additional_gids)
        if self.drm_gpus:
            doc["drmGpus"] = [{"vendor": v, "index": i, "id": d} for v, i, d in self.drm_gpus]
        return doc
