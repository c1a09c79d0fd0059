"""Compiled edits: the plan for a request, made once per host state and then replayed.

Planning a GPU container — discovering the driver's files (even from the discovery
store), choosing GPUs and libraries, laying them out for the image — gives the same
:class:`~ocihook.plan.edits.Plan` for every container that asks the same thing of the
same host. :func:`compiled_plan` keeps that plan in the root-owned store
:mod:`ocihook.linux.cachestore` (entries ``compiled-*.entry`` in ``/run/ocihook``) under a
key of everything the plan depends on, and a later start replays it without importing
discovery or the planner:

* the host: the discovery key (:func:`ocihook.discovery.cache.discovery_key`, the same
  facts that keep a discovery result fresh: the host root's driver, dev, proc and sys
  roots, the driver version, ``/proc/devices``, the GPUs, the ``nvidia*`` nodes, the MIG
  configuration, the DRM state for graphics, the loader cache's identity, the IPC
  sockets), and the directories discovery read the driver's files from or searched for
  them without finding them (:func:`ocihook.discovery.nvidia.discovery_dirs`: an entry
  is stale once one changes);
* the request (:class:`~ocihook.request.nvidia.Request`, every field, requirements
  included);
* the operator's settings that shape a plan: ``cuda-compat``, ``disable-require`` and
  the supported capabilities;
* the image's kind: the Debian multiarch layout or the generic one
  (:func:`ocihook.pipeline.bundle.layout_for_rootfs`);
* the installed code of the planner and of discovery (an upgrade replaces their files).

What depends on the particular root file system is decided on every start, after the
lookup: links the image holds as regular files become mounts
(:func:`ocihook.pipeline.bundle.occupied_links`), and the appliers then do their own
checks of the image as they always do. So a replayed plan edits ``config.json`` and the
root file system exactly as a freshly made one.

Not compiled (planned afresh each time, as before): requests that read the host beyond
that key — MIG management nodes, IMEX channels and the feature-gated sets (GDS, MOFED,
NVSwitch, GDRCopy) — and AMD and Intel GPUs (their discovery is not stored). A plan that
cannot be made (the request cannot be met) is never stored, nor one for a request whose
encoding is over :data:`MAX_REQUEST_BYTES` (16 KiB).
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from ..config.options import Options
    from ..core.hostroot import HostRoot
    from ..core.records import Record
    from ..plan.edits import Plan
    from ..request.nvidia import Request

__all__ = ["FORMAT", "MAX_REQUEST_BYTES", "PREFIX", "compilable", "compiled_plan", "plan_key"]

#: Version of the entries' key and value format.
FORMAT = 1
#: The file-name prefix of compiled entries in the store.
PREFIX = "compiled"
#: Most compiled entries kept (one per distinct request, host state and image kind).
MAX_ENTRIES = 256
#: Largest request (the JSON text of its encoding in the key, bytes) whose plan is
#: stored: a larger one (thousands of device ids, ``NVIDIA_REQUIRE_*`` variables) is
#: planned afresh on every start and never stored, so that entries, and the key each
#: lookup writes out and compares, stay small.
MAX_REQUEST_BYTES = 16 << 10


def compilable(request: Request) -> bool:
    """Whether the plan for ``request`` depends on nothing but :func:`plan_key`: not a
    void request, and none of the parts read from the host on demand (MIG management
    nodes, IMEX channels, feature-gated device sets; :mod:`ocihook.pipeline.extras`)."""
    return not (
        request.is_void
        or request.mig_config
        or request.mig_monitor
        or request.imex_channels
        or request.features
    )


def _code_identity() -> list[object]:
    """The identity (device, inode, mtime_ns) of the installed planner's and pipeline's
    directories: a new version of the code makes every entry a miss."""
    here = os.path.dirname(os.path.abspath(__file__))
    out: list[object] = []
    for d in (here, os.path.join(os.path.dirname(here), "plan")):
        try:
            st = os.stat(d)
        except OSError:
            out.append(None)
            continue
        out.append([st.st_dev, st.st_ino, st.st_mtime_ns])
    return out


def plan_key(root: HostRoot, request: Request, options: Options, debian: bool) -> dict[str, object]:
    """The key of the plan for ``request`` on the host ``root`` with ``options``, for an
    image of the Debian layout or not (``debian``): see the module docstring.

    Raises:
        OSError: the host cannot be read (the caller plans without the store)."""
    from ..core.vocab import DRIVER_CAPABILITIES
    from ..discovery.cache import discovery_key
    from ..linux.cachestore import encode

    caps = sorted(request.capabilities & DRIVER_CAPABILITIES)
    supported = None if options.supported is None else sorted(options.supported)
    return {
        "format": FORMAT,
        "code": _code_identity(),
        "host": discovery_key(root, caps),
        "request": encode(request),
        "settings": [options.cuda_compat, options.check_requirements, supported],
        "debian": debian,
    }


def _types() -> dict[str, type[Record]]:
    """The record classes a stored plan is made of, by name."""
    from ..plan import edits
    from ..plan.compat import CudaCompat

    classes: list[type[Record]] = [
        edits.Plan,
        edits.ContainerEdits,
        edits.DeviceNode,
        edits.CgroupRule,
        edits.Mount,
        edits.Symlink,
        edits.Hook,
        edits.IntelRdt,
        edits.NetDevice,
        edits.ProcMask,
        CudaCompat,
    ]
    return {c.__name__: c for c in classes}


def compiled_plan(
    root: HostRoot,
    request: Request,
    options: Options,
    debian: bool,
    *,
    cache_dir: str | None = None,
) -> Plan:
    """The plan for ``request`` (:func:`compilable`) on ``root`` for an image of the
    Debian layout or not (``debian``), before the image's own files are looked at
    (:func:`ocihook.pipeline.bundle.occupied_links` comes after): the stored one when
    :func:`plan_key` finds it, else made with discovery and
    :func:`ocihook.plan.build.make_plan` and stored when ``cache_dir`` (default
    :func:`ocihook.linux.cachestore.store_dir`) exists. A request over
    :data:`MAX_REQUEST_BYTES` is planned afresh, without the store. The store never
    makes it fail.

    Raises:
        DiscoveryError: the host has no usable driver.
        RequestError: the request cannot be met.
    """
    from ..core import jsonfast
    from ..linux import cachestore
    from ..plan.edits import Plan

    directory = cache_dir or cachestore.store_dir()
    try:
        key: dict[str, object] | None = plan_key(root, request, options, debian)
    except OSError:
        key = None
    if key is not None and len(jsonfast.dumps(key["request"])) > MAX_REQUEST_BYTES:
        key = None  # ASCII JSON: characters are bytes
    if key is not None:
        found = cachestore.lookup(key, _types(), directory, prefix=PREFIX)
        if isinstance(found, Plan):
            return found
    plan, dirs = _make(root, request, options, debian, directory)
    if key is not None and os.path.isdir(directory):
        cachestore.store(key, plan, dirs, directory, prefix=PREFIX, max_entries=MAX_ENTRIES)
    return plan


def _make(
    root: HostRoot, request: Request, options: Options, debian: bool, directory: str
) -> tuple[Plan, list[str]]:
    """The plan made by the pipeline, and the host directories it was read from."""
    from ..discovery.nvidia import SUPPORTED_CAPABILITIES, discover_cached, discovery_dirs
    from ..plan.build import ContainerLayout, make_plan
    from .extras import request_device_nodes, request_mounts

    host = discover_cached(
        root, capabilities=request.capabilities & SUPPORTED_CAPABILITIES, cache_dir=directory
    )
    plan = make_plan(
        host,
        request,
        ContainerLayout.for_image(debian),
        request_device_nodes(host, request),
        request_mounts(host, request),
        cuda_compat=options.cuda_compat,
        check_requirements=options.check_requirements,
        supported=options.supported,
    )
    return plan, discovery_dirs(host)
