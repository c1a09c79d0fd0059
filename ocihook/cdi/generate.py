"""Generate a CDI spec for the GPUs of a host (what ``nvidia-ctk cdi generate`` does).

The spec is built from host discovery (:func:`ocihook.discovery.nvidia.discover`) and has:

* one device per GPU and per MIG device, named by each requested naming strategy
  (:data:`NAME_STRATEGIES`), and ``all`` holding every GPU. A GPU's edits hold its
  ``/dev/nvidia<minor>`` node and, when graphics files exist, its ``/dev/dri`` card and
  render nodes plus a hook making their ``/dev/dri/by-path`` links; a MIG device's edits
  hold its parent's node and its GPU- and compute-instance capability nodes (NVIDIA MIG
  user guide, "Device Nodes and Capabilities");
* common edits for every container that gets any of the devices:
  ``NVIDIA_VISIBLE_DEVICES=void`` (a legacy hook registered too must not act again), the
  control nodes (``nvidiactl``, ``nvidia-uvm``, ``nvidia-uvm-tools``, ``nvidia-modeset``),
  read-only nosuid nodev bind mounts of the driver libraries (64- and 32-bit), binaries,
  firmware and graphics configuration files, the IPC sockets (read-write, noexec), and one
  ``createContainer`` hook that runs the installed ``ocihook hook cdi`` (the compact
  arguments of :mod:`ocihook.cdi.hookargs`; what ``hook create-container`` does): the soname
  and development links, the container's ``ld.so.cache`` and an ``ld.so.conf.d`` drop-in
  for the library directories the image's ``ld.so.conf`` lacks (``--ld-so-conf``: an
  ``ldconfig`` the image runs keeps them), CUDA forward compatibility and the
  ``/proc/driver/nvidia`` mask with ``ModifyDeviceFiles: 0`` (the driver inside must not
  create device nodes), showing the ``gpus/`` entries of the GPUs the container got;
  ``additionalGids`` with the groups of nodes that are not world read-writable (0660
  group ``video``), and then only, so that other hosts keep the older ``cdiVersion``.

Files are mounted at their paths in the driver root (as the NVIDIA Container Toolkit's
generator does: the image layout is unknown when the spec is written); the hook enters
them in the container's ``ld.so.cache``. Every capability's files are included
(``nvidia-ctk`` does the same): a spec is per host, not per container.

The options of ``nvidia-ctk cdi generate`` that shape its spec mean the same here
(:mod:`ocihook.cdi.toolkitopts` reads them): ``--device-id`` (:func:`generate_spec`'s
``device_ids``), ``--no-all-device`` (``all_device``) and ``--disable-hook``/``--enable-hook``
(``hooks``: the parts of ocihook's hook that stand for the toolkit's hooks).

:func:`generate_drm_spec` does the same for AMD (``amd.com/gpu``) and Intel
(``intel.com/gpu``) hosts from :func:`ocihook.discovery.drm.discover_vendor`.

Every spec declares the **minimum** ``cdiVersion`` its content needs
(:func:`ocihook.cdi.spec.minimum_version`; CDI ``SPEC.md`` "Version"): consumers with older
CDI libraries (podman 4.x, containerd 1.6/1.7) reject newer versions.
"""

from __future__ import annotations

import os
import sys

from ..core.errors import DiscoveryError
from ..core.records import Record
from ..plan.build import development_links, node_groups
from ..plan.edits import IPC_MOUNT_OPTIONS, LIBRARY_MOUNT_OPTIONS
from .names import validate_class, validate_device_name, validate_vendor
from .spec import ContainerEdits, Device, DeviceNode, Hook, Mount, Spec, minimum_version
from .toolkitopts import DEFAULT_HOOKS, SPEC_HOOKS, parse_device_ids

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc imports collections: milliseconds at start
    from collections.abc import Callable, Collection, Sequence

    from ..discovery.nvidia import NvidiaHost
    from ..discovery.records import DrmGpu, DrmHost, Gpu, HostDeviceNode, MigDevice
    from ..plan.select import Selection

__all__ = [
    "DEFAULT_NAME_STRATEGIES",
    "DRM_KINDS",
    "HOOK_FREE_DIRS",
    "K8S_KINDS",
    "K8S_VENDOR",
    "NAME_STRATEGIES",
    "generate_drm_spec",
    "generate_spec",
    "map_host_paths",
    "spec_bytes",
    "spec_format",
    "transform_root",
    "write_spec",
]

