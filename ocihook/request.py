"""What a container asks for, read from the ``process.env`` of its ``config.json``.

The variables and their meaning follow the NVIDIA Container Toolkit
(``internal/config/image``) so images and manifests need no change:

``NVIDIA_VISIBLE_DEVICES``
    ``all``; ``none`` (driver files, no GPU); ``void``, empty or unset (not a GPU
    container); or a comma list of GPU indices and ``GPU-`` UUIDs (case-insensitive).
    The special values rank as the toolkit's: any ``void`` entry makes the whole request
    void, else any ``none`` makes it ``none``, else any ``all`` makes it ``all``. Unset
    on a *legacy* CUDA image (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` unset) means
    ``all``.
``NVIDIA_DRIVER_CAPABILITIES``
    comma list of ``utility``, ``compute`` or ``all``; unset means ``utility,compute``
    (``all`` on a legacy image); set to the empty string means ``utility,compute`` on any
    image; a value of only blanks and commas means no capability at all (as the
    toolkit). The toolkit's other capability names (``video``, ``graphics``,
    ``display``, ``ngx``, ``compat32``) are accepted; any other name is an error.

When a variable appears more than once in ``process.env`` the last one wins, as in the
toolkit. Parsing is pure: no file or host access.
"""

from __future__ import annotations

from .core.errors import OcihookError, RequestError
from .core.records import Record
from .core.vocab import (
    DEFAULT_CAPABILITIES,
    VOLUME_MOUNT_DIR,
    is_gpu_uuid,
    parse_bus_id,
    sysfs_bus_id,
)
from .core.vocab import DRIVER_CAPABILITIES as ALL_CAPABILITIES

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any, Literal

    from .discovery.records import Gpu, MigDevice

    VisibleKind = Literal["void", "none", "all", "list"]

__all__ = [
    "ALL_CAPABILITIES",
    "ANNOTATION_POLICY_KEY",
    "DEFAULT_CAPABILITIES",
    "DRM_CDI_KINDS",
    "DRM_VARIABLES",
    "ENV_POLICY_KEY",
    "REQUEST_VARIABLES",
    "VOLUME_MOUNT_DIR",
    "DrmRequest",
    "Request",
    "RequestPolicy",
    "Selection",
    "annotations_trusted",
    "classify_device",
    "drm_request_from_env",
    "drm_requests_from_spec",
    "env_from_spec",
    "env_trusted",
    "ignored_by_policy",
    "is_drm_cdi_name",
    "is_privileged",
    "parse_env",
    "policy_note",
    "request_from_env",
    "request_from_spec",
    "select_devices",
    "select_drm_gpus",
    "select_gpus",
    "void_reason",
]

ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"

_HEX = frozenset("0123456789abcdef")


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
        imex_channels: ``NVIDIA_IMEX_CHANNELS`` entries (channel numbers or ``all``).
        features: the feature-gated device sets asked for with ``enabled``: ``gds``,
            ``mofed``, ``nvswitch``, ``gdrcopy``.
        privileged: whether the container has ``CAP_SYS_ADMIN`` in its bounding set.
        requirements: the ``NVIDIA_REQUIRE_*`` requirements, ``(variable, Requirement)``
            (:mod:`ocihook.requirements`), checked when the plan is made.
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

    def replace(self, **changes: Any) -> Request:
        """A copy with ``changes`` applied."""
        values = {name: getattr(self, name) for name in self.__fields__}
        values.update(changes)
        return Request(**values)


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
    items = [s.strip() for s in raw.split(",") if s.strip()]
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
    # the toolkit's precedence of the special values: void > none > all > a device list
    if "none" in lowered:
        return Request(kind="none", capabilities=capabilities, source=source, requirements=reqs)
    if "all" in lowered:
        return Request(kind="all", capabilities=capabilities, source=source, requirements=reqs)
    devices: list[str] = []
    for item in items:
        if classify_device(item) is None:
            raise RequestError(
                "unsupported GPU identifier",
                field=field_devices,
                value=item,
                hint="use all, none, void, GPU indices (0,1), GPU UUIDs (GPU-...), PCI bus "
                "ids (0000:3b:00.0), MIG devices (0:1 or MIG-...)",
            )
        if item not in devices:
            devices.append(item)
    return Request(
        kind="list",
        devices=tuple(devices),
        capabilities=capabilities,
        source=source,
        requirements=reqs,
    )


