"""Making the plan: the container edits that give a container what it asked for.

A :class:`~ocihook.plan.edits.Plan` is a pure value computed by :func:`make_plan` from what
the host has (:class:`~ocihook.discovery.nvidia.NvidiaHost`), what the container asks for
(:class:`~ocihook.request.nvidia.Request`) and where libraries go in the image
(:class:`ContainerLayout`); :func:`make_drm_plan` does the same for AMD and Intel GPUs and
:func:`merge_plans` joins the plans of several vendors. Computing it does no I/O. The
appliers turn the same plan into ``config.json`` edits (:mod:`ocihook.appliers.spec`) or
changes to a live container (:mod:`ocihook.appliers.live`).

The edits mirror what libnvidia-container's ``nvidia-container-cli configure`` does for
the ``utility`` and ``compute`` capabilities and use the CDI vocabulary of "container
edits" (device nodes, mounts, hooks, env):

* device nodes: ``/dev/nvidiactl`` always, ``/dev/nvidia-uvm`` and
  ``/dev/nvidia-uvm-tools`` with ``compute``, ``/dev/nvidia<minor>`` per selected GPU;
* one cgroup allow rule (``rw``) per device node, nothing else;
* the groups of nodes that are not world read-writable (``0660`` group ``video``) as
  additional groups of the container process, so that a non-root user can open them;
* a bind mount per driver library, read-only, nosuid, nodev, at
  ``<container libdir>/<file name>``;
* soname links (``libcuda.so.1 -> libcuda.so.535.261.03``) and the development links
  (``libcuda.so -> libcuda.so.1``, ``libnvidia-ml.so``, ``libGLX_indirect.so.0``, the GBM
  backend ``gbm/nvidia-drm_gbm.so``: :func:`development_links`);
* the folders whose libraries must enter the container's ``ld.so.cache``;
* env ``NVIDIA_VISIBLE_DEVICES=void`` for spec mode, so that a legacy hook registered as
  well (ours or the toolkit's) does not inject a second time.
"""

from __future__ import annotations

import os

from ..core.errors import RequestError
from ..core.records import Record
from ..core.vocab import version_tuple
from ..request.sources import ENV_VISIBLE_DEVICES
from .compat import CudaCompat
from .edits import (
    IPC_MOUNT_OPTIONS,
    CgroupRule,
    ContainerEdits,
    DeviceNode,
    Mount,
    Plan,
    ProcMask,
    Symlink,
)
from .select import select_devices, select_drm_gpus

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Any

    from ..discovery.nvidia import NvidiaHost
    from ..discovery.records import DrmHost, HostDeviceNode, WslDevices
    from ..request.drm import DrmRequest
    from ..request.nvidia import Request

__all__ = [
    "DEVELOPMENT_LINKS",
    "WSL_NVIDIA_SMI_LINK",
    "ContainerLayout",
    "development_links",
    "links_to_mounts",
    "make_drm_plan",
    "make_plan",
    "merge_plans",
    "node_groups",
    "wsl_edits",
]

#: Development links made beside the soname links, by soname: ``(soname, link name)``, the
#: link pointing at the soname. libnvidia-container (``src/nvc_mount.c``) and the NVIDIA
#: Container Toolkit (``internal/discover/symlinks.go``) make ``libcuda.so`` (applications
#: ``dlopen`` it by that name) and ``libnvidia-opticalflow.so``; the toolkit's
#: ``create-dot-so-symlinks`` makes ``lib*.so -> soname`` for the libraries whose ``.so``
#: link the driver packages install (Debian's ``nvidia/current``: ``libnvidia-ml.so``,
#: ``libnvcuvid.so``, ``libnvidia-encode.so``, ``libnvidia-fbc.so``, ``libnvidia-ngx.so``);
#: GLVND's indirect GLX needs ``libGLX_indirect.so.0``.
DEVELOPMENT_LINKS = (
    ("libcuda.so.1", "libcuda.so"),
    ("libnvidia-opticalflow.so.1", "libnvidia-opticalflow.so"),
    ("libnvidia-ml.so.1", "libnvidia-ml.so"),
    ("libnvcuvid.so.1", "libnvcuvid.so"),
    ("libnvidia-encode.so.1", "libnvidia-encode.so"),
    ("libnvidia-fbc.so.1", "libnvidia-fbc.so"),
    ("libnvidia-ngx.so.1", "libnvidia-ngx.so"),
    ("libGLX_nvidia.so.0", "libGLX_indirect.so.0"),
)
_DEVELOPMENT_LINKS = dict(DEVELOPMENT_LINKS)


