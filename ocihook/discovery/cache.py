"""The key of a cached discovery result: what the NVIDIA driver's files depend on.

Discovering the NVIDIA driver's files costs more than the rest of a container's start
(hundreds of ``lstat`` calls through :func:`ocihook.linux.pathsafe.resolve_in_root`); the
answer only changes when the driver, the dynamic loader's cache, the device nodes or the
configuration change. :func:`ocihook.discovery.nvidia.discover_cached` keeps results in
the root-owned store :mod:`ocihook.linux.cachestore` (entries ``discovery-*.entry``) under
the key :func:`host_key` builds:

* what the caller says the result depends on: the
  :class:`~ocihook.core.hostroot.HostRoot` (its driver, dev, proc and sys roots, the
  loader cache's path, the library directories) and the arguments of discovery;
* the identity of the installed discovery package (an upgrade replaces its files);
* what the host says: the bytes of ``<proc>/driver/nvidia/version`` and
  ``<proc>/devices``, the names under ``<proc>/driver/nvidia/gpus`` and
  ``<proc>/driver/nvidia-caps``, the identity (device, inode, size, mtime_ns) of the
  driver root's ``ld.so.cache``, the ``nvidia*`` nodes of ``<dev root>/dev`` (type and
  mode, device number, inode, owner, group), the MIG configuration (:func:`mig_state`:
  the GPU and compute instances of ``<proc>/driver/nvidia/capabilities`` with their
  ``access`` files, the nodes of ``/dev/nvidia-caps``), the IPC paths
  (:func:`ipc_identity`) and, for the graphics and display capabilities, the DRM state
  (:func:`dri_state`: each GPU's sysfs ``drm`` directory, the nodes of ``/dev/dri``).

An entry is also stale once a directory changes that its files came from
(:func:`source_dirs`) or that discovery searched, whether it found anything there or not
(:attr:`ocihook.discovery.nvidia.NvidiaHost.searched`): both are recorded with the entry
(:func:`ocihook.discovery.nvidia.discovery_dirs`).

The key is computed on every container start (a compiled plan's key holds it): it uses
``os.stat``, ``os.lstat``, ``os.listdir`` and small reads only, and this module imports
nothing but :mod:`os` when loaded. The MIG state costs a ``listdir`` per GPU instance
and a small read per ``access`` file; the DRM state a ``listdir`` per GPU and an
``lstat`` per DRM node, for graphics only.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from ..core.hostroot import HostRoot

__all__ = [
    "FORMAT",
    "PREFIX",
    "discovery_key",
    "dri_state",
    "host_key",
    "ipc_identity",
    "mig_state",
    "source_dirs",
]

#: Version of the key's and the entry's format: 2 since a discovered host records where
#: its CUDA version came from (``NvidiaHost.cuda_source``); 3 since the key holds the MIG
#: configuration (:func:`mig_state`) and the owner of each device node.
FORMAT = 3
#: The file-name prefix of discovery entries in the store.
PREFIX = "discovery"


def _read(path: str, limit: int = 1 << 16) -> str | None:
    """Up to ``limit`` bytes of the file ``path`` as text (undecodable bytes replaced), or
    ``None`` when it cannot be opened or read. ``os.open``/``os.read``, without blocking:
    a fifth of what ``open()`` costs, and the key reads a few dozen procfs files."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    chunks: list[bytes] = []
    size = 0
    try:
        while size < limit:
            chunk = os.read(fd, limit - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")


def _listdir(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def _identity(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def _nodes(directory: str, prefix: str | tuple[str, ...]) -> list[list[object]]:
    """``[name, mode, device number, inode, owner, group]`` (``lstat``) of each entry of
    ``directory`` whose name starts with ``prefix`` (or one of them), by name: what
    discovery describes a device node by (:class:`~ocihook.discovery.records.HostDeviceNode`).
    An entry that cannot be ``lstat``-ed is left out; ``[]`` when the directory cannot be
    listed."""
    out: list[list[object]] = []
    base = directory.rstrip("/") + "/"
    for name in _listdir(directory) or ():
        if name.startswith(prefix):
            try:
                st = os.lstat(base + name)
            except OSError:
                continue
            out.append([name, st.st_mode, st.st_rdev, st.st_ino, st.st_uid, st.st_gid])
    return out


def host_key(root: HostRoot, params: Mapping[str, object]) -> dict[str, object]:
    """What a discovery result of ``root`` with ``params`` (the caller's arguments, JSON
    values) depends on, as read now (see the module docstring): a JSON object for
    :func:`ocihook.linux.cachestore.lookup` and :func:`~ocihook.linux.cachestore.store`.
    A host file that cannot be read is ``None`` in the key (a node that cannot be
    ``lstat``-ed is left out). The DRM state (:func:`dri_state`) is read only when
    ``params["capabilities"]`` (a list; ``None`` or absent: every capability) names
    ``graphics`` or ``display``: discovery reads it for those alone."""
    gpus = _listdir(root.proc("driver/nvidia/gpus"))
    caps = params.get("capabilities")
    graphics = not isinstance(caps, (list, tuple)) or bool({"graphics", "display"} & set(caps))
    return {
        "format": FORMAT,
        # the code that discovered it: an upgrade replaces the package's files
        "code": _identity(os.path.dirname(os.path.abspath(__file__))),
        "root": [
            root.driver_root,
            root.dev_root,
            root.proc_root,
            root.sys_root,
            root.ldcache,
            list(root.library_dirs),
        ],
        "params": dict(params),
        "version": _read(root.proc("driver/nvidia/version")),
        "devices": _read(root.proc("devices")),
        "gpus": gpus,
        "caps": _listdir(root.proc("driver/nvidia-caps")),
        "ldcache": _identity(root.driver(root.ldcache)),
        "nodes": _nodes(root.dev("/dev"), "nvidia"),
        "mig": mig_state(root),
        "dri": dri_state(root, gpus or ()) if graphics else None,
    }


def mig_state(root: HostRoot) -> list[object]:
    """The MIG configuration as procfs discovery reads it (:mod:`ocihook.discovery.mig`):
    for each ``gpu<minor>`` directory of ``<proc>/driver/nvidia/capabilities``, each GPU
    instance ``mig/gi<G>`` with the text of its ``access`` file and its compute instances
    ``ci<C>`` with theirs (``[gpu, gi, access, [[ci, access]...]]``, by name; ``None`` for
    a file that cannot be read), then the capability nodes of ``<dev root>/dev/nvidia-caps``
    (:func:`_nodes`). Creating or destroying a GPU or compute instance (``nvidia-smi mig``,
    ``nvidia-mig-parted``), or a node made by ``nvidia-modprobe``, makes a new key. The
    ``mig-minors`` table is not read: the driver writes it once, fixed by its version.

    Costs one ``listdir`` per GPU with a capabilities directory and per GPU instance, and
    one small read per ``access`` file: nothing more on a host without MIG devices."""
    caps_dir = root.proc("driver/nvidia/capabilities")
    instances: list[object] = []
    for gpu in _listdir(caps_dir) or ():
        if not gpu.startswith("gpu"):
            continue
        mig_dir = os.path.join(caps_dir, gpu, "mig")
        for gi in _listdir(mig_dir) or ():
            if not gi.startswith("gi"):
                continue
            gi_dir = os.path.join(mig_dir, gi)
            cis = [
                [ci, _read(os.path.join(gi_dir, ci, "access"))]
                for ci in _listdir(gi_dir) or ()
                if ci.startswith("ci")
            ]
            instances.append([gpu, gi, _read(os.path.join(gi_dir, "access")), cis])
    return [instances, _nodes(root.dev("/dev/nvidia-caps"), "nvidia-cap")]


def dri_state(root: HostRoot, gpus: Sequence[str]) -> list[object]:
    """The DRM state graphics discovery reads (:func:`ocihook.discovery.devices.dri_nodes`):
    for each GPU of ``gpus`` (the names under ``<proc>/driver/nvidia/gpus``, PCI bus ids)
    the entries of its sysfs ``<sys>/bus/pci/devices/<bus id>/drm`` directory (``None``
    when there is none: ``nvidia-drm`` not loaded), then the ``card*`` and ``renderD*``
    nodes of ``<dev root>/dev/dri`` (:func:`_nodes`). Loading or unloading ``nvidia-drm``,
    or a DRM node made or changed, makes a new key. One ``listdir`` per GPU and one
    ``lstat`` per node."""
    from ..core.vocab import parse_bus_id, sysfs_bus_id

    drm: list[object] = []
    for name in gpus:
        bus = parse_bus_id(name)
        sys_id = name if bus is None else sysfs_bus_id(bus)
        drm.append([name, _listdir(root.sys(f"bus/pci/devices/{sys_id}/drm"))])
    return [drm, _nodes(root.dev("/dev/dri"), ("card", "renderD"))]


def discovery_key(root: HostRoot, capabilities: Sequence[str] | None) -> dict[str, object]:
    """The :func:`host_key` of :func:`ocihook.discovery.nvidia.discover_cached` for
    ``capabilities`` (sorted, each once; ``None``: all): with the machine's architecture
    and the :func:`ipc_identity` of ``root``.

    Raises:
        OSError: the host cannot be read (the caller discovers without the store)."""
    params = {
        "capabilities": None if capabilities is None else list(capabilities),
        "machine": os.uname().machine,
        "ipc": ipc_identity(root),
    }
    return host_key(root, params)


def ipc_identity(root: HostRoot) -> list[list[object]]:
    """``[path, file type, inode]`` of each IPC path (:data:`ocihook.core.vocab.IPC_PATHS`)
    in the driver root, ``None`` for one that is not there: a daemon's socket or the MPS
    directory that appears, goes or is made again makes a cached discovery stale."""
    from ..core.errors import DiscoveryError
    from ..core.vocab import IPC_PATHS
    from ..linux.pathsafe import resolve_in_root

    out: list[list[object]] = []
    for _capability, path, _kind in IPC_PATHS:
        try:  # resolved as find_ipcs resolves it: a /var/run -> /run link stays in the root
            st = os.stat(resolve_in_root(root.driver_root, path))
        except (OSError, DiscoveryError):
            out.append([path, None, None])
            continue
        out.append([path, st.st_mode & 0o170000, st.st_ino])
    return out


def source_dirs(paths: Sequence[str]) -> list[str]:
    """The parent directories of ``paths`` (host paths), sorted, without duplicates: the
    directories whose change makes a discovery entry stale."""
    return sorted({os.path.dirname(p) for p in paths if p})