def _is_gpu_uuid(text: str) -> bool:
    return is_gpu_uuid(text, any_case_prefix=True)


def _is_bus_id(text: str) -> bool:
    """``0000:3b:00.0``, ``00000000:3B:00.0`` or ``3b:00.0`` (domain 0)."""
    return parse_bus_id(text, short=True) is not None


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
    if _is_bus_id(item):
        return "bus-id"
    vendor_class, eq, name = item.partition("=")
    if eq and "/" in vendor_class and name:
        return "cdi"
    return None


def env_from_spec(config: Mapping[str, Any], *, path: str | None = None) -> dict[str, str]:
    """Return ``process.env`` of an OCI ``config.json`` document as a dict.

    Raises:
        SpecError: ``process`` or ``process.env`` has the wrong JSON type.
    """
    from .core.errors import SpecError

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


class RequestPolicy(Record):
    """What an operator lets containers ask by, and how (toolkit ``config.toml`` keys).

    Attributes:
        accept_env_unprivileged: honour the request variables of containers without
            ``CAP_SYS_ADMIN`` (``accept-nvidia-visible-devices-envvar-when-unprivileged``,
            default true). When false, every vendor's variables of such a container are
            ignored — ``NVIDIA_VISIBLE_DEVICES`` and the other ``NVIDIA_*`` request
            variables, the swarm variables, ``AMD_VISIBLE_DEVICES``,
            ``INTEL_VISIBLE_DEVICES`` — and :func:`ignored_by_policy` names them.
        accept_volume_mounts: read the device list from mounts under
            ``/var/run/nvidia-container-devices`` (``accept-nvidia-visible-devices-as-volume-
            mounts``, default false) — the way for clusters that cannot trust env.
        swarm_resource: names of variables Docker Swarm sets for generic resources
            (``swarm-resource``, e.g. ``DOCKER_RESOURCE_GPU``); the first set one is read
            before ``NVIDIA_VISIBLE_DEVICES``.
        accept_annotations_unprivileged: honour CDI request annotations
            (``cdi.k8s.io/...``) of containers without ``CAP_SYS_ADMIN``
            (``accept-cdi-annotations-when-unprivileged``, ocihook's own, default true as
            the toolkit, which never checks privilege for annotations).
    """

    accept_env_unprivileged: bool = True
    accept_volume_mounts: bool = False
    swarm_resource: tuple[str, ...] = ()
    accept_annotations_unprivileged: bool = True


#: The configuration keys of the unprivileged policy, for messages.
ENV_POLICY_KEY = "accept-nvidia-visible-devices-envvar-when-unprivileged"
ANNOTATION_POLICY_KEY = "accept-cdi-annotations-when-unprivileged"

#: Every ``process.env`` variable that asks for devices (the swarm variables of the
#: policy come on top), in message order.
REQUEST_VARIABLES = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
    "NVIDIA_GDS",
    "NVIDIA_MOFED",
    "NVIDIA_NVSWITCH",
    "NVIDIA_GDRCOPY",
    "AMD_VISIBLE_DEVICES",
    "INTEL_VISIBLE_DEVICES",
)


def env_trusted(config: Mapping[str, Any], policy: RequestPolicy | None) -> bool:
    """Whether the request variables of ``config``'s container are honoured: it is
    privileged (:func:`is_privileged`) or ``policy.accept_env_unprivileged`` (``None``:
    the default policy, which honours them)."""
    return policy is None or policy.accept_env_unprivileged or is_privileged(config)


def annotations_trusted(config: Mapping[str, Any], policy: RequestPolicy | None) -> bool:
    """Whether the CDI request annotations of ``config``'s container are honoured (see
    :attr:`RequestPolicy.accept_annotations_unprivileged`)."""
    return policy is None or policy.accept_annotations_unprivileged or is_privileged(config)