#: Device naming strategies (``nvidia-ctk cdi generate --device-name-strategy``):
#: ``index`` -> ``0`` and MIG ``0:1``; ``uuid`` -> ``GPU-<uuid>`` and ``MIG-<uuid>`` (MIG
#: devices without a UUID, from the procfs backend, get none); ``type-index`` -> ``gpu0``
#: and ``mig0:1``.
NAME_STRATEGIES = ("index", "uuid", "type-index")
#: The strategies used when none is given: every device by index and by UUID.
DEFAULT_NAME_STRATEGIES = ("index", "uuid")


class _Named(Record):
    names: tuple[str, ...]
    edits: ContainerEdits


def _node(n: HostDeviceNode) -> DeviceNode:
    """A CDI device node with its number given, so that no consumer has to stat a host node
    (the host may be a driver root / dev root of another machine's tree)."""
    return DeviceNode(
        path=n.path,
        host_path=n.host_path if n.host_path != n.path else "",
        type="c",
        major=n.major,
        minor=n.minor,
        file_mode=n.file_mode,
        permissions="rw",
        uid=n.uid or None,
        gid=n.gid or None,
    )


def _hook(command: Sequence[str], args: Sequence[str]) -> Hook:
    from ..config.options import HOOK_ENV, HOOK_TIMEOUT

    return Hook("createContainer", command[0], (*command, *args), HOOK_ENV, HOOK_TIMEOUT)


def _cdi_hook_args(links: Sequence[str], libs: Sequence[str] = ()) -> list[str]:
    """The start of ``ocihook hook cdi``'s arguments (:mod:`ocihook.cdi.hookargs`): the
    writing version, then ``links`` (``TARGET::LINK``) and ``libs`` (``PATH::FLAGS``)
    grouped by directory.

    Raises:
        CdiError: a path the compact arguments cannot carry.
    """
    from ..core.version import VERSION
    from .hookargs import HOOK_STAGE, VERSION_FLAG, pack_libs, pack_links

    args = ["hook", HOOK_STAGE, VERSION_FLAG, VERSION]
    for value in pack_links(links):
        args += ["--links", value]
    for value in pack_libs(libs):
        args += ["--libs", value]
    return args


def _gpu_edits(host: NvidiaHost, gpu: Gpu) -> tuple[list[DeviceNode], list[str]]:
    """The nodes of one GPU and the ``TARGET::LINK`` links of its DRM nodes."""
    nodes = [_node(host.gpu_nodes[gpu.minor])]
    links: list[str] = []
    dri = host.dri.get(gpu.bus_id)
    if dri is not None:
        nodes += [_node(n) for n in dri.nodes]
        links += [f"{target}::{link}" for link, target in dri.links]
    return nodes, links


def _edits(
    nodes: Sequence[DeviceNode],
    links: Sequence[str],
    command: Sequence[str],
    hooks: Collection[str] = DEFAULT_HOOKS,
) -> ContainerEdits:
    """A device's edits: ``nodes`` each once, and a hook making ``links`` (its
    ``/dev/dri/by-path`` links) when there are any and ``create-symlinks`` is in
    ``hooks``."""
    unique: list[DeviceNode] = []
    for n in nodes:
        if n not in unique:
            unique.append(n)
    made: tuple[Hook, ...] = ()
    if links and "create-symlinks" in hooks:
        made = (_hook(command, _cdi_hook_args(list(dict.fromkeys(links)))),)
    return ContainerEdits(device_nodes=tuple(unique), hooks=made)


def _names(strategies: Sequence[str], gpu: Gpu) -> list[str]:
    out = []
    for s in strategies:
        out.append({"index": str(gpu.index), "uuid": gpu.uuid, "type-index": f"gpu{gpu.index}"}[s])
    return out


def _mig_names(strategies: Sequence[str], gpu: Gpu, pos: int, mig: MigDevice) -> list[str]:
    j = mig.nvml_index if mig.nvml_index is not None else pos
    out = []
    for s in strategies:
        if s == "index":
            out.append(f"{gpu.index}:{j}")
        elif s == "type-index":
            out.append(f"mig{gpu.index}:{j}")
        elif mig.uuid is not None:
            out.append(mig.uuid)
    return out


def _check_hook_path(path: str) -> None:
    """Refuse a container path the createContainer hook could not be given: ``::``
    separates the fields of its ``--lib PATH::FLAGS`` and ``--link TARGET::LINK``.

    Raises:
        CdiError: ``path`` contains ``::``.
    """
    if "::" in path:
        from .names import CdiError

        raise CdiError(
            "a driver file's path cannot contain '::' (it separates the fields of the "
            "createContainer hook's --lib and --link arguments)",
            path=path,
        )