def development_links(soname: str, name: str, capabilities: Iterable[str]) -> list[Symlink]:
    """The links to make beside one driver library (soname ``soname``, file ``name``) in
    its directory, as ``Symlink`` with the link *relative to that directory*: the
    :data:`DEVELOPMENT_LINKS`; ``libnvidia-vulkan-producer.so`` -> the versioned file
    (it has no soname); with ``graphics``, the GBM backend
    ``gbm/nvidia-drm_gbm.so -> ../libnvidia-allocator.so.1`` that Mesa's libgbm loads
    (toolkit ``internal/discover/graphics.go``). No I/O."""
    out: list[Symlink] = []
    dev = _DEVELOPMENT_LINKS.get(soname)
    if dev is not None:
        out.append(Symlink(link=dev, target=soname))
    if name.startswith("libnvidia-vulkan-producer.so."):
        out.append(Symlink(link="libnvidia-vulkan-producer.so", target=name))
    if soname == "libnvidia-allocator.so.1" and "graphics" in capabilities:
        out.append(Symlink(link="gbm/nvidia-drm_gbm.so", target="../libnvidia-allocator.so.1"))
    return out


_TRIPLETS = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}
_TRIPLETS32 = {"x86_64": "i386-linux-gnu", "aarch64": "arm-linux-gnueabihf"}


class ContainerLayout(Record):
    """Where driver files go inside the image (libnvidia-container's choice).

    Attributes:
        libdir: 64-bit library directory: ``/usr/lib/x86_64-linux-gnu`` when the rootfs
            has ``/etc/debian_version``, else ``/usr/lib64``.
        libdir32: 32-bit library directory (compat32): ``/usr/lib/i386-linux-gnu`` on
            Debian images, else ``/usr/lib32``.
        bindir: where driver binaries go: ``/usr/bin``.
    """

    libdir: str = "/usr/lib64"
    libdir32: str = "/usr/lib32"
    bindir: str = "/usr/bin"

    @classmethod
    def for_image(cls, is_debian: bool, machine: str | None = None) -> ContainerLayout:
        """The layout for an image; ``is_debian`` = the rootfs has ``/etc/debian_version``."""
        machine = machine or os.uname().machine
        if is_debian and machine in _TRIPLETS:
            return cls(
                libdir=f"/usr/lib/{_TRIPLETS[machine]}",
                libdir32=f"/usr/lib/{_TRIPLETS32[machine]}",
            )
        return cls()


