"""What a container asks of NVIDIA GPUs, read from the ``process.env`` of its ``config.json``.

The variables and their meaning follow the NVIDIA Container Toolkit
(``internal/config/image``) so images and manifests need no change:

``NVIDIA_VISIBLE_DEVICES``
    ``all``; ``none`` (driver files, no GPU); ``void``, empty or unset (not a GPU
    container); or a comma list of GPU indices and ``GPU-`` UUIDs (case-insensitive), each
    kept once in order, :data:`~ocihook.request.sources.MAX_REQUEST_ENTRIES` (4,096)
    entries at most (more is a :class:`RequestError`; parsing is linear in the value).
    The special values read as the toolkit's (``NewVisibleDevices`` in
    ``internal/config/image/devices.go``, after ``DevicesFromEnvvars``): a ``void`` entry
    anywhere makes the whole request void; else the *first* ``all`` or ``none`` in list
    order decides (``all,none`` is every GPU, ``none,all`` none), the entries around it
    unread. Unset
    on a *legacy* CUDA image (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` unset) means
    ``all``.
``NVIDIA_DRIVER_CAPABILITIES``
    comma list of ``utility``, ``compute`` or ``all``; unset means ``utility,compute``
    (``all`` on a legacy image); set to the empty string means ``utility,compute`` on any
    image; a value of only blanks and commas means no capability at all (as the
    toolkit). The toolkit's other capability names (``video``, ``graphics``,
    ``display``, ``ngx``, ``compat32``) are accepted; any other name is an error.

``NVIDIA_IMEX_CHANNELS``
    comma list of IMEX channel numbers (``0`` to ``2**20 - 1``, minors) or ``all``.

When a variable appears more than once in ``process.env`` the last one wins, as in the
toolkit. Parsing is pure: no file or host access. The unprivileged policy is
:mod:`ocihook.request.policy`; AMD and Intel requests are :mod:`ocihook.request.drm`.
"""

from __future__ import annotations

from ..core.errors import OcihookError, RequestError
from ..core.records import Record
from ..core.vocab import DEFAULT_CAPABILITIES, IMEX_CHANNEL_LIMIT, is_gpu_uuid, parse_bus_id
from ..core.vocab import DRIVER_CAPABILITIES as ALL_CAPABILITIES
from .policy import RequestPolicy, ignored_by_policy, policy_note
from .sources import (
    ENV_DRIVER_CAPABILITIES,
    ENV_VISIBLE_DEVICES,
    devices_from_mounts,
    env_from_spec,
    is_privileged,
    split_entries,
    volume_mount_requests,
)

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Literal

    VisibleKind = Literal["void", "none", "all", "list"]

__all__ = [
    "ALL_CAPABILITIES",
    "DEFAULT_CAPABILITIES",
    "Request",
    "classify_device",
    "request_from_env",
    "request_from_spec",
    "void_reason",
]


class Request(Record):
    """A container's GPU request. Immutable.

    Attributes:
        kind: ``"void"`` (not a GPU container: do nothing), ``"none"`` (driver files and
            control nodes, no GPU), ``"all"`` (every GPU) or ``"list"`` (``devices``).
        devices: with ``kind == "list"``, the requested ids in request order (see
            :func:`classify_device` for their forms).
        capabilities: requested driver capability names (subset of
            :data:`ALL_CAPABILITIES`).
        source: where the request came from, for messages (``"process.env"``,
            ``"mounts"``, or the swarm resource variable).
        mig_config, mig_monitor: ``NVIDIA_MIG_CONFIG_DEVICES`` / ``NVIDIA_MIG_MONITOR_DEVICES``
            is ``all`` (privileged containers only).
        imex_channels: ``NVIDIA_IMEX_CHANNELS`` entries (decimal channel numbers below
            ``2**20``, or ``all``), each once; see :attr:`imex_channel_numbers`.
        features: the feature-gated device sets asked for with ``enabled``: ``gds``,
            ``mofed``, ``nvswitch``, ``gdrcopy``.
        privileged: whether the container has ``CAP_SYS_ADMIN`` in its bounding set.
        requirements: the ``NVIDIA_REQUIRE_*`` requirements, ``(variable, Requirement)``
            (:mod:`ocihook.request.requirements`), checked when the plan is made.
    """

    kind: VisibleKind
    devices: tuple[str, ...] = ()
    capabilities: frozenset[str] = DEFAULT_CAPABILITIES
    source: str = "process.env"
    mig_config: bool = False
    mig_monitor: bool = False
    imex_channels: tuple[str, ...] = ()
    features: frozenset[str] = frozenset()
    privileged: bool = False
    requirements: tuple[tuple[str, Any], ...] = ()

    @property
    def is_void(self) -> bool:
        """True when the container asks for nothing at all."""
        return self.kind == "void"

    @property
    def imex_channel_numbers(self) -> tuple[int, ...] | Literal["all"]:
        """:attr:`imex_channels` as discovery takes them: ``"all"`` when one entry is
        ``all``, else the channel numbers."""
        if "all" in self.imex_channels:
            return "all"
        return tuple(int(c) for c in self.imex_channels)

    def replace(self, **changes: Any) -> Request:
        """A copy with ``changes`` applied."""
        values = {name: getattr(self, name) for name in self.__fields__}
        values.update(changes)
        return Request(**values)