#: Where a hook-free spec mounts each library by default: directories the images'
#: loaders search without a cache entry or a link. glibc on Debian and Ubuntu searches
#: ``/usr/lib`` after its multiarch directory (``ld.so --help``, "System search path"),
#: musl searches ``/lib:/usr/local/lib:/usr/lib``, and glibc on RHEL-like x86_64 and
#: aarch64 images searches ``/lib64:/usr/lib64``.
HOOK_FREE_DIRS = ("/usr/lib", "/usr/lib64")


def _hook_free_mounts(
    host: NvidiaHost, capabilities: Sequence[str], dirs: Sequence[str]
) -> list[Mount]:
    """Each 64-bit driver library mounted as its real file at ``<dir>/<soname>`` for every
    directory of ``dirs``: the loader finds it by soname with no link, no cache entry and
    so no hook (see :func:`generate_spec`, ``hook_free``)."""
    mounts: list[Mount] = []
    taken: set[str] = set()
    for lib in host.libraries_for(capabilities):
        if lib.elf_class != 64:
            continue
        for directory in dirs:
            destination = f"{directory.rstrip('/')}/{lib.soname}"
            if destination not in taken:
                taken.add(destination)
                mounts.append(Mount(lib.host_path, destination, LIBRARY_MOUNT_OPTIONS, type=""))
    return mounts


def _common_edits(
    host: NvidiaHost,
    command: Sequence[str],
    hooks: Collection[str] = DEFAULT_HOOKS,
    hook_free: Sequence[str] | None = None,
) -> ContainerEdits:
    """The edits every device of the spec shares (see the module docstring); the hook
    holds the parts of :data:`~ocihook.cdi.toolkitopts.SPEC_HOOKS` in ``hooks``, and
    there is none when it would have nothing to do. With ``hook_free`` (directories),
    the libraries are mounted at their sonames there instead (:func:`_hook_free_mounts`)
    and there is no hook."""
    from ..discovery.nvidia import SUPPORTED_CAPABILITIES

    capabilities = sorted(SUPPORTED_CAPABILITIES)
    nodes = [_node(n) for n in host.control_nodes]
    if host.modeset is not None:
        nodes.append(_node(host.modeset))
    ldcache = "update-ldcache" in hooks
    symlinks = "create-symlinks" in hooks
    mounts: list[Mount] = []
    links: list[str] = []
    libs: list[str] = []
    seen: set[str] = set()
    if hook_free is not None:
        hooks = ()
        mounts = _hook_free_mounts(host, capabilities, hook_free)
    for lib in host.libraries_for(capabilities) if hook_free is None else ():
        if lib.path in seen:
            continue
        seen.add(lib.path)
        _check_hook_path(lib.path)
        mounts.append(Mount(lib.host_path, lib.path, LIBRARY_MOUNT_OPTIONS, type=""))
        directory = os.path.dirname(lib.path)
        soname_path = f"{directory}/{lib.soname}"
        if lib.soname != lib.name and ldcache:  # ldconfig's link in the toolkit
            links.append(f"{lib.name}::{soname_path}")
        if ldcache:
            libs.append(f"{soname_path}::{lib.abi_flags:#06x}")  # the hook reads no ELF header
        for extra in development_links(lib.soname, lib.name, capabilities) if symlinks else ():
            links.append(f"{extra.target}::{directory}/{extra.link}")
    for f in host.files_for(capabilities):
        if f.path in seen:
            continue
        seen.add(f.path)
        options = IPC_MOUNT_OPTIONS if f.kind == "ipc" else LIBRARY_MOUNT_OPTIONS
        mounts.append(Mount(f.host_path, f.path, options, type=""))
    args = _cdi_hook_args(links, libs)
    work = bool(links or libs)  # a hook with nothing to do is a usage error at start
    if ldcache:  # host directories: an ldconfig in the image must keep them
        args.append("--ld-so-conf")
    if ldcache and "enable-cuda-compat" in hooks:
        compat = "::".join(("/usr/local/cuda/compat", host.driver_version, host.cuda_version or ""))
        args += ["--cuda-compat", compat.rstrip(":")]
        work = True
    if "disable-device-node-modification" in hooks:
        args += ["--mask-proc", host.root.proc("driver/nvidia"), "--proc-gpus-from-devices"]
        work = True
    return ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        device_nodes=tuple(nodes),
        hooks=(_hook(command, args),) if work else (),
        mounts=tuple(mounts),
    )


