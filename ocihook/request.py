"""What a container asks for, read from the ``process.env`` of its ``config.json``.

The variables and their meaning follow the NVIDIA Container Toolkit
(``internal/config/image``) so images and manifests need no change:

``NVIDIA_VISIBLE_DEVICES``
    ``all``; ``none`` (driver files, no GPU); ``void``, empty or unset (not a GPU
    container); or a comma list of GPU indices and ``GPU-`` UUIDs (case-insensitive).
    Any ``void`` entry makes the whole request void. Unset on a *legacy* CUDA image
    (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` unset) means ``all``.
``NVIDIA_DRIVER_CAPABILITIES``
    comma list of ``utility``, ``compute`` or ``all``; unset or empty means
    ``utility,compute`` (``all`` on a legacy image). The toolkit's other capability names
    (``video``, ``graphics``, ``display``, ``ngx``, ``compat32``) are accepted and reported
    as not yet provided; any other name is an error.

When a variable appears more than once in ``process.env`` the last one wins, as in the
toolkit. Parsing is pure: no file or host access.
"""

from __future__ import annotations

from .errors import RequestError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any, Literal

    from .discovery.nvidia import Gpu

    VisibleKind = Literal["void", "none", "all", "list"]

__all__ = [
    "ALL_CAPABILITIES",
    "DEFAULT_CAPABILITIES",
    "Request",
    "env_from_spec",
    "parse_env",
    "request_from_env",
    "request_from_spec",
    "select_gpus",
]

ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"

#: Every driver capability name the NVIDIA Container Toolkit knows.
ALL_CAPABILITIES: frozenset[str] = frozenset(
    {"compat32", "compute", "display", "graphics", "ngx", "utility", "video"}
)
#: Capabilities when ``NVIDIA_DRIVER_CAPABILITIES`` is unset or empty.
DEFAULT_CAPABILITIES: frozenset[str] = frozenset({"utility", "compute"})

_HEX = frozenset("0123456789abcdef")