def _parse_capabilities(raw: str | None, *, legacy: bool, field_name: str) -> frozenset[str]:
    """The capability set of ``NVIDIA_DRIVER_CAPABILITIES`` (``raw``; ``None`` = unset), as
    the NVIDIA Container Toolkit's hook decides it (``getDriverCapabilities``): unset on a
    legacy image: every capability; unset otherwise, or set to the empty string (on any
    image): ``utility,compute``; any other value: its comma-separated names, blanks around
    them dropped, so that a value of only blanks and commas means *no* capability (device
    nodes without driver files). ``all`` anywhere means every capability; an unknown name
    is refused even beside ``all`` (the toolkit ignores it there: a deliberate difference).
    Names are
    matched ignoring case (the toolkit: exact; a deliberate difference)."""
    if raw is None:
        return ALL_CAPABILITIES if legacy else DEFAULT_CAPABILITIES
    if raw == "":
        return DEFAULT_CAPABILITIES
    names = [item.strip() for item in raw.split(",") if item.strip()]
    for name in names:  # unknown names are refused beside all too (the toolkit: ignored)
        if name.lower() not in ALL_CAPABILITIES and name.lower() != "all":
            raise RequestError(
                "unknown driver capability",
                field=field_name,
                value=name,
                hint="use a comma list of " + ", ".join(sorted(ALL_CAPABILITIES)) + " or all",
            )
    if any(name.lower() == "all" for name in names):
        return ALL_CAPABILITIES
    return frozenset(name.lower() for name in names)


def request_from_env(env: Mapping[str, str], *, source: str = "process.env") -> Request:
    """Build a :class:`Request` from environment variables.

    Args:
        env: variables of the container process.
        source: where ``env`` came from, used in error fields (``process.env``).

    Raises:
        RequestError: an unknown capability or a malformed device entry.
    """
    # a legacy CUDA image (toolkit IsLegacy): CUDA_VERSION set, NVIDIA_REQUIRE_CUDA empty
    legacy = bool(env.get("CUDA_VERSION")) and not env.get("NVIDIA_REQUIRE_CUDA")
    raw = env.get(ENV_VISIBLE_DEVICES)
    field_devices = f"{source}[{ENV_VISIBLE_DEVICES}]"
    if raw is None:
        if not legacy:
            return Request(kind="void", source=source)
        raw = "all"
    items = split_entries(raw, field=field_devices)
    if not items or any(s.lower() == "void" for s in items):
        return Request(kind="void", source=source)
    capabilities = _parse_capabilities(
        env.get(ENV_DRIVER_CAPABILITIES),
        legacy=legacy,
        field_name=f"{source}[{ENV_DRIVER_CAPABILITIES}]",
    )
    lowered = [s.lower() for s in items]
    reqs: tuple[tuple[str, Any], ...] = ()
    if env.get("CUDA_VERSION") or any(k.startswith("NVIDIA_REQUIRE_") for k in env):
        from .requirements import requirements_from_env  # 1.5 ms: only when needed

        reqs = tuple(requirements_from_env(env, source=source))
    # the toolkit's reading of the special values (NewVisibleDevices): void anywhere was
    # handled above; then the first all or none in list order wins
    special = next((s for s in lowered if s in ("all", "none")), None)
    if special is not None:
        kind: VisibleKind = "all" if special == "all" else "none"
        return Request(kind=kind, capabilities=capabilities, source=source, requirements=reqs)
    for item in items:
        if classify_device(item) is None:
            raise RequestError(
                "unsupported GPU identifier",
                field=field_devices,
                value=item,
                hint="use all, none, void, GPU indices (0,1), GPU UUIDs (GPU-...), PCI bus "
                "ids (0000:3b:00.0), MIG devices (0:1 or MIG-...)",
            )
    return Request(
        kind="list",
        devices=tuple(dict.fromkeys(items)),  # each once, in order: linear
        capabilities=capabilities,
        source=source,
        requirements=reqs,
    )