def make_plan(
    host: NvidiaHost,
    request: Request,
    layout: ContainerLayout,
    extra_nodes: Sequence[HostDeviceNode] = (),
    extra_mounts: Sequence[Mount] = (),
    *,
    cuda_compat: bool = True,
    check_requirements: bool = True,
    supported: frozenset[str] | None = None,
) -> Plan:
    """Compute the container edits for ``request`` on ``host``. No I/O.

    Args:
        host: discovery result.
        request: what the container asks for.
        layout: where libraries go in the image.
        extra_nodes: further device nodes the request asks for (MIG management, IMEX
            channels, feature-gated sets; see
            :func:`ocihook.pipeline.extras.request_device_nodes`).
        extra_mounts: further mounts the request asks for (GDS's ``/etc/cufile.json`` and
            ``/run/udev``; see :func:`ocihook.pipeline.extras.request_mounts`).
        cuda_compat: use the image's CUDA forward-compatibility libraries when newer
            (the operator's ``cuda-compat`` setting: ``ldconfig`` or ``disabled``).
        check_requirements: check ``request.requirements`` against the host and the
            selected GPUs (the operator's ``disable-require`` turns it off).
        supported: the driver capabilities the operator lets containers have
            (``supported-driver-capabilities``; default: all that ocihook provides).

    Returns:
        A :class:`Plan`; for a void request its edits are empty.

    Raises:
        RequestError: a requested GPU does not exist, or an ``NVIDIA_REQUIRE_*``
            requirement is not met (:func:`ocihook.request.requirements.check`, with the
            host's CUDA version from NVML, the driver's ``libcuda`` note or the
            driver-branch table); a requested capability the host cannot provide, and a
            requirement left unchecked because a host fact is unknown
            (:func:`ocihook.request.requirements.unchecked`), are reported in ``warnings``
            instead.
    """
    from ..discovery.nvidia import SUPPORTED_CAPABILITIES

    if supported is not None:
        SUPPORTED_CAPABILITIES = SUPPORTED_CAPABILITIES & supported

    if request.is_void:
        return Plan(host.driver_version, (), (), ContainerEdits())
    if host.wsl is not None and not host.gpus:
        return _make_wsl_plan(
            host,
            request,
            SUPPORTED_CAPABILITIES,
            cuda_compat,
            check_requirements,
            [_device_node(n) for n in extra_nodes],
            extra_mounts,
        )
    selections = select_devices(request, host.gpus)
    gpus: list[Any] = []
    for sel in selections:
        if sel.gpu not in gpus:
            gpus.append(sel.gpu)
    warnings = list(host.warnings)
    if request.requirements and check_requirements:
        from ..request.requirements import check, unchecked

        cuda, driver = host.cuda_version, host.driver_version
        check(
            request.requirements,
            cuda_version=cuda,
            driver_version=driver,
            gpus=gpus,
            source=request.source,
        )
        warnings += unchecked(request.requirements, cuda_version=cuda, driver_version=driver)
    unsupported = sorted(request.capabilities - SUPPORTED_CAPABILITIES)
    if unsupported:
        warnings.append(
            "driver capabilities not provided by this ocihook version: " + ", ".join(unsupported)
        )
    capabilities = tuple(sorted(request.capabilities & SUPPORTED_CAPABILITIES))

    node = _device_node
    graphics = "graphics" in capabilities or "display" in capabilities
    nodes: list[DeviceNode] = []
    for hn in host.control_nodes:
        if hn.path != "/dev/nvidiactl" and "compute" not in capabilities:
            continue  # nvidia-uvm* serve CUDA only
        nodes.append(node(hn))
    if "display" in capabilities and host.modeset is not None:
        nodes.append(node(host.modeset))
    links: list[Symlink] = []
    for sel in selections:
        if sel.mig is not None:  # a MIG device: its GPU and compute instance capabilities
            nodes.extend(node(n) for n in sel.mig.nodes if node(n) not in nodes)
    for gpu in gpus:
        gn = host.gpu_nodes.get(gpu.minor)
        if gn is None:  # pragma: no cover - discovery builds one node per GPU
            raise RequestError("GPU has no device node", value=gpu.device_path)
        nodes.append(node(gn))
        dri = host.dri.get(gpu.bus_id) if graphics else None
        if dri is not None:
            nodes.extend(node(n) for n in dri.nodes)
            links.extend(Symlink(link=link, target=target) for link, target in dri.links)
    for extra in extra_nodes:
        if node(extra) not in nodes:
            nodes.append(node(extra))
    rules = tuple(CgroupRule(True, n.type, n.major, n.minor, "rw") for n in nodes)

    mounts: list[Mount] = []
    ld_libs: list[str] = []
    ld_flags: list[tuple[str, int]] = []
    for lib in host.libraries_for(capabilities):
        libdir = layout.libdir if lib.elf_class == 64 else layout.libdir32
        dest = f"{libdir}/{lib.name}"
        mounts.append(Mount(source=lib.host_path, destination=dest))
        if lib.soname != lib.name:
            links.append(Symlink(link=f"{libdir}/{lib.soname}", target=lib.name))
            ld_libs.append(f"{libdir}/{lib.soname}")
        else:
            ld_libs.append(dest)
        ld_flags.append((ld_libs[-1], lib.abi_flags))
        for dev_link in development_links(lib.soname, lib.name, capabilities):
            links.append(Symlink(link=f"{libdir}/{dev_link.link}", target=dev_link.target))
    for f in host.files_for(capabilities):
        if f.kind == "binary":
            name = f.path.rsplit("/", 1)[-1]
            mounts.append(Mount(source=f.host_path, destination=f"{layout.bindir}/{name}"))
        elif f.kind == "ipc":
            mounts.append(Mount(f.host_path, f.path, IPC_MOUNT_OPTIONS))
        else:  # firmware, configuration files, the application profile: where they are
            mounts.append(Mount(source=f.host_path, destination=f.path))
    mounts.extend(m for m in extra_mounts if m not in mounts)
    proc_mask = ProcMask(
        host_dir=host.root.proc("driver/nvidia"),
        gpu_dirs=tuple(os.path.basename(g.proc_dir) for g in gpus),
    )

    edits = ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        device_nodes=tuple(nodes),
        cgroup_rules=rules,
        mounts=tuple(mounts),
        symlinks=tuple(links),
        ldcache_libraries=tuple(ld_libs),
        ldcache_flags=tuple(ld_flags),
        proc_mask=proc_mask,
        additional_gids=node_groups(nodes),
        cuda_compat=CudaCompat(
            host_major=int(host.driver_version.split(".")[0]),
            host_driver=host.driver_version,
            host_cuda=host.cuda_version or "",
        )
        if "compute" in capabilities and cuda_compat
        else None,
    )
    return Plan(
        driver_version=host.driver_version,
        gpus=tuple((g.index, g.uuid, g.minor) for g in gpus),
        capabilities=capabilities,
        edits=edits,
        warnings=tuple(warnings),
    )


