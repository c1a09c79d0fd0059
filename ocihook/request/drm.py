"""What a container asks of AMD and Intel GPUs: ``AMD_VISIBLE_DEVICES`` (the forms of
amd-container-runtime) and ``INTEL_VISIBLE_DEVICES`` (ocihook's own), read from
``process.env``. Parsing is pure: no file or host access; the plan stage matches the
entries against the host's GPUs (:func:`ocihook.plan.select.select_drm_gpus`).
"""

from __future__ import annotations

from ..core.errors import RequestError
from ..core.records import Record
from ..core.vocab import parse_bus_id
from .policy import env_trusted
from .sources import env_from_spec, split_entries

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from .policy import RequestPolicy

__all__ = [
    "DRM_CDI_KINDS",
    "DRM_VARIABLES",
    "DRM_VENDOR_NAMES",
    "DrmRequest",
    "drm_cdi_entries",
    "drm_index",
    "drm_range",
    "drm_request_from_env",
    "drm_requests_from_spec",
    "is_drm_cdi_name",
]

_HEX = frozenset("0123456789abcdef")

#: The variable a container names its AMD or Intel GPUs in, by vendor.
#: ``AMD_VISIBLE_DEVICES`` is amd-container-runtime's; ``INTEL_VISIBLE_DEVICES`` is
#: ocihook's own (Intel ships no container runtime that reads an env variable).
DRM_VARIABLES = {"amd": "AMD_VISIBLE_DEVICES", "intel": "INTEL_VISIBLE_DEVICES"}
#: The CDI kind of each vendor's GPUs (amd-ctk; Intel's DRA driver).
DRM_CDI_KINDS = {"amd": "amd.com/gpu", "intel": "intel.com/gpu"}
#: The vendors' names, for messages.
DRM_VENDOR_NAMES = {"amd": "AMD", "intel": "Intel"}
_FORMS = {
    "amd": "'all', indices '0,1', ranges '0-3', unique ids '0x...' or UUIDs 'GPU-...'",
    "intel": "'all', indices '0,1', ranges '0-3', 'card<N>' or PCI addresses 'DDDD:BB:DD.F'",
}


class DrmRequest(Record):
    """A container's request for AMD or Intel GPUs. Immutable.

    Attributes:
        vendor: ``"amd"`` or ``"intel"``.
        kind: ``"all"`` or ``"list"`` (a request for nothing is not made at all).
        devices: with ``"list"``, the entries in request order, each checked to have one of
            the vendor's forms (see :func:`drm_request_from_env`).
        source: where it came from, for messages (``"process.env"``).
    """

    vendor: str
    kind: str
    devices: tuple[str, ...] = ()
    source: str = "process.env"

    @property
    def variable(self) -> str:
        """The variable the request was read from (``AMD_VISIBLE_DEVICES``)."""
        return DRM_VARIABLES[self.vendor]


def drm_index(text: str) -> int | None:
    """A decimal GPU index of an entry; one of more than 9 digits counts as 10**9 (no host has that
    many GPUs, and :func:`int` refuses over 4300 digits); ``None`` if not decimal."""
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= 9 else 10**9


def drm_range(item: str) -> tuple[int, int] | None:
    """``(a, b)`` of a range entry ``a-b`` (both ends decimal, read as :func:`drm_index`),
    else ``None``."""
    first, sep, last = item.partition("-")
    a, b = drm_index(first), drm_index(last)
    if sep and a is not None and b is not None:
        return a, b
    return None


def _drm_item_ok(vendor: str, item: str) -> bool:
    """Whether ``item`` has one of ``vendor``'s entry forms (ranges checked apart)."""
    if item.isascii() and item.isdigit():
        return True
    low = item.lower()
    if vendor == "amd":
        if low.startswith("0x"):
            return 2 < len(low) <= 18 and set(low[2:]) <= _HEX
        return low.startswith("gpu-") and len(low) == 20 and set(low[4:]) <= _HEX
    if low.startswith("card"):
        return low[4:].isascii() and low[4:].isdigit()
    return parse_bus_id(low, short=True) is not None


def is_drm_cdi_name(item: str) -> bool:
    """Whether a ``*_VISIBLE_DEVICES`` entry is meant as a CDI name (holds ``=`` or ``/``);
    such entries are the CDI registry's to resolve, not the host's."""
    return "=" in item or "/" in item