def _is_gpu_uuid(text: str) -> bool:
    return is_gpu_uuid(text, any_case_prefix=True)


def classify_device(item: str) -> str | None:
    """The kind of one ``NVIDIA_VISIBLE_DEVICES`` entry, or ``None`` when it is none:

    ``"index"`` (decimal, 6 digits at most), ``"uuid"`` (``GPU-`` UUID, any case),
    ``"bus-id"`` (PCI address), ``"mig-index"`` (``i:j``: MIG device ``j`` of GPU ``i``),
    ``"mig-uuid"`` (``MIG-<uuid>`` or the older ``MIG-GPU-<uuid>/<gi>/<ci>``), ``"cdi"``
    (a fully qualified CDI device name ``vendor/class=name``). NVIDIA Container Toolkit
    ``internal/config/image`` and go-nvlib's device identifiers."""
    if item.isascii() and item.isdigit() and len(item) <= 6:
        return "index"
    if _is_gpu_uuid(item):
        return "uuid"
    i, sep, j = item.partition(":")
    if sep and all(x.isascii() and x.isdigit() and len(x) <= 6 for x in (i, j)):
        return "mig-index"
    if item.lower().startswith("mig-"):
        rest = item[4:]
        if _is_gpu_uuid(rest.split("/", 1)[0]) and rest.count("/") == 2:
            gi, ci = rest.split("/")[1:]
            if all(x.isascii() and x.isdigit() and len(x) <= 6 for x in (gi, ci)):
                return "mig-uuid"
        if _is_gpu_uuid("GPU-" + rest):
            return "mig-uuid"
    if parse_bus_id(item, short=True) is not None:  # 3b:00.0: domain 0
        return "bus-id"
    vendor_class, eq, name = item.partition("=")
    if eq and "/" in vendor_class and name:
        return "cdi"
    return None


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() == "enabled"


def void_reason(request: Request, config: Mapping[str, Any]) -> str:
    """Why ``request`` (void, from :func:`request_from_spec` on ``config``) asks for no
    GPU, for the operator's log: ``"NVIDIA_VISIBLE_DEVICES=void"``, ``"... unset"``,
    ``"... empty"``, or the unprivileged policy. Never raises."""
    if "unprivileged" in request.source:
        return policy_note(ignored_by_policy(config, RequestPolicy(accept_env_unprivileged=False)))
    try:
        env = env_from_spec(config)
    except OcihookError:
        env = {}
    var = ENV_VISIBLE_DEVICES if request.source in ("process.env", "mounts") else request.source
    names = var.split(",")  # the swarm resource variables joined
    raw = None if all(n not in env for n in names) else ",".join(env.get(n, "") for n in names)
    if raw is None:
        return f"{var} unset"
    if not raw.strip(" ,"):
        return f"{var} empty"
    return f"{var}={raw}"