def ignored_by_policy(
    config: Mapping[str, Any],
    policy: RequestPolicy | None,
    annotation_prefixes: Sequence[str] = ("cdi.k8s.io/",),
) -> tuple[str, ...]:
    """The requests of ``config`` that ``policy`` ignores because the container is
    unprivileged, for messages: the names of the request variables set to a non-empty
    value (:data:`REQUEST_VARIABLES`, the swarm variables; ``CUDA_VERSION`` of a legacy
    CUDA image, which asks for every GPU), then ``annotations[<key>]`` of each CDI
    request annotation. ``()`` when nothing is ignored. Never raises."""
    out: list[str] = []
    if not env_trusted(config, policy):
        try:
            env = env_from_spec(config)
        except OcihookError:
            env = {}
        swarm = policy.swarm_resource if policy is not None else ()
        out += [v for v in (*REQUEST_VARIABLES, *swarm) if env.get(v, "").strip(" ,")]
        legacy = env.get("CUDA_VERSION") and not env.get("NVIDIA_REQUIRE_CUDA")
        if ENV_VISIBLE_DEVICES not in env and legacy:
            out.append("CUDA_VERSION (a legacy CUDA image asks for all GPUs)")
    if not annotations_trusted(config, policy):
        annotations = config.get("annotations")
        if isinstance(annotations, dict):
            out += [
                f"annotations[{k}]"
                for k in annotations
                if isinstance(k, str) and any(k.startswith(p) for p in annotation_prefixes)
            ]
    return tuple(dict.fromkeys(out))


def policy_note(ignored: Sequence[str]) -> str:
    """The message for :func:`ignored_by_policy`'s list: ``"AMD_VISIBLE_DEVICES ignored:
    unprivileged container (no CAP_SYS_ADMIN in its bounding set) and
    accept-nvidia-visible-devices-envvar-when-unprivileged = false"``, naming the setting
    (or settings) that ignored them."""
    keys = []
    if any(not i.startswith("annotations[") for i in ignored):
        keys.append(f"{ENV_POLICY_KEY} = false")
    if any(i.startswith("annotations[") for i in ignored):
        keys.append(f"{ANNOTATION_POLICY_KEY} = false")
    return (
        f"{', '.join(ignored)} ignored by policy: unprivileged container (no CAP_SYS_ADMIN "
        f"in its bounding set) and {' and '.join(keys)}"
    )


#: Where device requests as volume mounts point (``/dev/null`` mounted at
#: ``<dir>/<device>``; NVIDIA Container Toolkit ``internal/config/image``).


def is_privileged(config: Mapping[str, Any]) -> bool:
    """Whether the container keeps ``CAP_SYS_ADMIN`` in its bounding set (the toolkit's
    test for a privileged container)."""
    process = config.get("process")
    caps = process.get("capabilities") if isinstance(process, dict) else None
    bounding = caps.get("bounding") if isinstance(caps, dict) else None
    return isinstance(bounding, list) and "CAP_SYS_ADMIN" in bounding


def _request_mounts(config: Mapping[str, Any]) -> list[str]:
    """The names under :data:`VOLUME_MOUNT_DIR` of the mounts that are device requests:
    ``/dev/null`` mounted there (source and destination cleaned, as the toolkit does). Any
    other mount at that path — a tmpfs or emptyDir a user adds — is not a request: the
    mount source is what a cluster's device plugin controls and a user does not."""
    import posixpath

    out: list[str] = []
    mounts = config.get("mounts")
    if not isinstance(mounts, list):
        return out
    prefix = VOLUME_MOUNT_DIR + "/"
    for m in mounts:
        if not isinstance(m, dict):
            continue
        dest, source = m.get("destination"), m.get("source")
        if not isinstance(dest, str) or not isinstance(source, str):
            continue
        if "/" + posixpath.normpath(source).lstrip("/") != "/dev/null":
            continue
        dest = "/" + posixpath.normpath(dest).lstrip("/")  # normpath keeps a leading "//"
        if dest.startswith(prefix):
            out.append(dest[len(prefix) :])
    return out