def generate_spec(
    host: NvidiaHost,
    *,
    vendor: str = "nvidia.com",
    device_class: str = "gpu",
    name_strategies: Sequence[str] = DEFAULT_NAME_STRATEGIES,
    hook_command: Sequence[str] | None = None,
    device_ids: Sequence[str] | None = None,
    all_device: bool = True,
    hooks: Collection[str] = DEFAULT_HOOKS,
    hook_free: Sequence[str] | None = None,
) -> Spec:
    """The CDI spec for ``host`` (see the module docstring), at its minimum ``cdiVersion``.

    Args:
        host: discovery result; discover with every capability (the default) so that the
            spec holds every driver file.
        vendor: the vendor part of the spec's ``kind`` (``vendor/device_class``).
        device_class: the class part of the spec's ``kind``.
        name_strategies: naming strategies from :data:`NAME_STRATEGIES`, each giving every
            device one name; a name two strategies give alike is listed once.
        hook_command: argv prefix that runs ocihook (default:
            :func:`ocihook.config.options.cdi_hook_command`, this installation's
            ``ocihook`` command).
        device_ids: only these devices (``nvidia-ctk cdi generate --device-id``, read by
            :func:`~ocihook.cdi.toolkitopts.parse_device_ids`): a GPU id gives the GPU
            alone, not its MIG devices, and a MIG id that MIG device; ``None``: every GPU
            and MIG device.
        all_device: also the device ``all``, holding every device of the spec (the
            toolkit's ``--no-all-device`` is ``False``).
        hooks: the names of :data:`~ocihook.cdi.toolkitopts.SPEC_HOOKS` whose part the
            spec's hooks carry (:func:`~ocihook.cdi.toolkitopts.resolve_hooks`); a hook left
            with nothing to do is left out.
        hook_free: directories (e.g. :data:`HOOK_FREE_DIRS`): a spec with no hook at all,
            so that a container costs no process beyond the runtime's. Each 64-bit library
            is mounted as its real file at ``<dir>/<soname>`` in each directory, where
            the image's loader finds it without a link or a cache entry. What such a spec
            loses (docs/guide/cdi.md): the ``ld.so.cache`` entries and links, the
            development links (``libcuda.so``), the 32-bit libraries, CUDA forward
            compatibility, the ``/proc/driver/nvidia`` mask and the ``/dev/dri/by-path``
            links; an image whose loader searches none of the directories does not find
            the libraries.

    Returns:
        A valid :class:`~ocihook.cdi.spec.Spec` (devices in index order, MIG devices after
        their GPU, then ``all``).

    Raises:
        CdiError: a malformed ``vendor``, ``device_class``, strategy or device id, a hook
            name not in :data:`~ocihook.cdi.toolkitopts.SPEC_HOOKS`, a device id the host
            has no device for (the hint lists the host's), or no device left to write; a
            driver library path containing ``::`` (the hook's field separator).
        DiscoveryError: the host has no GPU.

    On a WSL2 host (``host.wsl`` and no enumerated GPU) the spec has the one device
    ``all`` (see :func:`_generate_wsl_spec`) whatever ``device_ids`` and ``all_device``
    say: ``/dev/dxg`` serves every GPU at once, and the toolkit's WSL2 spec names its one
    device ``all`` too.
    """
    from ..config.options import cdi_hook_command as default_command
    from ..plan.select import Selection
    from .names import CdiError

    validate_vendor(vendor)
    validate_class(device_class)
    for s in name_strategies:
        if s not in NAME_STRATEGIES:
            raise CdiError(
                f"unknown device name strategy (use {', '.join(NAME_STRATEGIES)})",
                field="--device-name-strategy",
                value=s,
            )
    if not name_strategies:
        name_strategies = DEFAULT_NAME_STRATEGIES
    for h in hooks:
        if h not in SPEC_HOOKS:
            raise CdiError(
                f"not a hook of ocihook's spec (use {', '.join(SPEC_HOOKS)})",
                field="hooks",
                value=h,
            )
    if device_ids is not None:
        device_ids = parse_device_ids(device_ids)
    if hook_free is not None:
        hooks = ()
        for directory in hook_free:
            if not directory.startswith("/") or "::" in directory:
                raise CdiError("not an absolute directory", field="--hook-free", value=directory)
    if host.wsl is not None and not host.gpus:
        return _generate_wsl_spec(host, f"{vendor}/{device_class}", hook_command, hooks)
    if not host.gpus:
        raise DiscoveryError(
            "no NVIDIA GPU found: nothing to put in a CDI spec",
            path=host.root.proc("driver/nvidia/gpus"),
        )
    command = tuple(hook_command or default_command())
    chosen = None if device_ids is None else _selected(host, device_ids)
    devices: list[_Named] = []
    all_nodes: list[DeviceNode] = []
    all_links: list[str] = []
    for gpu in host.gpus:
        if chosen is None or Selection(gpu) in chosen:
            nodes, links = _gpu_edits(host, gpu)
            all_nodes += nodes
            all_links += links
            edits = _edits(nodes, links, command, hooks)
            devices.append(_Named(tuple(_names(name_strategies, gpu)), edits))
        parent = _node(host.gpu_nodes[gpu.minor])
        for pos, mig in enumerate(gpu.mig_devices):
            if chosen is not None and Selection(gpu, mig) not in chosen:
                continue
            names = _mig_names(name_strategies, gpu, pos, mig)
            if names:
                mig_nodes = [parent, *(_node(n) for n in mig.nodes)]
                all_nodes += mig_nodes
                devices.append(_Named(tuple(names), _edits(mig_nodes, (), command, hooks)))
    out: list[Device] = []
    seen: set[str] = set()
    for d in devices:
        for name in d.names:
            if name not in seen:
                seen.add(name)
                validate_device_name(name)
                out.append(Device(name, d.edits))
    if all_device and all_nodes:
        out.append(Device("all", _edits(all_nodes, all_links, command, hooks)))
    if not out:
        raise CdiError(
            "no device to write: the devices selected have no name under the naming "
            "strategies given",
            field="--device-id",
            value=",".join(device_ids) if device_ids else None,
            hint="add --device-name-strategy index (MIG devices found without NVML have no UUID)",
        )
    common = _common_edits(host, command, hooks, hook_free)
    # the groups of nodes a non-root user could not open otherwise (0660 group video):
    # with them the spec needs cdiVersion 0.7.0, so only a host that needs them has them
    gids = node_groups([*common.device_nodes, *all_nodes])
    if gids:
        common = common.replace(additional_gids=gids)
    spec = Spec(
        version="0.3.0",
        kind=f"{vendor}/{device_class}",
        devices=tuple(out),
        container_edits=common,
    )
    return Spec(minimum_version(spec), spec.kind, spec.devices, spec.container_edits)


