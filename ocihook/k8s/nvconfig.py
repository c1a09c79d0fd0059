"""NVIDIA k8s-device-plugin's configuration file, read as it is, for
``ocihook k8s device-plugin --config-file`` (or ``$CONFIG_FILE``).

The file (YAML or JSON; NVIDIA's ``api/config/v1``: ``config.go``, ``flags.go``,
``replicas.go``, ``resources.go``, ``sharing.go``, ``imex.go``) has ``version`` (``v1``;
absent means ``v1``, any other is refused), ``flags`` (the plugin's command-line settings),
``resources``, ``sharing`` and ``imex``. :func:`parse_plugin_config` returns a
:class:`PluginConfig` holding what ocihook implements:

=====================================================  =====================================
key                                                    ocihook
=====================================================  =====================================
``flags.migStrategy``                                  ``--mig-strategy``
``flags.failOnInitError``                              ``--fail-on-init-error``
``flags.nvidiaDriverRoot``, ``flags.nvidiaDevRoot``    ``--driver-root``, ``--dev-root``
``flags.deviceDiscoveryStrategy``                      ``auto``, ``nvml``: ``--gpu-backend``
``flags.plugin.passDeviceSpecs``                       ``--pass-device-specs``
``flags.plugin.deviceListStrategy`` (one or a list)    ``--strategy``
``flags.plugin.deviceIDStrategy``                      ``--device-id-strategy``
``flags.plugin.cdiAnnotationPrefix``                   ``--cdi-annotation-prefix``
``flags.plugin.containerDriverRoot``                   ``--container-driver-root``
``flags.plugin.sharedDevicesAllocationPolicy``         ``distributed`` (what ocihook does)
``sharing.timeSlicing.renameByDefault``                replicated resources named
                                                       ``<name>.shared``
``sharing.timeSlicing.failRequestsGreaterThanOne``     a request for more than one replica
                                                       refused
``sharing.timeSlicing.resources[].name``, ``replicas``  time-slicing per resource
=====================================================  =====================================

Everything else NVIDIA's schema has is accepted and, when its value asks for something
ocihook does not do, listed in :attr:`PluginConfig.ignored` (``flags.gdsEnabled: true``,
``flags.plugin.nvidiaCTKPath``, ``flags.gfd``, ``resources``, ``imex``, an empty
``sharing.mps``, a ``rename`` other than the default one and ``devices`` other than
``all`` — NVIDIA's plugin ignores those two as well); keys its schema does not have go to
:attr:`PluginConfig.unknown`. :meth:`PluginConfig.warning` says both in one line. A value
of the wrong type or out of range is a :class:`~ocihook.core.errors.ConfigError` (exit
10) naming the key, as NVIDIA's plugin refuses to start on it. So is ``sharing.mps`` with
``resources``: ocihook does not implement MPS (NVIDIA's plugin starts an MPS control
daemon per resource and points the containers at it), and replicas advertised without it
would each reach the whole GPU, time-sliced, without the memory and compute limits MPS
gives — a silent change a migrating operator should not get.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import ConfigError

__all__ = [
    "ANNOTATION_PREFIX_RULE",
    "DEVICE_ID_STRATEGIES",
    "DEVICE_LIST_STRATEGIES",
    "MAX_CONFIG_BYTES",
    "MPS_REFUSAL",
    "SHARED_SUFFIX",
    "PluginConfig",
    "SharedResource",
    "is_annotation_prefix",
    "load_plugin_config",
    "parse_plugin_config",
]

#: ``flags.plugin.deviceListStrategy`` values (ocihook's ``--strategy``).
DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
#: ``flags.plugin.deviceIDStrategy`` values.
DEVICE_ID_STRATEGIES = ("uuid", "index")
#: What ``renameByDefault`` appends to a replicated resource's name.
SHARED_SUFFIX = ".shared"
#: The largest configuration file read.
MAX_CONFIG_BYTES = 1 << 20
_MIG_STRATEGIES = ("none", "single", "mixed")
_RESOURCE_PREFIX = "nvidia.com"
#: A Kubernetes extended resource name's length limit (NVIDIA's MaxResourceNameLength).
_MAX_RESOURCE = 63
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_ANNOTATION_PREFIX = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*/")
#: What a CDI annotation key prefix must be.
ANNOTATION_PREFIX_RULE = "not an annotation key prefix (a DNS subdomain and /, as cdi.k8s.io/)"


def is_annotation_prefix(text: str) -> bool:
    """Whether ``text`` can begin a CDI annotation key: a DNS subdomain and ``/``
    (Kubernetes annotation keys: ``prefix/name``; CDI's default ``cdi.k8s.io/``)."""
    return len(text) <= 254 and _ANNOTATION_PREFIX.fullmatch(text) is not None


#: The keys of each mapping of NVIDIA's schema (older releases' included), by dotted path
#: (``[]``: each item of a list).
_KNOWN: dict[str, frozenset[str]] = {
    path: frozenset(keys.split())
    for path, keys in {
        "": "version flags resources sharing imex",
        "flags": "migStrategy failOnInitError mpsRoot nvidiaDriverRoot nvidiaDevRoot "
        "gdrcopyEnabled gdsEnabled mofedEnabled useNodeFeatureAPI deviceDiscoveryStrategy "
        "restartOnDeviceUnhealthy plugin gfd",
        "flags.plugin": "passDeviceSpecs deviceListStrategy deviceIDStrategy "
        "cdiAnnotationPrefix nvidiaCTKPath containerDriverRoot sharedDevicesAllocationPolicy",
        "sharing": "timeSlicing mps",
        "sharing.timeSlicing": "renameByDefault failRequestsGreaterThanOne resources",
        "sharing.timeSlicing.resources[]": "name rename devices replicas",
    }.items()
}
#: Boolean flags ocihook does not implement: ignored (and said) when true.
_UNDONE_TRUE = (
    "gdrcopyEnabled",
    "gdsEnabled",
    "mofedEnabled",
    "useNodeFeatureAPI",
    "restartOnDeviceUnhealthy",
)


@dataclass(frozen=True)
class SharedResource:
    """One resource shared by time-slicing (``sharing.timeSlicing.resources[]``).

    Attributes:
        name: the resource (``nvidia.com/gpu``, ``nvidia.com/mig-1g.10gb``; a name without
            ``nvidia.com/`` gets it, as NVIDIA's plugin does).
        replicas: how many times each of its devices is advertised (2 or more).
    """

    name: str
    replicas: int


@dataclass(frozen=True)
class PluginConfig:
    """What ocihook takes from an NVIDIA device plugin configuration file (see the module
    docstring). ``None``: the file does not set it (the command line's or ocihook's
    default applies).

    Attributes:
        mig_strategy: ``none``, ``single`` or ``mixed``.
        fail_on_init_error: exit on a discovery error (true) or keep running without
            serving (false).
        driver_root: the driver root on the host (``nvidiaDriverRoot``).
        dev_root: the dev root on the host (``nvidiaDevRoot``; empty: unset).
        gpu_backend: ``auto`` or ``nvml``, from ``deviceDiscoveryStrategy``.
        pass_device_specs: return device nodes as DeviceSpecs.
        strategies: the Allocate strategies (``deviceListStrategy``).
        device_id_strategy: ``uuid`` or ``index``.
        cdi_annotation_prefix: the key prefix of the ``cdi-annotations`` strategy.
        container_driver_root: where the plugin sees the driver root.
        rename_by_default: advertise each shared resource as ``<name>.shared``.
        fail_requests_greater_than_one: refuse a request for more than one replica.
        time_slicing: the shared resources, in file order.
        ignored: dotted keys whose values ocihook does not act on.
        unknown: dotted keys NVIDIA's schema does not have.
    """

    mig_strategy: str | None = None
    fail_on_init_error: bool | None = None
    driver_root: str | None = None
    dev_root: str | None = None
    gpu_backend: str | None = None
    pass_device_specs: bool | None = None
    strategies: tuple[str, ...] | None = None
    device_id_strategy: str | None = None
    cdi_annotation_prefix: str | None = None
    container_driver_root: str | None = None
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    time_slicing: tuple[SharedResource, ...] = ()
    ignored: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()

    def shared_name(self, resource: str) -> str:
        """The name ``resource`` is advertised under when shared: ``<name>.shared`` with
        ``renameByDefault``, else its own."""
        return resource + SHARED_SUFFIX if self.rename_by_default else resource

    def warning(self) -> str | None:
        """One line naming every key ocihook does not act on, or ``None``."""
        parts = []
        if self.ignored:
            parts.append("not implemented by ocihook, ignored: " + ", ".join(self.ignored))
        if self.unknown:
            parts.append("not in NVIDIA's schema, ignored: " + ", ".join(self.unknown))
        return "; ".join(parts) or None

    def to_dict(self) -> dict[str, Any]:
        """The file (as NVIDIA's schema spells it) that parses back to this configuration
        less :attr:`ignored` and :attr:`unknown`."""
        flags: dict[str, Any] = {}
        plugin: dict[str, Any] = {}
        for out, key, value in (
            (flags, "migStrategy", self.mig_strategy),
            (flags, "failOnInitError", self.fail_on_init_error),
            (flags, "nvidiaDriverRoot", self.driver_root),
            (flags, "nvidiaDevRoot", self.dev_root),
            (flags, "deviceDiscoveryStrategy", self.gpu_backend),
            (plugin, "passDeviceSpecs", self.pass_device_specs),
            (plugin, "deviceListStrategy", list(self.strategies or ()) or None),
            (plugin, "deviceIDStrategy", self.device_id_strategy),
            (plugin, "cdiAnnotationPrefix", self.cdi_annotation_prefix),
            (plugin, "containerDriverRoot", self.container_driver_root),
        ):
            if value is not None:
                out[key] = value
        if plugin:
            flags["plugin"] = plugin
        doc: dict[str, Any] = {"version": "v1"}
        if flags:
            doc["flags"] = flags
        if self.time_slicing:  # NVIDIA's schema has no time-slicing without resources
            doc["sharing"] = {
                "timeSlicing": {
                    "renameByDefault": self.rename_by_default,
                    "failRequestsGreaterThanOne": self.fail_requests_greater_than_one,
                    "resources": [
                        {"name": r.name, "replicas": r.replicas} for r in self.time_slicing
                    ],
                }
            }
        return doc


class _Reader:
    """Typed access to the decoded file, collecting ignored and unknown keys."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.ignored: list[str] = []
        self.unknown: list[str] = []

    def error(self, key: str, message: str, value: object, hint: str | None = None) -> ConfigError:
        return ConfigError(message, path=self.path, field=key, value=value, hint=hint)

    def mapping(self, key: str, value: object, schema: str | None = None) -> dict[str, Any]:
        """``value`` as a mapping (``null``: empty); its keys outside NVIDIA's schema for
        ``schema`` (default ``key``) recorded as unknown."""
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise self.error(key or "(top level)", "must be a mapping", _kind(value))
        known = _KNOWN.get(key if schema is None else schema)
        if known is not None:
            prefix = f"{key}." if key else ""
            self.unknown += [f"{prefix}{k}" for k in value if k not in known]
        return value

    def string(self, where: str, value: object, choices: tuple[str, ...] = ()) -> str | None:
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(where, "must be a string", _kind(value))
        if choices and value not in choices:
            raise self.error(where, f"must be one of {', '.join(choices)}", value)
        return value

    def boolean(self, where: str, value: object) -> bool | None:
        if value is None or isinstance(value, bool):
            return value
        raise self.error(where, "must be true or false", _kind(value))

    def root(self, where: str, value: object) -> str | None:
        text = self.string(where, value)
        if not text:
            return None
        if not text.startswith("/"):
            raise self.error(where, "must be an absolute path", text)
        return text


def _kind(value: object) -> object:
    """``value`` for an error message: scalars as they are, containers by their type."""
    if isinstance(value, (dict, list)):
        return f"a {'mapping' if isinstance(value, dict) else 'list'}"
    return value


def _resource_name(r: _Reader, where: str, value: object) -> str:
    """A resource name as NVIDIA's ``NewResourceName`` accepts it: ``nvidia.com/`` added
    when missing; at most 63 characters; the part after ``/`` a DNS subdomain."""
    text = r.string(where, value)
    if not text:
        raise r.error(where, "a resource name is required", value)
    if not text.startswith(_RESOURCE_PREFIX + "/"):
        text = f"{_RESOURCE_PREFIX}/{text}"
    name = text.split("/", 1)[1]
    if len(text) > _MAX_RESOURCE or not _DNS_SUBDOMAIN.fullmatch(name):
        raise r.error(
            where,
            f"not a resource name (nvidia.com/ and a DNS subdomain, at most {_MAX_RESOURCE} "
            "characters in all)",
            value,
        )
    return text


def _flags(r: _Reader, doc: Mapping[str, Any]) -> dict[str, Any]:
    flags = r.mapping("flags", doc.get("flags"))
    out: dict[str, Any] = {
        "mig_strategy": r.string("flags.migStrategy", flags.get("migStrategy"), _MIG_STRATEGIES),
        "fail_on_init_error": r.boolean("flags.failOnInitError", flags.get("failOnInitError")),
        "driver_root": r.root("flags.nvidiaDriverRoot", flags.get("nvidiaDriverRoot")),
        "dev_root": r.root("flags.nvidiaDevRoot", flags.get("nvidiaDevRoot")),
    }
    for key in _UNDONE_TRUE:
        if r.boolean(f"flags.{key}", flags.get(key)):
            r.ignored.append(f"flags.{key}")
    if r.string("flags.mpsRoot", flags.get("mpsRoot")):
        r.ignored.append("flags.mpsRoot")
    discovery = r.string(
        "flags.deviceDiscoveryStrategy",
        flags.get("deviceDiscoveryStrategy"),
        ("auto", "nvml", "tegra"),
    )
    if discovery == "tegra":
        r.ignored.append("flags.deviceDiscoveryStrategy")
    elif discovery is not None:
        out["gpu_backend"] = discovery
    if flags.get("gfd") is not None:
        r.mapping("flags.gfd", flags["gfd"])
        if flags["gfd"]:
            r.ignored.append("flags.gfd")
    plugin = r.mapping("flags.plugin", flags.get("plugin"))
    where = "flags.plugin."
    out["pass_device_specs"] = r.boolean(where + "passDeviceSpecs", plugin.get("passDeviceSpecs"))
    strategies = plugin.get("deviceListStrategy")
    if isinstance(strategies, str):
        strategies = [strategies]
    if strategies is not None:
        if not isinstance(strategies, list) or not strategies:
            raise r.error(
                where + "deviceListStrategy", "must be a strategy or a list of them", strategies
            )
        out["strategies"] = tuple(
            dict.fromkeys(
                r.string(f"{where}deviceListStrategy[{i}]", s, DEVICE_LIST_STRATEGIES) or ""
                for i, s in enumerate(strategies)
            )
        )
        if "" in out["strategies"]:
            raise r.error(where + "deviceListStrategy", "a strategy is null", strategies)
    out["device_id_strategy"] = r.string(
        where + "deviceIDStrategy", plugin.get("deviceIDStrategy"), DEVICE_ID_STRATEGIES
    )
    prefix = r.string(where + "cdiAnnotationPrefix", plugin.get("cdiAnnotationPrefix"))
    if prefix is not None and not is_annotation_prefix(prefix):
        raise r.error(where + "cdiAnnotationPrefix", ANNOTATION_PREFIX_RULE, prefix)
    out["cdi_annotation_prefix"] = prefix
    out["container_driver_root"] = r.root(
        where + "containerDriverRoot", plugin.get("containerDriverRoot")
    )
    if r.string(where + "nvidiaCTKPath", plugin.get("nvidiaCTKPath")) is not None:
        r.ignored.append(where + "nvidiaCTKPath")  # ocihook's specs run ocihook: --hook-path
    policy = r.string(
        where + "sharedDevicesAllocationPolicy",
        plugin.get("sharedDevicesAllocationPolicy"),
        ("distributed", "packed"),
    )
    if policy == "packed":
        r.ignored.append(where + "sharedDevicesAllocationPolicy")
    return out


def _time_slicing(r: _Reader, sharing: Mapping[str, Any]) -> dict[str, Any]:
    key = "sharing.timeSlicing"
    if "timeSlicing" not in sharing or sharing["timeSlicing"] is None:
        return {}
    ts = r.mapping(key, sharing["timeSlicing"])
    rename = bool(r.boolean(f"{key}.renameByDefault", ts.get("renameByDefault")))
    fail = bool(
        r.boolean(f"{key}.failRequestsGreaterThanOne", ts.get("failRequestsGreaterThanOne"))
    )
    items = ts.get("resources")
    if not isinstance(items, list) or not items:
        raise r.error(f"{key}.resources", "no resources specified", _kind(items))
    shared: list[SharedResource] = []
    for i, item in enumerate(items):
        where = f"{key}.resources[{i}]"
        entry = r.mapping(where, item, schema=f"{key}.resources[]")
        name = _resource_name(r, f"{where}.name", entry.get("name"))
        replicas = entry.get("replicas")
        if replicas is None:
            raise r.error(f"{where}.replicas", "no replicas specified", None)
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2:
            raise r.error(f"{where}.replicas", "must be a whole number, 2 or more", replicas)
        if any(s.name == name for s in shared):
            raise r.error(f"{where}.name", "listed twice", name)
        own = entry.get("rename")
        if own is not None:
            own = _resource_name(r, f"{where}.rename", own)
            if not (rename and own == name + SHARED_SUFFIX):
                r.ignored.append(f"{where}.rename")  # NVIDIA's plugin ignores it too
        devices = entry.get("devices", "all")
        if devices != "all":
            if not isinstance(devices, (str, int, list)) or isinstance(devices, bool):
                raise r.error(f"{where}.devices", "must be all, a count or a list", _kind(devices))
            if isinstance(devices, str):
                raise r.error(f"{where}.devices", "the only string allowed is all", devices)
            r.ignored.append(f"{where}.devices")  # as NVIDIA's plugin: all of them
        shared.append(SharedResource(name, replicas))
    return {
        "rename_by_default": rename,
        "fail_requests_greater_than_one": fail,
        "time_slicing": tuple(shared),
    }


#: Why ``sharing.mps`` asking for replicas is refused (:func:`_mps`).
MPS_REFUSAL = (
    "MPS sharing is not implemented by ocihook (it needs NVIDIA's MPS control daemon on "
    "the node); refused rather than advertising replicas without MPS's memory and "
    "compute limits"
)


def _mps(r: _Reader, mps: object) -> None:
    """``sharing.mps``: ocihook has no MPS (no control daemon, no per-client limits), so a
    configuration asking for MPS replicas is refused rather than advertising replicas
    that would each reach the whole GPU, time-sliced, with none of MPS's limits; one that
    asks for none (null, no ``resources``) is only named among the ignored keys.

    Raises:
        ConfigError: ``resources`` is not empty (its resource names as the value).
    """
    if mps is None:
        return
    where = "sharing.mps"
    entries = r.mapping(where, mps).get("resources")
    if not entries:
        r.ignored.append(where)
        return
    if not isinstance(entries, list):
        raise r.error(f"{where}.resources", "must be a list", _kind(entries))
    names = tuple(str(e.get("name")) if isinstance(e, dict) else str(_kind(e)) for e in entries)
    raise r.error(
        where,
        MPS_REFUSAL,
        names,
        hint="share with sharing.timeSlicing (no memory or compute limits), or keep "
        "NVIDIA's device plugin on the nodes that need MPS",
    )


def parse_plugin_config(data: bytes | str, path: str = "<config>") -> PluginConfig:
    """Parse NVIDIA k8s-device-plugin's configuration file (``data``, YAML or JSON).

    Args:
        data: the file's bytes.
        path: its name, for errors.

    Returns:
        The :class:`PluginConfig`; an empty document is an empty configuration.

    Raises:
        ConfigError: not YAML (or larger than :data:`MAX_CONFIG_BYTES`, or with aliases),
            not a mapping, a ``version`` other than ``v1``, a value of the wrong type
            or out of range (the key is named), or ``sharing.mps`` asking for replicas
            (:data:`MPS_REFUSAL`).
    """
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes", path=path)
    doc = _load_yaml(data, path)
    r = _Reader(path)
    top = r.mapping("", doc)
    version = r.string("version", top.get("version"))
    if version not in (None, "", "v1"):
        raise r.error("version", "unknown version (NVIDIA's plugin reads v1)", version)
    values = _flags(r, top)
    resources = top.get("resources")
    if resources is not None:
        r.mapping("resources", resources)
        if any(resources.get(k) for k in resources):
            r.ignored.append("resources")  # NVIDIA's plugin ignores it as well
    sharing = r.mapping("sharing", top.get("sharing"))
    values.update(_time_slicing(r, sharing))
    _mps(r, sharing.get("mps"))
    imex = top.get("imex")
    if imex is not None:
        imex = r.mapping("imex", imex)
        if imex.get("channelIDs") or imex.get("required"):
            r.ignored.append("imex")
    return PluginConfig(**values, ignored=tuple(r.ignored), unknown=tuple(r.unknown))


def _load_yaml(data: bytes | str, path: str) -> object:
    """``data`` decoded with PyYAML's pure-Python safe loader (the C one crashes on deep
    nesting), aliases refused (a small file could expand without bound), a mapping key
    given twice refused (as go-yaml does).

    Raises:
        ConfigError: not YAML, an alias, a key given twice, or nested too deep to compose.
    """
    import yaml

    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        stack, seen = [node], set()
        while stack:
            n = stack.pop()
            if id(n) in seen:
                raise ConfigError("YAML aliases are not allowed", path=path)
            seen.add(id(n))
            if isinstance(n, yaml.MappingNode):
                keys: set[str] = set()
                for k, _ in n.value:  # go-yaml refuses a key given twice; PyYAML keeps the last
                    if isinstance(k, yaml.ScalarNode):
                        if k.value in keys:
                            line = k.start_mark.line + 1
                            raise ConfigError(f"key {k.value} given twice", path=path, line=line)
                        keys.add(k.value)
                stack += [x for pair in n.value for x in pair]
            elif isinstance(n, yaml.SequenceNode):
                stack += n.value
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        line = mark.line + 1 if mark is not None else None
        raise ConfigError(f"not YAML: {problem}", path=path, line=line) from None
    except RecursionError:
        raise ConfigError("nested too deep", path=path) from None
    finally:
        loader.dispose()


def load_plugin_config(path: str) -> PluginConfig:
    """Read and parse the file at ``path`` (:func:`parse_plugin_config`).

    Raises:
        ConfigError: it cannot be read, or :func:`parse_plugin_config` refuses it.
    """
    from ..core.readfile import read_regular

    try:
        data = read_regular(path, limit=MAX_CONFIG_BYTES)
    except OSError as e:
        raise ConfigError(
            f"cannot read the device plugin configuration: {e.strerror}", path=path
        ) from None
    return parse_plugin_config(data, path)