def _devices_from_mounts(config: Mapping[str, Any]) -> list[str]:
    """Device names requested as volume mounts, in mount order. ``cdi/<vendor>/<class>/<name>``
    becomes the CDI name ``vendor/class=name``; ``imex/<n>`` entries are IMEX channels and
    are left out here."""
    out: list[str] = []
    for name in _request_mounts(config):
        if name.startswith("imex/"):
            continue
        if name.startswith("cdi/") and name.count("/") == 3:
            _cdi, vendor, cls, dev = name.split("/")
            name = f"{vendor}/{cls}={dev}"
        if name and name not in out:
            out.append(name)
    return out


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
        from_mounts = _devices_from_mounts(config) if policy.accept_volume_mounts else []
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
    channels = [c.strip() for c in env.get("NVIDIA_IMEX_CHANNELS", "").split(",") if c.strip()]
    if config is not None:
        for name in _request_mounts(config):
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
    by_bus = {g.bus_id.lower(): g for g in gpus}
    field = f"{request.source}[{ENV_VISIBLE_DEVICES}]"
    selected: list[Selection] = []
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
            parts = item.lower().split(":")
            if len(parts) == 2:
                parts = ["0", *parts]
            key = f"{int(parts[0], 16):08x}:{parts[1]}:{parts[2]}"
            gpu = by_bus.get(key)
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
        if found not in selected:
            selected.append(found)
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
    out: list[Gpu] = []
    for sel in select_devices(request, gpus):
        if sel.gpu not in out:
            out.append(sel.gpu)
    return tuple(out)


# -- AMD and Intel ------------------------------------------------------------------------

#: The variable a container names its AMD or Intel GPUs in, by vendor.
#: ``AMD_VISIBLE_DEVICES`` is amd-container-runtime's; ``INTEL_VISIBLE_DEVICES`` is
#: ocihook's own (Intel ships no container runtime that reads an env variable).
DRM_VARIABLES = {"amd": "AMD_VISIBLE_DEVICES", "intel": "INTEL_VISIBLE_DEVICES"}
#: The CDI kind of each vendor's GPUs (amd-ctk; Intel's DRA driver).
DRM_CDI_KINDS = {"amd": "amd.com/gpu", "intel": "intel.com/gpu"}
_VENDOR_NAMES = {"amd": "AMD", "intel": "Intel"}
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


def _index(text: str) -> int | None:
    """A decimal GPU index; one of more than 9 digits counts as 10**9 (no host has that
    many GPUs, and :func:`int` refuses over 4300 digits); ``None`` if not decimal."""
    if not (text.isascii() and text.isdigit()):
        return None
    return int(text) if len(text) <= 9 else 10**9


def _range(item: str) -> tuple[int, int] | None:
    """``(a, b)`` of ``a-b`` (decimal), else ``None``."""
    first, sep, last = item.partition("-")
    a, b = _index(first), _index(last)
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
    return _is_bus_id(low)


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
      (:func:`ocihook.pipeline.cdi_device_names`) and skipped here.

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
    items = [i.strip() for i in raw.split(",") if i.strip()]
    if not items or any(i in ("void", "none") for i in items):
        return None
    if "all" in items:
        return DrmRequest(vendor, "all", (), source)
    devices: list[str] = []
    for item in items:
        if is_drm_cdi_name(item):
            continue
        span = _range(item)
        if span is not None and span[0] > span[1]:
            raise RequestError(
                f"{_VENDOR_NAMES[vendor]} GPU range runs backwards",
                field=f"{source}[{variable}]",
                value=item,
                hint="write ranges low-high, e.g. 0-3",
            )
        if span is None and not _drm_item_ok(vendor, item):
            raise RequestError(
                f"malformed {_VENDOR_NAMES[vendor]} GPU entry",
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


def _sysfs_bus_id(text: str) -> str:
    """A PCI address accepted by :func:`_is_bus_id` in sysfs spelling (``0000:03:00.0``)."""
    key = parse_bus_id(text, short=True)
    assert key is not None  # checked by _is_bus_id
    return sysfs_bus_id(key)


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
    name = _VENDOR_NAMES[request.vendor]
    field = f"{request.source}[{request.variable}]"
    chosen: list[Any] = []

    def missing(message: str, item: str) -> RequestError:
        return RequestError(
            message, field=field, value=item, hint=f"the host has {name} GPUs {_drm_listing(gpus)}"
        )

    for item in request.devices:
        span = _range(item)
        single = _index(item)
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
                bus = _sysfs_bus_id(low)
                matches = [g for g in gpus if g.bus_id == bus]
            if not matches:
                raise missing(f"no {name} GPU matches this id", item)
        chosen.extend(g for g in matches if g not in chosen)
    return tuple(chosen)