def node_groups(nodes: Iterable[Any]) -> tuple[int, ...]:
    """The groups a non-root container user needs to open ``nodes``: the group (other
    than 0) of each node that others may not both read and write (``0660`` group
    ``video``, as ``NVreg_DeviceFileMode``/``NVreg_DeviceFileGID`` make the NVIDIA nodes),
    sorted, each once; for ``process.user.additionalGids``. A world read-writable node
    needs no group. ``nodes``: records with ``gid`` and ``file_mode`` (a plan's, a host's
    or a CDI spec's nodes; ``None`` = unset: group 0, mode ``0666``)."""
    out: set[int] = set()
    for n in nodes:
        mode = 0o666 if n.file_mode is None else n.file_mode
        if n.gid and mode & 0o006 != 0o006:
            out.add(n.gid)
    return tuple(sorted(out))


#: Where the toolkit links the WSL driver store's ``nvidia-smi`` in the container
#: (``pkg/nvcdi/driver-wsl.go``: the store path is used unchanged, so the binary is not
#: on ``PATH`` otherwise).
WSL_NVIDIA_SMI_LINK = "/usr/bin/nvidia-smi"


#: The capabilities the WSL2 driver files serve (the toolkit's WSL mode mounts one set).
_WSL_CAPABILITIES = frozenset({"compute", "utility"})