def _selected(host: NvidiaHost, device_ids: Sequence[str]) -> set[Selection]:
    """The GPUs and MIG devices of ``host`` that ``device_ids``
    (:func:`~ocihook.cdi.toolkitopts.parse_device_ids`) name, matched as
    ``NVIDIA_VISIBLE_DEVICES`` entries are (:func:`ocihook.plan.select.select_devices`:
    UUIDs in any case, MIG ``i:j`` by NVML's MIG index).

    Raises:
        CdiError: an id the host has no device for; the hint lists the host's.
    """
    from ..core.errors import RequestError
    from ..plan.select import select_devices
    from ..request.nvidia import Request
    from .names import CdiError

    try:
        found = select_devices(Request(kind="list", devices=tuple(device_ids)), host.gpus)
    except RequestError as e:
        raise CdiError(e.message, field="--device-id", value=e.value, hint=e.hint) from None
    return set(found)


def _generate_wsl_spec(
    host: NvidiaHost,
    kind: str,
    hook_command: Sequence[str] | None,
    hooks: Collection[str] = DEFAULT_HOOKS,
) -> Spec:
    """The CDI spec of a WSL2 host, as the toolkit's WSL mode writes it
    (``pkg/nvcdi/lib-wsl.go``): one device, ``all``, holding ``/dev/dxg``; common edits
    with ``NVIDIA_VISIBLE_DEVICES=void``, the driver files mounted at their own paths
    (:func:`ocihook.plan.build.wsl_edits`), and ocihook's ``hook cdi`` hook for the
    soname links, the ``/usr/bin/nvidia-smi`` link and the ``ld.so.cache`` (CUDA forward
    compatibility when the driver version is known; no ``/proc/driver/nvidia`` mask:
    WSL2 has none)."""
    from ..config.options import cdi_hook_command as default_command
    from ..plan.build import WSL_NVIDIA_SMI_LINK, wsl_edits

    wsl = host.wsl
    assert wsl is not None
    command = tuple(hook_command or default_command())
    mounts, links, libs = wsl_edits(wsl)
    ldcache = "update-ldcache" in hooks
    wanted = [  # the soname links (ldconfig's in the toolkit) go with the ld.so.cache
        f"{link.target}::{link.link}"
        for link in links
        if (ldcache if link.link != WSL_NVIDIA_SMI_LINK else "create-symlinks" in hooks)
    ]
    args = _cdi_hook_args(wanted, libs if ldcache else ())
    work = bool(wanted or (ldcache and libs))
    if host.driver_version and ldcache and "enable-cuda-compat" in hooks:
        compat = "::".join(("/usr/local/cuda/compat", host.driver_version, host.cuda_version or ""))
        args += ["--cuda-compat", compat.rstrip(":")]
        work = True
    common = ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        hooks=(_hook(command, args),) if work else (),
        mounts=tuple(m.replace(type="") for m in mounts),
    )
    device = Device("all", ContainerEdits(device_nodes=(_node(wsl.dxg),)))
    spec = Spec(version="0.3.0", kind=kind, devices=(device,), container_edits=common)
    return Spec(minimum_version(spec), spec.kind, spec.devices, spec.container_edits)