def drm_request_from_env(
    vendor: str, env: Mapping[str, str], *, source: str = "process.env"
) -> DrmRequest | None:
    """Read ``vendor``'s request from a container's environment.

    ``AMD_VISIBLE_DEVICES`` (amd-container-runtime's forms) and ``INTEL_VISIBLE_DEVICES``:
    unset, empty, ``void`` or ``none`` (anywhere in the list) ask for nothing; ``all``
    asks for every GPU; otherwise a comma list of entries, spaces around them ignored:

    * indices ``2`` and ranges ``0-3`` (both ends included, first <= last), both vendors;
    * AMD: unique ids ``0x1a2b...`` (the KFD ``unique_id`` in hex, up to 16 digits) and
      UUIDs ``GPU-`` + 16 hex digits, any case;
    * Intel: ``card<N>`` and PCI addresses ``DDDD:BB:DD.F``;
    * qualified CDI names (``amd.com/gpu=0``) are left to the CDI path
      (:func:`ocihook.pipeline.cdinames.cdi_device_names`) and skipped here.

    Args:
        vendor: ``"amd"`` or ``"intel"``.
        env: the container's environment (see :func:`env_from_spec`).
        source: where ``env`` came from, for messages.

    Returns:
        A :class:`DrmRequest`, or ``None`` when nothing is asked for.

    Raises:
        RequestError: an entry of no accepted form, or a range that runs backwards
            (``field`` = ``<source>[<variable>]``, ``value`` = the entry).
    """
    variable = DRM_VARIABLES[vendor]
    raw = env.get(variable)
    if raw is None:
        return None
    items = split_entries(raw, field=f"{source}[{variable}]")
    if not items or any(i in ("void", "none") for i in items):
        return None
    if "all" in items:
        return DrmRequest(vendor, "all", (), source)
    devices: list[str] = []
    for item in items:
        if is_drm_cdi_name(item):
            continue
        span = drm_range(item)
        if span is not None and span[0] > span[1]:
            raise RequestError(
                f"{DRM_VENDOR_NAMES[vendor]} GPU range runs backwards",
                field=f"{source}[{variable}]",
                value=item,
                hint="write ranges low-high, e.g. 0-3",
            )
        if span is None and not _drm_item_ok(vendor, item):
            raise RequestError(
                f"malformed {DRM_VENDOR_NAMES[vendor]} GPU entry",
                field=f"{source}[{variable}]",
                value=item,
                hint=f"accepted: {_FORMS[vendor]}",
            )
        devices.append(item)
    if not devices:
        return None
    return DrmRequest(vendor, "list", tuple(devices), source)


def drm_requests_from_spec(
    config: Mapping[str, Any], *, path: str | None = None, policy: RequestPolicy | None = None
) -> tuple[DrmRequest, ...]:
    """The AMD and Intel requests of a ``config.json`` document, in
    :data:`DRM_VARIABLES` order (see :func:`drm_request_from_env`); ``()`` when
    ``policy`` ignores the environment of this (unprivileged) container
    (:func:`env_trusted`; :func:`ignored_by_policy` says so).

    Raises:
        SpecError: ``process.env`` has the wrong JSON type.
        RequestError: a malformed entry (``path`` set to ``path``).
    """
    env = env_from_spec(config, path=path)
    if not env_trusted(config, policy):
        return ()
    found = []
    for vendor in DRM_VARIABLES:
        try:
            req = drm_request_from_env(vendor, env)
        except RequestError as e:
            raise e.with_path(path) if path else e from None
        if req is not None:
            found.append(req)
    return tuple(found)


def drm_cdi_entries(
    config: Mapping[str, Any], *, policy: RequestPolicy | None = None
) -> tuple[tuple[str, str], ...]:
    """The qualified CDI names (``amd.com/gpu=0``) among the ``AMD_VISIBLE_DEVICES`` and
    ``INTEL_VISIBLE_DEVICES`` entries of a ``config.json`` document, as ``(variable,
    entry)``: what :func:`drm_request_from_env` leaves to the CDI path, for the hook modes
    (which have none) to refuse rather than drop. ``()`` when ``policy`` ignores the
    container's environment, or when a variable asks for nothing (``void``, ``none``).

    Raises:
        SpecError: ``process.env`` has the wrong JSON type.
        RequestError: a variable's list is malformed (as :func:`split_entries`).
    """
    env = env_from_spec(config)
    if not env_trusted(config, policy):
        return ()
    found = []
    for variable in DRM_VARIABLES.values():
        raw = env.get(variable)
        if raw is None:
            continue
        items = split_entries(raw, field=f"process.env[{variable}]")
        if any(i in ("void", "none") for i in items):
            continue
        found += [(variable, i) for i in items if is_drm_cdi_name(i)]
    return tuple(found)