def wsl_edits(wsl: WslDevices) -> tuple[tuple[Mount, ...], tuple[Symlink, ...], tuple[str, ...]]:
    """The mounts, links and ``ld.so.cache`` libraries that give a container the WSL2
    driver files. No I/O.

    Each of ``wsl.driver_files`` is bind-mounted read-only, nosuid, nodev at its own path
    (``/usr/lib/wsl/drivers/<store>/libcuda.so.1.1``), as the toolkit's WSL mode does; a
    library whose soname differs from its name gets the soname link beside it
    (``libcuda.so.1 -> libcuda.so.1.1``, which the toolkit leaves to ``ldconfig``) and is
    entered in the container's ``ld.so.cache`` under it; ``nvidia-smi`` is linked from
    :data:`WSL_NVIDIA_SMI_LINK`.

    Returns:
        ``(mounts, symlinks, ldcache_libraries)``.
    """
    mounts: list[Mount] = []
    links: list[Symlink] = []
    libs: list[str] = []
    for f in wsl.driver_files:
        mounts.append(Mount(source=f.host_path, destination=f.path))
        directory = f.path.rsplit("/", 1)[0]
        if f.soname is not None and f.soname != f.name:
            links.append(Symlink(link=f"{directory}/{f.soname}", target=f.name))
            libs.append(f"{directory}/{f.soname}")
        elif ".so" in f.name:
            libs.append(f.path)
        if f.name == "nvidia-smi":
            links.append(Symlink(link=WSL_NVIDIA_SMI_LINK, target=f.path))
    return tuple(mounts), tuple(links), tuple(libs)


def _make_wsl_plan(
    host: NvidiaHost,
    request: Request,
    supported: frozenset[str],
    cuda_compat: bool,
    check_requirements: bool,
    extra_nodes: Sequence[DeviceNode] = (),
    extra_mounts: Sequence[Mount] = (),
) -> Plan:
    """:func:`make_plan` on a WSL2 host (``host.wsl``, no enumerated GPUs): ``/dev/dxg``
    for ``all`` (nothing for ``none``), the driver files of :func:`wsl_edits` for any
    capability, the request's ``extra_nodes`` and ``extra_mounts``, no
    ``/proc/driver/nvidia`` mask (WSL2 has none).

    Raises:
        RequestError: GPUs named one by one (dxg serves every GPU at once), or an
            unmet ``NVIDIA_REQUIRE_*``.
    """
    wsl = host.wsl
    assert wsl is not None
    if request.kind == "list":
        raise RequestError(
            "a WSL2 host gives every GPU through /dev/dxg: GPUs cannot be selected one by one",
            field=f"{request.source}[{ENV_VISIBLE_DEVICES}]",
            value=",".join(request.devices),
            hint=f"set {ENV_VISIBLE_DEVICES}=all (CDI: nvidia.com/gpu=all)",
        )
    warnings = list(host.warnings)
    if request.requirements and check_requirements:
        from ..request.requirements import check, unchecked

        cuda, driver = host.cuda_version, host.driver_version or None
        check(
            request.requirements,
            cuda_version=cuda,
            driver_version=driver,
            gpus=[],
            source=request.source,
        )
        warnings += unchecked(request.requirements, cuda_version=cuda, driver_version=driver)
    unsupported = sorted(request.capabilities - supported)
    if unsupported:
        warnings.append(
            "driver capabilities not provided by this ocihook version: " + ", ".join(unsupported)
        )
    capabilities = tuple(sorted(request.capabilities & supported))
    other = [c for c in capabilities if c not in _WSL_CAPABILITIES]
    if other:
        warnings.append(
            "on WSL2 the driver files serve compute and utility; nothing else is given for "
            + ", ".join(other)
        )
    nodes: list[DeviceNode] = [_device_node(wsl.dxg)] if request.kind == "all" else []
    nodes += [n for n in extra_nodes if n not in nodes]
    mounts, links, libs = wsl_edits(wsl) if capabilities else ((), (), ())
    mounts = (*mounts, *(m for m in extra_mounts if m not in mounts))
    version = version_tuple(host.driver_version) if host.driver_version else None
    edits = ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        device_nodes=tuple(nodes),
        cgroup_rules=tuple(CgroupRule(True, n.type, n.major, n.minor, "rw") for n in nodes),
        mounts=mounts,
        symlinks=links,
        ldcache_libraries=libs,
        cuda_compat=CudaCompat(
            host_major=version[0],
            host_driver=host.driver_version,
            host_cuda=host.cuda_version or "",
        )
        if "compute" in capabilities and cuda_compat and version is not None
        else None,
    )
    return Plan(
        driver_version=host.driver_version,
        gpus=(),
        capabilities=capabilities,
        edits=edits,
        warnings=tuple(warnings),
    )