#: The CDI kind of each DRM vendor's GPUs: amd-ctk's (``/etc/cdi/amd.json``) and Intel's
#: DRA driver's.
DRM_KINDS = {"amd": "amd.com/gpu", "intel": "intel.com/gpu"}

#: The CDI vendor of the specs ocihook's Kubernetes plugins write. A kind of their own, as
#: NVIDIA's device plugin has (``k8s.device-plugin.nvidia.com/gpu``,
#: ``cmd/nvidia-device-plugin/plugin-manager.go``): the spec that ``ocihook cdi generate``,
#: ``nvidia-ctk cdi generate`` or ``amd-ctk`` writes for the same GPUs (``nvidia.com/gpu``)
#: may sit in the same directory, and two specs defining one qualified name at one
#: priority make a CDI registry refuse both.
K8S_VENDOR = "k8s.ocihook.io"
#: The kind of each GPU vendor's devices in the plugins' specs: one spec per vendor (a
#: spec's common edits, the NVIDIA driver's files, must not reach another vendor's
#: devices, and device names such as ``0`` repeat across vendors).
K8S_KINDS = {v: f"{K8S_VENDOR}/{v}-gpu" for v in ("nvidia", "amd", "intel")}


def generate_drm_spec(
    host: DrmHost,
    *,
    additional_gids: bool = False,
    hook_command: Sequence[str] | None = None,
    all_device: bool = True,
    kind: str | None = None,
) -> Spec:
    """The CDI spec for the AMD or Intel GPUs of ``host`` (what ``amd-ctk cdi generate``
    writes for ROCm), at its minimum ``cdiVersion``.

    * kind ``kind``, by default :data:`DRM_KINDS` of the vendor (``amd.com/gpu``,
      ``intel.com/gpu``);
    * one device per GPU (AMD: per partition) named by its index (``0``, ``1``, ...; Intel
      GPUs also by ``card<N>``, the name Intel's device plugin uses), holding its card and
      render nodes with their numbers, mode and host group (``permissions`` ``rw``) and,
      for Intel, a ``createContainer`` hook making its ``/dev/dri/by-path`` links (Level
      Zero reads them); then ``all`` with every GPU;
    * common edits: the shared nodes (AMD's ``/dev/kfd``) and
      ``<VARIABLE>=void`` (``AMD_VISIBLE_DEVICES``, ``INTEL_VISIBLE_DEVICES``), so that a
      legacy hook registered as well does not act again.

    Args:
        host: the vendor's discovery result.
        additional_gids: also list each device's node groups (``render``, ``video``) in
            ``additionalGids``, for non-root container users; this needs cdiVersion 0.7.0,
            which podman 4.x and containerd 1.6/1.7 reject, so it is off by default (give
            the user the groups with ``--group-add`` instead).
        hook_command: argv prefix that runs ocihook (default: this installation).
        all_device: also the device ``all`` (``--no-all-device``: ``False``).
        kind: the spec's kind (``vendor/class``; the Kubernetes plugins':
            :data:`K8S_KINDS`).

    Raises:
        DiscoveryError: the host has no GPU of the vendor.
        CdiError: a malformed ``kind``.
    """
    from ..config.options import cdi_hook_command as default_command
    from ..request.drm import DRM_VARIABLES

    if not host.gpus:
        raise DiscoveryError(
            f"no {host.vendor} GPU found: nothing to put in a CDI spec", path=host.root.sys("")
        )
    command = tuple(hook_command or default_command())

    def node(n: HostDeviceNode) -> DeviceNode:
        return _node(n).replace(gid=n.gid or None)

    def edits(gpus: Sequence[DrmGpu]) -> ContainerEdits:
        nodes = [node(n) for g in gpus for n in g.nodes]
        links = [f"{t}::{link}" for g in gpus for link, t in g.links]
        e = _edits(nodes, links, command)
        if additional_gids:
            gids = sorted({n.gid for g in gpus for n in g.nodes} - {0})
            e = e.replace(additional_gids=tuple(gids))
        return e

    devices: list[Device] = []
    for gpu in host.gpus:
        names = [str(gpu.index)]
        if host.vendor == "intel" and gpu.card_name is not None:
            names.append(gpu.card_name)
        for name in names:
            validate_device_name(name)
            devices.append(Device(name, edits([gpu])))
    if all_device:
        devices.append(Device("all", edits(host.gpus)))
    common = ContainerEdits(
        env=(f"{DRM_VARIABLES[host.vendor]}=void",),
        device_nodes=tuple(node(n) for n in host.shared_nodes),
    )
    kind = kind or DRM_KINDS[host.vendor]
    vendor, _, device_class = kind.partition("/")
    validate_vendor(vendor)
    validate_class(device_class)
    spec = Spec(version="0.3.0", kind=kind, devices=tuple(devices), container_edits=common)
    return Spec(minimum_version(spec), spec.kind, spec.devices, spec.container_edits)