def _is_gpu_uuid(text: str) -> bool:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` in any case (no regex: import cost)."""
    t = text.lower()
    if not t.startswith("gpu-"):
        return False
    groups = t[4:].split("-")
    return [len(g) for g in groups] == [8, 4, 4, 4, 12] and all(set(g) <= _HEX for g in groups)


class Request:
    """A container's GPU request. Immutable.

    Attributes:
        kind: ``"void"`` (not a GPU container: do nothing), ``"none"`` (driver files and
            control nodes, no GPU), ``"all"`` (every GPU) or ``"list"`` (``devices``).
        devices: with ``kind == "list"``, the requested ids in request order: decimal
            indices (``"0"``) and UUIDs (``"GPU-..."`` as written).
        capabilities: requested driver capability names (subset of
            :data:`ALL_CAPABILITIES`).
        source: where the request came from, for messages (``"process.env"``).
    """

    __slots__ = ("capabilities", "devices", "kind", "source")
    kind: VisibleKind
    devices: tuple[str, ...]
    capabilities: frozenset[str]
    source: str

    def __init__(
        self,
        kind: VisibleKind,
        devices: tuple[str, ...] = (),
        capabilities: frozenset[str] = DEFAULT_CAPABILITIES,
        source: str = "process.env",
    ) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "devices", tuple(devices))
        object.__setattr__(self, "capabilities", frozenset(capabilities))
        object.__setattr__(self, "source", source)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Request is immutable")

    def _key(self) -> tuple[str, tuple[str, ...], frozenset[str], str]:
        return (self.kind, self.devices, self.capabilities, self.source)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Request) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"Request(kind={self.kind!r}, devices={self.devices!r}, "
            f"capabilities={sorted(self.capabilities)!r}, source={self.source!r})"
        )

    @property
    def is_void(self) -> bool:
        """True when the container asks for nothing at all."""
        return self.kind == "void"


def parse_env(env: Iterable[str]) -> dict[str, str]:
    """Turn an OCI ``process.env`` list (``KEY=value`` strings) into a dict; last wins.

    Entries without ``=`` are ignored, as runc does.
    """
    out: dict[str, str] = {}
    for item in env:
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    return out


def _parse_capabilities(raw: str | None, *, legacy: bool, field_name: str) -> frozenset[str]:
    if raw is None or raw.strip() == "":
        return ALL_CAPABILITIES if legacy else DEFAULT_CAPABILITIES
    caps: set[str] = set()
    everything = False
    for item in raw.split(","):
        name = item.strip().lower()
        if not name:
            continue
        if name == "all":
            everything = True
            continue
        if name not in ALL_CAPABILITIES:
            raise RequestError(
                "unknown driver capability",
                field=field_name,
                value=item.strip(),
                hint="use a comma list of " + ", ".join(sorted(ALL_CAPABILITIES)) + " or all",
            )
        caps.add(name)
    return ALL_CAPABILITIES if everything else frozenset(caps)


def request_from_env(env: Mapping[str, str], *, source: str = "process.env") -> Request:
    """Build a :class:`Request` from environment variables.

    Args:
        env: variables of the container process.
        source: where ``env`` came from, used in error fields (``process.env``).

    Raises:
        RequestError: an unknown capability or a malformed device entry.
    """
    legacy = "CUDA_VERSION" in env and "NVIDIA_REQUIRE_CUDA" not in env
    raw = env.get(ENV_VISIBLE_DEVICES)
    field_devices = f"{source}[{ENV_VISIBLE_DEVICES}]"
    if raw is None:
        if not legacy:
            return Request(kind="void", source=source)
        raw = "all"
    items = [s.strip() for s in raw.split(",") if s.strip()]
    if not items or any(s.lower() == "void" for s in items):
        return Request(kind="void", source=source)
    capabilities = _parse_capabilities(
        env.get(ENV_DRIVER_CAPABILITIES),
        legacy=legacy,
        field_name=f"{source}[{ENV_DRIVER_CAPABILITIES}]",
    )
    lowered = [s.lower() for s in items]
    if "all" in lowered:
        return Request(kind="all", capabilities=capabilities, source=source)
    if lowered == ["none"]:
        return Request(kind="none", capabilities=capabilities, source=source)
    devices: list[str] = []
    for item in items:
        if (item.isascii() and item.isdigit() and len(item) <= 6) or _is_gpu_uuid(item):
            if item not in devices:
                devices.append(item)
            continue
        raise RequestError(
            "unsupported GPU identifier",
            field=field_devices,
            value=item,
            hint="use all, none, void, GPU indices (0,1) or GPU UUIDs (GPU-...)",
        )
    return Request(kind="list", devices=tuple(devices), capabilities=capabilities, source=source)


def env_from_spec(config: Mapping[str, Any], *, path: str | None = None) -> dict[str, str]:
    """Return ``process.env`` of an OCI ``config.json`` document as a dict.

    Raises:
        SpecError: ``process`` or ``process.env`` has the wrong JSON type.
    """
    from .errors import SpecError

    process = config.get("process")
    if process is None:
        return {}
    if not isinstance(process, dict):
        raise SpecError("process must be an object", path=path, field="process")
    env = process.get("env", [])
    if env is None:
        return {}
    if not isinstance(env, list) or not all(isinstance(e, str) for e in env):
        raise SpecError("process.env must be a list of strings", path=path, field="process.env")
    return parse_env(env)


def request_from_spec(config: Mapping[str, Any], *, path: str | None = None) -> Request:
    """The :class:`Request` of an OCI ``config.json`` document (its ``process.env``).

    Raises:
        SpecError: ``process.env`` is malformed.
        RequestError: the request itself is malformed (see :func:`request_from_env`).
    """
    try:
        return request_from_env(env_from_spec(config, path=path))
    except RequestError as e:
        if path is not None:
            e.with_path(path)
        raise


def select_gpus(request: Request, gpus: Sequence[Gpu]) -> tuple[Gpu, ...]:
    """Resolve a request's device list against the host's GPUs.

    Args:
        request: the container's request.
        gpus: the host's GPUs in index order.

    Returns:
        The selected GPUs in request order (``all``: index order; ``none``/``void``: empty).

    Raises:
        RequestError: an index or UUID that matches no GPU; the message lists what exists.
    """
    if request.kind == "all":
        return tuple(gpus)
    if request.kind != "list":
        return ()
    by_index = {str(g.index): g for g in gpus}
    by_uuid = {g.uuid.lower(): g for g in gpus}
    selected: list[Gpu] = []
    for item in request.devices:
        # digits were checked to be ASCII when the request was parsed
        gpu = by_index.get(str(int(item))) if item.isdigit() else by_uuid.get(item.lower())
        if gpu is None:
            have = ", ".join(f"{g.index} ({g.uuid})" for g in gpus) or "no GPUs"
            raise RequestError(
                "no such GPU",
                field=f"{request.source}[{ENV_VISIBLE_DEVICES}]",
                value=item,
                hint=f"this host has {have}",
            )
        if gpu not in selected:
            selected.append(gpu)
    return tuple(selected)
