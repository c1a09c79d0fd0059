"""Selecting GPUs: a container's request matched against the GPUs the host has, the
first step of the plan. NVIDIA requests select whole GPUs and MIG devices
(:func:`select_devices`); AMD and Intel requests select DRM GPUs
(:func:`select_drm_gpus`). No I/O.
"""

from __future__ import annotations

from ..core.errors import RequestError
from ..core.records import Record
from ..core.vocab import parse_bus_id
from ..request.drm import DRM_VENDOR_NAMES, drm_index, drm_range
from ..request.nvidia import classify_device
from ..request.sources import ENV_VISIBLE_DEVICES

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from ..discovery.records import Gpu, MigDevice
    from ..request.drm import DrmRequest
    from ..request.nvidia import Request

__all__ = ["Selection", "select_devices", "select_drm_gpus", "select_gpus"]


class Selection(Record):
    """One requested device: a whole ``gpu``, or MIG device ``mig`` of it."""

    gpu: Gpu
    mig: MigDevice | None = None


def _mig_by_index(gpu: Gpu, j: int) -> MigDevice | None:
    """MIG device ``j`` of ``gpu``: NVML's index when known (the NVML backend), else the
    position in (GPU instance, compute instance) order, which is the order NVML lists
    them in on drivers seen so far."""
    for pos, mig in enumerate(gpu.mig_devices):
        if (mig.nvml_index if mig.nvml_index is not None else pos) == j:
            return mig
    return None


def select_devices(request: Request, gpus: Sequence[Gpu]) -> tuple[Selection, ...]:
    """Resolve a request's device list against the host's GPUs and MIG devices.

    Args:
        request: the container's request.
        gpus: the host's GPUs in index order.

    Returns:
        The selected devices in request order, each once (``all``: every GPU in index
        order; ``none``/``void``: empty).

    Raises:
        RequestError: an identifier that matches nothing (the message lists what exists),
            or a CDI name (spec mode injects those from the CDI registry before this).
    """
    if request.kind == "all":
        return tuple(Selection(g) for g in gpus)
    if request.kind != "list":
        return ()
    by_index = {g.index: g for g in gpus}
    by_uuid = {g.uuid.lower(): g for g in gpus}
    by_bus = {parse_bus_id(g.bus_id): g for g in gpus}
    field = f"{request.source}[{ENV_VISIBLE_DEVICES}]"
    selected: dict[Selection, None] = {}  # ordered, each once: linear in the request
    for item in request.devices:
        kind = classify_device(item)
        found: Selection | None = None
        if kind == "index":
            gpu = by_index.get(int(item))
            found = Selection(gpu) if gpu else None
        elif kind == "uuid":
            gpu = by_uuid.get(item.lower())
            found = Selection(gpu) if gpu else None
        elif kind == "bus-id":
            gpu = by_bus.get(parse_bus_id(item, short=True))
            found = Selection(gpu) if gpu else None
        elif kind == "mig-index":
            i, j = (int(x) for x in item.split(":"))
            gpu = by_index.get(i)
            mig = _mig_by_index(gpu, j) if gpu else None
            found = Selection(gpu, mig) if gpu and mig else None
        elif kind == "mig-uuid":
            found = _mig_by_uuid(item, gpus)
        elif kind == "cdi":
            raise RequestError(
                "CDI device names are injected from the CDI registry by spec mode, not here",
                field=field,
                value=item,
                hint="use spec mode (ocihook edit) or a CDI-aware runtime, or request the GPU "
                "by index or UUID",
            )
        if found is None:
            have = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "no GPUs"
            migs = [
                f"{g.index}:{m.nvml_index if m.nvml_index is not None else pos}"
                for g in gpus
                for pos, m in enumerate(g.mig_devices)
            ]
            if migs:
                have += "; MIG devices " + ", ".join(migs)
            raise RequestError("no such GPU", field=field, value=item, hint=f"this host has {have}")
        selected[found] = None
    return tuple(selected)


def _mig_by_uuid(item: str, gpus: Sequence[Gpu]) -> Selection | None:
    """``MIG-<uuid>`` (NVML's MIG UUID) or ``MIG-GPU-<uuid>/<gi>/<ci>`` (the older form
    naming the parent GPU and the instance ids)."""
    rest = item[4:]
    if "/" in rest:
        parent, gi, ci = rest.split("/")
        for g in gpus:
            if g.uuid.lower() == parent.lower():
                for m in g.mig_devices:
                    if (m.gi, m.ci) == (int(gi), int(ci)):
                        return Selection(g, m)
        return None
    for g in gpus:
        for m in g.mig_devices:
            if m.uuid is not None and m.uuid.lower() == item.lower():
                return Selection(g, m)
    return None


def select_gpus(request: Request, gpus: Sequence[Gpu]) -> tuple[Gpu, ...]:
    """The GPUs of :func:`select_devices` (MIG devices give their parent), each once.

    Raises:
        RequestError: see :func:`select_devices`.
    """
    return tuple(dict.fromkeys(sel.gpu for sel in select_devices(request, gpus)))


def _drm_listing(gpus: Sequence[Any]) -> str:
    """``0 (card1, renderD128, 0000:03:00.0, GPU-...); 1 (...)`` for error hints."""
    parts = []
    for g in gpus:
        bits = [b for b in (g.card_name, g.render.path.rsplit("/", 1)[-1], g.bus_id, g.uuid) if b]
        parts.append(f"{g.index} ({', '.join(bits)})")
    return "; ".join(parts) or "none"


def select_drm_gpus(request: DrmRequest, gpus: Sequence[Any]) -> tuple[Any, ...]:
    """The GPUs ``request`` names, in request order, each once.

    Args:
        request: an AMD or Intel request.
        gpus: the vendor's :class:`~ocihook.discovery.records.DrmGpu` list in index order.

    Returns:
        The selected GPUs. An AMD unique id or UUID selects every partition of that GPU.

    Raises:
        RequestError: an index or range beyond the host's GPUs, or an id no GPU has; the
            hint lists every GPU the host has (index, nodes, PCI address, UUID).
    """
    if request.kind == "all":
        return tuple(gpus)
    name = DRM_VENDOR_NAMES[request.vendor]
    field = f"{request.source}[{request.variable}]"
    chosen: dict[Any, None] = {}  # ordered, each once: linear in the request

    def missing(message: str, item: str) -> RequestError:
        return RequestError(
            message, field=field, value=item, hint=f"the host has {name} GPUs {_drm_listing(gpus)}"
        )

    for item in request.devices:
        span = drm_range(item)
        single = drm_index(item)
        if span is None and single is not None:
            span = (single, single)
        if span is not None:
            first, last = span
            if last >= len(gpus):
                raise missing(f"no {name} GPU with index {last}", item)
            matches = list(gpus[first : last + 1])
        else:
            low = item.lower()
            if low.startswith("0x"):
                number = int(low, 16)
                matches = [g for g in gpus if g.unique_id and int(g.unique_id, 16) == number]
            elif low.startswith("gpu-"):
                matches = [g for g in gpus if g.uuid and g.uuid.lower() == low]
            elif low.startswith("card"):
                matches = [g for g in gpus if g.card_name == low]
            else:
                bus = parse_bus_id(low, short=True)
                matches = [g for g in gpus if parse_bus_id(g.bus_id) == bus]
            if not matches:
                raise missing(f"no {name} GPU matches this id", item)
        chosen.update(dict.fromkeys(matches))
    return tuple(chosen)