def spec_format(fmt: str | None, output: str | None) -> str:
    """The format to write: ``fmt`` when given, else ``"json"`` for an ``output`` ending in
    ``.json``, else ``"yaml"`` (nvidia-ctk's default)."""
    if fmt:
        return fmt
    return "json" if output and output.endswith(".json") else "yaml"


def spec_bytes(spec: Spec, fmt: str) -> bytes:
    """``spec`` as ``"json"`` (indented, final newline) or ``"yaml"`` text.

    Raises:
        ValueError: an unknown format.
    """
    data = spec.to_dict()
    if fmt == "json":
        from ..core import jsonfast

        return (jsonfast.dumps_indented(data, 2) + "\n").encode()
    if fmt == "yaml":
        import yaml

        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)  # libyaml's emitter: ~10x faster
        text: str = yaml.dump(data, Dumper=dumper, sort_keys=False, default_flow_style=False)
        return ("---\n" + text).encode()
    raise ValueError(f"unknown spec format {fmt!r} (use json or yaml)")


def write_spec(data: bytes, output: str | None) -> None:
    """Write spec text to standard output (``output`` is ``None``) or to ``output``
    atomically (:func:`ocihook.oci.bundle.write_bytes_atomic`: readers such as a runtime's CDI
    cache never see half a file; a new file gets mode 0644; a writer killed midway leaves
    no temporary). A missing directory is
    created with mode 0755 (as the CDI library's spec writer does, ``os.MkdirAll(dir,
    0o755)``; ``/var/run/cdi`` does not exist on a fresh host, it is a tmpfs).

    Raises:
        CdiError: ``output`` cannot be written (nothing is changed).
    """
    if output is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return

    from ..oci.bundle import write_bytes_atomic
    from .names import CdiError

    try:
        os.makedirs(os.path.dirname(os.path.abspath(output)), mode=0o755, exist_ok=True)
        write_bytes_atomic(output, data)
    except OSError as e:
        raise CdiError(f"cannot write the CDI spec: {e.strerror}", path=output) from None


def _swap_prefix(path: str, old: str, new: str) -> str:
    """``path`` with the leading path ``old`` replaced by ``new`` (whole components only),
    or ``path`` unchanged."""
    if not path.startswith("/"):
        return path  # not a path (a tmpfs source, ...)
    old = old.rstrip("/") or "/"
    new = new.rstrip("/") or "/"
    if old == "/":
        rest = path
    elif path == old or path.startswith(old + "/"):
        rest = path[len(old) :]
    else:
        return path
    if not rest:
        return new
    return rest if new == "/" else new + rest


def transform_root(spec: Spec, old: str, new: str, *, relative_to: str = "host") -> Spec:
    """``spec`` with the root ``old`` of its paths replaced by ``new`` (``nvidia-ctk cdi
    transform root``): a spec generated for a driver installed under ``/run/nvidia/driver``
    made usable where the driver is at ``/``, or the reverse.

    ``relative_to="host"`` changes host paths: mounts' and device nodes' ``hostPath``, hook
    ``path``s and ocihook hook arguments that name host paths (``--mask-proc``, and the
    directories the ``-c`` program of :func:`ocihook.config.options.cdi_hook_command` puts
    on ``sys.path``).
    ``relative_to="container"`` changes container paths: mounts' ``containerPath``, device
    nodes' ``path`` and the container paths in ocihook's hook arguments (``--lib``, its
    ``::FLAGS`` kept, ``--link``, and the directories and absolute link targets of
    ``--libs`` and ``--links``: :mod:`ocihook.cdi.hookargs`). Only whole path components match
    (``/run/nvidia/driver`` does not match ``/run/nvidia/driverX``). The result keeps the
    declared ``cdiVersion`` unless its content needs a newer one.

    Raises:
        CdiError: ``old`` or ``new`` is not absolute, ``relative_to`` is unknown, or
            ``new`` contains ``::`` for container paths (the hook's field separator).
    """
    from .names import CdiError

    for flag, value in (("--from", old), ("--to", new)):
        if not value.startswith("/"):
            raise CdiError("must be an absolute path", field=flag, value=value)
    if relative_to not in ("host", "container"):
        raise CdiError("must be host or container", field="--relative-to", value=relative_to)
    host = relative_to == "host"
    if not host and "::" in new:  # it would split the hook's --lib and --link fields
        raise CdiError(
            "cannot contain '::' (it separates the fields of the createContainer hook's "
            "--lib and --link arguments)",
            field="--to",
            value=new,
        )

    def swap(p: str) -> str:
        return _swap_prefix(p, old, new)

    return _map_paths(spec, swap, host=host)