def request_from_spec(
    config: Mapping[str, Any], *, path: str | None = None, policy: RequestPolicy | None = None
) -> Request:
    """The :class:`Request` of an OCI ``config.json`` document, from every source the
    NVIDIA Container Toolkit reads, in its order of precedence: device mounts under
    :data:`VOLUME_MOUNT_DIR` (when the policy accepts them), the swarm resource variable,
    then ``NVIDIA_VISIBLE_DEVICES`` (ignored for unprivileged containers when the policy
    says so). ``NVIDIA_DRIVER_CAPABILITIES``, ``NVIDIA_MIG_CONFIG_DEVICES``,
    ``NVIDIA_MIG_MONITOR_DEVICES`` (``all``, privileged containers only),
    ``NVIDIA_IMEX_CHANNELS`` and ``NVIDIA_GDS``/``MOFED``/``NVSWITCH``/``GDRCOPY``
    (``enabled``) come from the environment.

    Raises:
        SpecError: ``process.env`` is malformed.
        RequestError: the request is malformed, or asks MIG management of an unprivileged
            container.
    """
    policy = policy or RequestPolicy()
    try:
        env = env_from_spec(config, path=path)
        privileged = is_privileged(config)
        from_mounts = devices_from_mounts(config) if policy.accept_volume_mounts else []
        # the toolkit joins every swarm resource variable that is set, an empty one too
        # (then NVIDIA_VISIBLE_DEVICES is not read at all)
        swarm = [v for v in policy.swarm_resource if v in env]
        # the environment of an unprivileged container is not trusted when the operator
        # says so: neither NVIDIA_VISIBLE_DEVICES, nor the swarm variables, nor the other
        # request variables (IMEX, feature sets, MIG management)
        trusted = privileged or policy.accept_env_unprivileged
        if from_mounts:
            override = request_from_env(
                {**env, ENV_VISIBLE_DEVICES: ",".join(from_mounts)}, source="mounts"
            )
            request = override
        elif not trusted:
            request = Request(kind="void", source="process.env (unprivileged: ignored)")
        elif swarm:
            joined = ",".join(env[v] for v in swarm)
            request = request_from_env({**env, ENV_VISIBLE_DEVICES: joined}, source=",".join(swarm))
        else:  # only the source in charge is parsed: another one's errors do not count
            request = request_from_env(env)
        extras = _extras(
            env if trusted else {},
            privileged,
            config if policy.accept_volume_mounts else None,
        )
        if request.is_void and not any(extras.values()):
            return request
        if request.is_void:  # only extras: a GPU-less container with driver access
            request = request_from_env({**env, ENV_VISIBLE_DEVICES: "none"})
        return request.replace(privileged=privileged, **extras)
    except RequestError as e:
        if path is not None:
            e.with_path(path)
        raise


def _extras(
    env: Mapping[str, str], privileged: bool, config: Mapping[str, Any] | None
) -> dict[str, Any]:
    mig = {}
    for key, var in (
        ("mig_config", "NVIDIA_MIG_CONFIG_DEVICES"),
        ("mig_monitor", "NVIDIA_MIG_MONITOR_DEVICES"),
    ):
        value = env.get(var, "").strip()
        if not value:
            mig[key] = False
            continue
        if value != "all":
            raise RequestError("only 'all' is supported", field=f"process.env[{var}]", value=value)
        if not privileged:
            raise RequestError(
                "MIG management is for privileged containers only",
                field=f"process.env[{var}]",
                value=value,
                hint="run the container with CAP_SYS_ADMIN (privileged), or drop the variable",
            )
        mig[key] = True
    channels = split_entries(
        env.get("NVIDIA_IMEX_CHANNELS", ""), field="process.env[NVIDIA_IMEX_CHANNELS]"
    )
    if config is not None:
        for name in volume_mount_requests(config):
            if name.startswith("imex/"):
                channels.append(name[len("imex/") :])
    for c in channels:
        if c != "all" and not (c.isascii() and c.isdigit() and len(c) <= 7):
            raise RequestError(
                "malformed IMEX channel",
                field="process.env[NVIDIA_IMEX_CHANNELS]",
                value=c,
                hint="use channel numbers (0,1) or all",
            )
        if c != "all" and int(c) >= IMEX_CHANNEL_LIMIT:
            raise RequestError(
                "IMEX channel out of range",
                field="process.env[NVIDIA_IMEX_CHANNELS]",
                value=c,
                hint=f"a channel is an integer from 0 to {IMEX_CHANNEL_LIMIT - 1}",
            )
    features = frozenset(
        name
        for name, var in (
            ("gds", "NVIDIA_GDS"),
            ("mofed", "NVIDIA_MOFED"),
            ("nvswitch", "NVIDIA_NVSWITCH"),
            ("gdrcopy", "NVIDIA_GDRCOPY"),
        )
        if _flag(env, var)
    )
    return {**mig, "imex_channels": tuple(dict.fromkeys(channels)), "features": features}