def links_to_mounts(plan: Plan, occupied: Iterable[str]) -> Plan:
    """Replace the soname links whose path the image already holds as a regular file by
    a read-only bind mount of the library they name. No I/O.

    Images often ship their own ``libnvidia-ml.so.1`` or ``libcuda.so`` (CUDA stubs); a link
    cannot be made there ("file exists", a failure users of the NVIDIA toolkit know), and
    replacing the image's file would change the image. Mounting the host library over it
    gives the container the driver's library under that name and leaves the image as it
    was once the container is gone.

    Args:
        plan: the plan.
        occupied: link paths (container paths) where the image has a regular file.

    Returns:
        A plan whose links at ``occupied`` paths are mounts; other links are unchanged.
    """
    busy = set(occupied)
    e = plan.edits
    if not busy or not any(s.link in busy for s in e.symlinks):
        return plan
    by_dest = {m.destination: m for m in e.mounts}
    by_link = {s.link: s for s in e.symlinks}

    def source_of(link: str) -> Mount | None:
        seen: set[str] = set()
        path = link
        while path not in seen:
            seen.add(path)
            if path in by_dest and path != link:
                return by_dest[path]
            s = by_link.get(path)
            if s is None:
                return by_dest.get(path)
            path = s.target if s.target.startswith("/") else f"{path.rsplit('/', 1)[0]}/{s.target}"
        return None

    mounts = list(e.mounts)
    links = []
    for s in e.symlinks:
        m = source_of(s.link) if s.link in busy else None
        if m is None:
            links.append(s)
        else:
            mounts.append(Mount(source=m.source, destination=s.link, options=m.options))
    edits = ContainerEdits(
        env=e.env,
        device_nodes=e.device_nodes,
        cgroup_rules=e.cgroup_rules,
        mounts=tuple(mounts),
        symlinks=tuple(links),
        ldcache_libraries=e.ldcache_libraries,
        ldcache_flags=e.ldcache_flags,
        hooks=e.hooks,
        proc_mask=e.proc_mask,
        cuda_compat=e.cuda_compat,
        additional_gids=e.additional_gids,
    )
    return Plan(
        plan.driver_version, plan.gpus, plan.capabilities, edits, plan.warnings, plan.drm_gpus
    )


def _device_node(hn: HostDeviceNode) -> DeviceNode:
    """The character device node ``hn`` as the container gets it: same path, numbers, mode
    and owner."""
    return DeviceNode(
        path=hn.path,
        host_path=hn.host_path,
        type="c",
        major=hn.major,
        minor=hn.minor,
        file_mode=hn.file_mode,
        uid=hn.uid,
        gid=hn.gid,
    )