def map_host_paths(spec: Spec, to_host: Callable[[str], str]) -> Spec:
    """``spec`` with every host path passed through ``to_host``: mounts' ``source``, device
    nodes' ``hostPath`` (or their ``path`` when it has none), hook ``path``s and the host
    paths of ocihook's hook arguments (``--mask-proc``); container paths are left alone.
    What :func:`transform_root` does for one root, for a mapping of several (a Kubernetes
    plugin that sees the host's driver root and dev root under other paths:
    :class:`ocihook.k8s.inventory.RootView`). ``to_host`` gets absolute paths only and
    must return one; the result keeps the declared ``cdiVersion`` unless its content needs
    a newer one."""

    def swap(p: str) -> str:
        return to_host(p) if p.startswith("/") else p

    return _map_paths(spec, swap, host=True)


def _map_paths(spec: Spec, swap: Callable[[str], str], *, host: bool) -> Spec:
    """``spec`` with its host paths (``host``) or its container paths passed through
    ``swap`` (see :func:`transform_root` for which are which); the ``cdiVersion`` raised
    when the content needs it."""

    from ..config.options import hook_program, program_dirs

    def hook(h: Hook) -> Hook:
        args = list(h.args)
        for i in range(1, len(args)):
            flag = args[i - 1]
            if host and flag == "--mask-proc":
                args[i] = swap(args[i])
            elif not host and flag == "--lib":  # PATH or PATH::FLAGS
                path, sep, flags = args[i].partition("::")
                args[i] = swap(path) + sep + flags
            elif not host and flag == "--link":
                target, sep, link = args[i].partition("::")
                if sep:
                    target = swap(target) if target.startswith("/") else target
                    args[i] = f"{target}::{swap(link)}"
            elif not host and flag == "--libs":  # DIR::FLAGS::NAME...
                directory, sep, rest = args[i].partition("::")
                args[i] = swap(directory) + sep + rest
            elif not host and flag == "--links":  # DIR::NAME/TARGET...
                directory, *items = args[i].split("::")
                for j, item in enumerate(items):
                    name, slash, target = item.partition("/")
                    if slash and target.startswith("/"):  # NAME//absolute/target
                        items[j] = f"{name}/{swap('/' + target)}"
                args[i] = "::".join((swap(directory), *items))
        dirs = program_dirs(args) if host else None
        if dirs is not None:  # ocihook's program: the directories it imports from
            args[args.index("-c", 1) + 1] = hook_program([swap(d) for d in dirs])
        path = swap(h.path) if host else h.path
        return Hook(h.hook_name, path, tuple(args), h.env, h.timeout)

    def node(n: DeviceNode) -> DeviceNode:
        if host:
            hp = swap(n.host_path or n.path)
            return n.replace(host_path="" if hp == n.path else hp)
        return n.replace(path=swap(n.path))

    def mount(m: Mount) -> Mount:
        if host:
            return m.replace(source=swap(m.source))
        return m.replace(destination=swap(m.destination))

    def edits(e: ContainerEdits) -> ContainerEdits:
        return e.replace(
            device_nodes=tuple(node(n) for n in e.device_nodes),
            mounts=tuple(mount(m) for m in e.mounts),
            hooks=tuple(hook(h) for h in e.hooks),
        )

    out = spec.replace(
        devices=tuple(d.replace(container_edits=edits(d.container_edits)) for d in spec.devices),
        container_edits=edits(spec.container_edits),
    )
    from .spec import cdi_version_tuple

    need = minimum_version(out)
    have = cdi_version_tuple(out.version)
    if have is None or have < (cdi_version_tuple(need) or (0, 0, 0)):
        out = out.replace(version=need)
    return out