def make_drm_plan(host: DrmHost, request: DrmRequest) -> Plan:
    """Compute the container edits that give a container AMD or Intel GPUs. No I/O.

    Vendor-neutral: ``host`` is what a DRM vendor backend found
    (:func:`ocihook.discovery.amd.discover`, :func:`ocihook.discovery.intel.discover`).
    The edits, as amd-container-runtime and Intel's device plugin give them:

    * device nodes: the vendor's shared nodes (``/dev/kfd``) when any GPU is selected,
      then each selected GPU's card and render node, with the host nodes' numbers, mode
      and owner — and nothing else: the device cgroup is the isolation (KFD hides a GPU
      whose render node the cgroup denies);
    * one cgroup allow rule (``rw``) per node;
    * the GPUs' links (Intel's ``/dev/dri/by-path`` links, which Level Zero reads);
    * ``additional_gids``: the nodes' host group ids (``render``, ``video``) other than 0,
      sorted, so that a non-root container user can open them;
    * env ``<VARIABLE>=void`` (spec mode), so a hook registered as well does not inject a
      second time.

    Returns:
        A :class:`Plan` with ``driver_version=""``, no NVIDIA GPUs and ``drm_gpus`` set.

    Raises:
        RequestError: an index, range or id the host does not have
            (:func:`ocihook.plan.select.select_drm_gpus`; the hint lists the GPUs).
    """
    gpus = select_drm_gpus(request, host.gpus)
    nodes: list[DeviceNode] = []
    links: list[Symlink] = []
    if gpus:
        nodes.extend(_device_node(n) for n in host.shared_nodes)
    for gpu in gpus:
        nodes.extend(_device_node(n) for n in gpu.nodes if _device_node(n) not in nodes)
        links.extend(Symlink(link=link, target=target) for link, target in gpu.links)
    edits = ContainerEdits(
        env=(f"{request.variable}=void",),
        device_nodes=tuple(nodes),
        cgroup_rules=tuple(CgroupRule(True, n.type, n.major, n.minor, "rw") for n in nodes),
        symlinks=tuple(links),
        additional_gids=tuple(sorted({n.gid for n in nodes if n.gid})),
    )
    return Plan(
        driver_version="",
        gpus=(),
        capabilities=(),
        edits=edits,
        warnings=host.warnings,
        drm_gpus=tuple((g.vendor, g.index, g.ident) for g in gpus),
    )


def _merged(first: tuple[Any, ...], second: tuple[Any, ...]) -> tuple[Any, ...]:
    return (*first, *(x for x in second if x not in first))


def merge_plans(first: Plan, second: Plan) -> Plan:
    """One plan that does what both do (a container asking for GPUs of several vendors).

    Lists are concatenated, ``first``'s entries first, without repeats; a device node or
    mount of ``second`` at a path ``first`` already has is dropped. The NVIDIA fields
    (driver version, GPUs, capabilities, ``proc_mask``, ``cuda_compat``) come from
    whichever plan has them, ``first`` preferred. No I/O.
    """
    a, b = first.edits, second.edits
    paths = {n.path for n in a.device_nodes}
    dests = {m.destination for m in a.mounts}
    edits = ContainerEdits(
        env=_merged(a.env, b.env),
        device_nodes=(*a.device_nodes, *(n for n in b.device_nodes if n.path not in paths)),
        cgroup_rules=_merged(a.cgroup_rules, b.cgroup_rules),
        mounts=(*a.mounts, *(m for m in b.mounts if m.destination not in dests)),
        symlinks=_merged(a.symlinks, b.symlinks),
        ldcache_libraries=_merged(a.ldcache_libraries, b.ldcache_libraries),
        ldcache_flags=_merged(a.ldcache_flags, b.ldcache_flags),
        hooks=_merged(a.hooks, b.hooks),
        proc_mask=a.proc_mask or b.proc_mask,
        cuda_compat=a.cuda_compat or b.cuda_compat,
        additional_gids=tuple(sorted(set(a.additional_gids) | set(b.additional_gids))),
    )
    return Plan(
        driver_version=first.driver_version or second.driver_version,
        gpus=_merged(first.gpus, second.gpus),
        capabilities=tuple(sorted(set(first.capabilities) | set(second.capabilities))),
        edits=edits,
        warnings=_merged(first.warnings, second.warnings),
        drm_gpus=_merged(first.drm_gpus, second.drm_gpus),
    )
