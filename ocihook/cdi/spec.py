"""CDI spec files: an immutable model, a strict loader and the validation rules.

Covers CDI spec versions 0.3.0 to 1.1.0 (CDI ``SPEC.md``, "CDI JSON Specification" and its
version table; the Go types in ``specs-go/config.go``). :func:`load_spec` reads JSON or
YAML whatever the file name says, rejects unknown fields like the reference parser (strict
decoding), then checks every rule of :func:`validate_spec`. Every error is a
:class:`~ocihook.cdi.names.CdiError` naming the file, the JSON path of the field
(``devices[0].containerEdits.mounts[1].hostPath``) and the value.

``null`` in an optional field means "absent" (as Go's decoder treats it); a required
field that is absent or ``null`` is an error. YAML aliases are refused (a small file could
otherwise expand to gigabytes). :meth:`Spec.to_dict` gives back the JSON form, omitting
empty optional fields.

The container edits are the plan's types (:mod:`ocihook.plan.edits`: one definition of a
device node, mount, hook and set of edits for both): attribute names are the JSON names
in snake case, except a mount's ``hostPath`` and ``containerPath``, which are
:attr:`~ocihook.plan.edits.Mount.source` and :attr:`~ocihook.plan.edits.Mount.destination`
as in the OCI runtime spec. An optional field absent from the file is its empty value
(``""``, ``()``, ``None``, ``False``), whatever default the type gives it.
"""

from __future__ import annotations

from ..core import jsonfast
from ..core.records import Record
from ..core.vocab import version_tuple
from ..plan.edits import ContainerEdits, DeviceNode, Hook, IntelRdt, Mount, NetDevice
from .names import CdiError, validate_class, validate_device_name, validate_vendor

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "HOOK_NAMES",
    "KNOWN_VERSIONS",
    "ContainerEdits",
    "Device",
    "DeviceNode",
    "Hook",
    "IntelRdt",
    "Mount",
    "NetDevice",
    "Spec",
    "decode_spec",
    "load_spec",
    "minimum_version",
    "spec_from_dict",
    "validate_spec",
]

#: The spec versions this module reads, oldest first (CDI ``SPEC.md``, version table;
#: ``pkg/cdi/version.go``). 0.1.0 and 0.2.0 are rejected.
KNOWN_VERSIONS: tuple[str, ...] = (
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
#: Valid ``hooks[].hookName`` values (CDI ``SPEC.md``, "OCI Hooks"; OCI runtime-spec
#: ``config.md`` "POSIX-platform Hooks").
HOOK_NAMES: tuple[str, ...] = (
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
)
_NODE_TYPES = ("", "b", "c", "u", "p")
_U32 = (0, 2**32 - 1)
_I64 = (0, 2**63 - 1)
_TIMEOUT = (1, 2**31 - 1)

Annotations = tuple[tuple[str, str], ...]


_EMPTY_EDITS = ContainerEdits()


class Device(Record):
    """One device of a spec (CDI ``SPEC.md``, "Devices"). ``annotations`` is a tuple of
    ``(key, value)`` pairs in file order."""

    name: str
    container_edits: ContainerEdits
    annotations: Annotations = ()


class Spec(Record):
    """A CDI spec file (CDI ``SPEC.md``, "CDI JSON Specification"). ``version`` is as
    declared (a leading ``v`` kept); ``annotations`` a tuple of ``(key, value)`` pairs."""

    version: str
    kind: str
    devices: tuple[Device, ...]
    container_edits: ContainerEdits = _EMPTY_EDITS
    annotations: Annotations = ()

    @property
    def vendor(self) -> str:
        """The vendor part of :attr:`kind`."""
        return self.kind.partition("/")[0]

    @property
    def device_class(self) -> str:
        """The class part of :attr:`kind`."""
        return self.kind.partition("/")[2]

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready data (JSON field names, empty optional fields left out);
        :func:`spec_from_dict` of the result gives back an equal :class:`Spec`."""
        out = _dump(self)
        assert isinstance(out, dict)
        return out


# -- field tables: (attribute, JSON name, kind, required) -------------------------------
# kind: "str", "bool", "strs", ("int", lo, hi), ("ints", lo, hi), "annotations",
#       a Record class, or ("list", RecordClass).

_FIELDS: dict[type[Record], tuple[tuple[str, str, Any, bool], ...]] = {
    DeviceNode: (
        ("path", "path", "str", True),
        ("host_path", "hostPath", "str", False),
        ("type", "type", "str", False),
        ("major", "major", ("int", *_I64), False),
        ("minor", "minor", ("int", *_I64), False),
        ("file_mode", "fileMode", ("int", *_U32), False),
        ("permissions", "permissions", "str", False),
        ("uid", "uid", ("int", *_U32), False),
        ("gid", "gid", ("int", *_U32), False),
    ),
    Mount: (
        ("source", "hostPath", "str", True),
        ("destination", "containerPath", "str", True),
        ("options", "options", "strs", False),
        ("type", "type", "str", False),
    ),
    Hook: (
        ("hook_name", "hookName", "str", True),
        ("path", "path", "str", True),
        ("args", "args", "strs", False),
        ("env", "env", "strs", False),
        ("timeout", "timeout", ("int", *_TIMEOUT), False),
    ),
    IntelRdt: (
        ("clos_id", "closID", "str", False),
        ("l3_cache_schema", "l3CacheSchema", "str", False),
        ("mem_bw_schema", "memBwSchema", "str", False),
        ("schemata", "schemata", "strs", False),
        ("enable_monitoring", "enableMonitoring", "bool", False),
        ("enable_cmt", "enableCMT", "bool", False),
        ("enable_mbm", "enableMBM", "bool", False),
    ),
    NetDevice: (
        ("host_interface_name", "hostInterfaceName", "str", True),
        ("name", "name", "str", True),
    ),
    ContainerEdits: (
        ("env", "env", "strs", False),
        ("device_nodes", "deviceNodes", ("list", DeviceNode), False),
        ("hooks", "hooks", ("list", Hook), False),
        ("mounts", "mounts", ("list", Mount), False),
        ("intel_rdt", "intelRdt", IntelRdt, False),
        ("additional_gids", "additionalGids", ("ints", *_U32), False),
        ("net_devices", "netDevices", ("list", NetDevice), False),
    ),
    Device: (
        ("name", "name", "str", True),
        ("annotations", "annotations", "annotations", False),
        ("container_edits", "containerEdits", ContainerEdits, True),
    ),
    Spec: (
        ("version", "cdiVersion", "str", True),
        ("kind", "kind", "str", True),
        ("annotations", "annotations", "annotations", False),
        ("devices", "devices", ("list", Device), True),
        ("container_edits", "containerEdits", ContainerEdits, False),
    ),
}


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _expect(value: object, want: type | tuple[type, ...], name: str, where: str) -> None:
    ok = isinstance(value, want) and not (isinstance(value, bool) and bool not in _tuple(want))
    if not ok:
        raise CdiError(
            f"wrong type: expected {name}, found {_type_name(value)}", field=where, value=value
        )


def _tuple(want: type | tuple[type, ...]) -> tuple[type, ...]:
    return want if isinstance(want, tuple) else (want,)


def _load_int(value: object, lo: int, hi: int, where: str) -> int:
    _expect(value, int, "an integer", where)
    assert isinstance(value, int)
    if not lo <= value <= hi:
        raise CdiError(f"integer out of range [{lo}, {hi}]", field=where, value=value)
    return value


def _load_value(kind: Any, value: object, where: str) -> object:
    if kind == "str":
        _expect(value, str, "a string", where)
        return value
    if kind == "bool":
        _expect(value, bool, "a boolean", where)
        return value
    if kind == "strs":
        _expect(value, list, "an array of strings", where)
        assert isinstance(value, list)
        for i, item in enumerate(value):
            _expect(item, str, "a string", f"{where}[{i}]")
        return tuple(value)
    if kind == "annotations":
        _expect(value, dict, "an object of strings", where)
        assert isinstance(value, dict)
        for key, item in value.items():
            if not isinstance(key, str):
                raise CdiError("annotation key is not a string", field=where, value=key)
            _expect(item, str, "a string", f"{where}[{jsonfast.dumps(key)}]")
        return tuple(value.items())
    if isinstance(kind, tuple) and kind[0] == "int":
        return _load_int(value, kind[1], kind[2], where)
    if isinstance(kind, tuple) and kind[0] == "ints":
        _expect(value, list, "an array of integers", where)
        assert isinstance(value, list)
        return tuple(_load_int(v, kind[1], kind[2], f"{where}[{i}]") for i, v in enumerate(value))
    if isinstance(kind, tuple) and kind[0] == "list":
        _expect(value, list, "an array of objects", where)
        assert isinstance(value, list)
        return tuple(_load_record(kind[1], v, f"{where}[{i}]") for i, v in enumerate(value))
    return _load_record(kind, value, where)


def _load_record(cls: type[Record], data: object, where: str) -> Record:
    _expect(data, dict, "an object", where or "(document)")
    assert isinstance(data, dict)
    table = _FIELDS[cls]
    known = {json_name for _, json_name, _, _ in table}
    for key in data:
        if not isinstance(key, str):
            raise CdiError("field name is not a string", field=where or None, value=key)
        if key not in known:
            raise CdiError(
                "unknown field",
                field=_join(where, key),
                hint="known fields here: " + ", ".join(sorted(known)),
            )
    kwargs: dict[str, object] = {}
    for attr, json_name, kind, required in table:
        value = data.get(json_name)
        if value is None:
            if required:
                raise CdiError("required field missing", field=_join(where, json_name))
            kwargs[attr] = _absent(kind)
            continue
        kwargs[attr] = _load_value(kind, value, _join(where, json_name))
    return cls(**kwargs)


def _absent(kind: Any) -> object:
    """The value of an optional field of ``kind`` that the file leaves out (or sets to
    ``null``): the empty value :func:`_dump` omits."""
    if kind == "str":
        return ""
    if kind == "bool":
        return False
    if kind in ("strs", "annotations") or (isinstance(kind, tuple) and kind[0] != "int"):
        return ()
    if kind is ContainerEdits:
        return _EMPTY_EDITS
    return None  # ("int", lo, hi) and the optional records (intel_rdt)


def _dump(record: Record) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for attr, json_name, kind, required in _FIELDS[type(record)]:
        value = getattr(record, attr)
        if not required and (value is None or value == "" or value == () or value is False):
            continue
        if kind == "annotations":
            out[json_name] = dict(value)
        elif isinstance(kind, tuple) and kind[0] == "list":
            out[json_name] = [_dump(v) for v in value]
        elif isinstance(value, Record):
            if json_name == "containerEdits" and not required and value == _EMPTY_EDITS:
                continue
            out[json_name] = _dump(value)
        elif isinstance(value, tuple):
            out[json_name] = list(value)
        else:
            out[json_name] = value
    return out


# -- decoding ---------------------------------------------------------------------------

_yaml_loader: Any = None


def _yaml_load(text: str) -> object:
    """Parse YAML text with PyYAML's safe loader — libyaml's C parser when PyYAML has it
    (about 6x faster than the pure-Python one on a generated 8-GPU spec) — refusing
    aliases (a "billion laughs" document would make every later walk of the data
    exponential) and mapping keys given twice (the reference decodes strictly), and
    reading ``1:0`` as a string, as the reference's go-yaml does (no base-60 numbers)."""
    global _yaml_loader
    import yaml  # only for specs that are not JSON

    if _yaml_loader is None:
        base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class _StrictLoader(base):  # type: ignore[misc]
            def construct_mapping(self, node: Any, deep: bool = False) -> Any:
                seen: set[object] = set()
                for key_node, _value in node.value:
                    key = self.construct_object(key_node, deep=True)
                    if isinstance(key, str) and key in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate field {key!r}", key_node.start_mark
                        )
                    if isinstance(key, str):
                        seen.add(key)
                return super().construct_mapping(node, deep=deep)

        # YAML 1.1's base-60 numbers (``1:0`` = 60) are not numbers to the reference
        # parser (go-yaml leaves them out on purpose; podman and containerd read ``1:0``
        # as a string, a MIG device name): a scalar with a colon is never an int/float.
        import re

        numeric = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
        _StrictLoader.yaml_implicit_resolvers = {
            first: [
                (tag, re.compile(r"(?![^:]*:)" + rx.pattern, re.X) if tag in numeric else rx)
                for tag, rx in resolvers
            ]
            for first, resolvers in base.yaml_implicit_resolvers.items()
        }
        _yaml_loader = _StrictLoader
    _check_yaml_depth(text, yaml)
    loader = _yaml_loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_aliases(node, yaml)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_json_depth(doc: object, path: str) -> None:
    """Raise :class:`CdiError` when the decoded JSON ``doc`` nests lists and objects deeper
    than :data:`MAX_SPEC_DEPTH` (the JSON decoder itself stops at the interpreter's
    recursion limit, about 1,000). Walks without recursion."""
    stack: list[tuple[object, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_SPEC_DEPTH:
            raise CdiError(f"nested deeper than {MAX_SPEC_DEPTH} levels", path=path)
        stack += [(c, depth + 1) for c in children if isinstance(c, (dict, list))]


def _check_yaml_depth(text: str, yaml: Any) -> None:
    """Raise a YAML ComposerError when ``text`` nests lists and mappings deeper than
    :data:`MAX_SPEC_DEPTH`, found from the parser's event stream, which PyYAML produces
    without recursion (the composer and constructor recurse)."""
    loader = _yaml_loader(text)
    starts = (yaml.MappingStartEvent, yaml.SequenceStartEvent)
    ends = (yaml.MappingEndEvent, yaml.SequenceEndEvent)
    depth = 0
    try:
        while loader.check_event():
            event = loader.get_event()
            if isinstance(event, starts):
                depth += 1
                if depth > MAX_SPEC_DEPTH:
                    raise yaml.composer.ComposerError(
                        None,
                        None,
                        f"nested deeper than {MAX_SPEC_DEPTH} levels",
                        event.start_mark,
                    )
            elif isinstance(event, ends):
                depth -= 1
    finally:
        loader.dispose()


def _refuse_aliases(root: Any, yaml: Any) -> None:
    """Raise a YAML ComposerError when a node occurs twice in the composed graph: that is
    what an alias (``*name``) makes; each node is visited once, so this is linear."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases are not allowed in CDI specs", node.start_mark
            )
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack += (key, value)
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value


class _DuplicateField(ValueError):
    pass


def _unique_fields(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateField(key)
        out[key] = value
    return out


#: The largest CDI spec read, in bytes (as ``config.json``: 16 MiB).
MAX_SPEC_BYTES = 16 << 20
#: The deepest nesting of lists and objects a CDI spec may have. The schema's deepest is
#: 7 (``devices[].containerEdits.hooks[].args[]``); YAML deeper than this is refused
#: before it is composed (PyYAML's composers recurse once per level: the C one crashed
#: the interpreter on ``[`` * 100000 before libyaml 0.2.5 bounded it, the pure-Python
#: one raises RecursionError).
MAX_SPEC_DEPTH = 32


def _decode(data: bytes | str, path: str) -> object:
    if len(data) > MAX_SPEC_BYTES:
        raise CdiError(f"larger than {MAX_SPEC_BYTES} bytes", path=path)
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise CdiError(f"not UTF-8 text: {err.reason} at byte {err.start}", path=path) from None
    else:
        text = data
    try:
        # A field given twice is an error, as in the reference's strict decoding.
        doc = jsonfast.loads(text, object_pairs_hook=_unique_fields)
        _check_json_depth(doc, path)
        return doc
    except _DuplicateField as err:
        raise CdiError("duplicate field", path=path, value=err.args[0]) from None
    except (ValueError, RecursionError) as err:
        json_err = str(err)
    import yaml

    try:
        return _yaml_load(text)
    except (yaml.YAMLError, ValueError, RecursionError, TypeError, OverflowError) as err:
        detail = " ".join(str(err).split())[:300]
        raise CdiError(
            f"neither JSON ({json_err[:200]}) nor YAML ({detail})",
            path=path,
        ) from None


# -- validation -------------------------------------------------------------------------

# Character checks rather than regular expressions: importing re (with enum) costs about
# as much as the rest of CDI injection on a container's start path.
_LOWER_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ALNUM = _LOWER_ALNUM | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _is_dns_label(label: str) -> bool:
    """``[a-z0-9]([-a-z0-9]*[a-z0-9])?`` (RFC 1123 label, no length limit here)."""
    return (
        bool(label)
        and label[0] in _LOWER_ALNUM
        and label[-1] in _LOWER_ALNUM
        and all(c in _LOWER_ALNUM or c == "-" for c in label)
    )


def _is_dns_subdomain(value: str) -> bool:
    """RFC 1123 labels joined by dots (the length is checked by the caller)."""
    return all(_is_dns_label(label) for label in value.split("."))


def _is_k8s_name(value: str) -> bool:
    """``[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`` (k8s qualified-name part)."""
    return (
        bool(value)
        and value[0] in _ALNUM
        and value[-1] in _ALNUM
        and all(c in _ALNUM or c in "-_." for c in value)
    )


def _is_permissions(value: str) -> bool:
    """``none`` or any string of ``r``, ``w`` and ``m`` (CDI device node permissions)."""
    return value == "none" or all(c in "rwm" for c in value)


def _is_ifname(value: str) -> bool:
    """Linux ``dev_valid_name`` (``net/core/dev.c``) restricted to printable ASCII: 1 to
    15 characters, none of ``/``, ``:`` or a blank, and not ``.`` or ``..``."""
    return (
        0 < len(value) <= 15
        and value not in (".", "..")
        and all("!" <= c <= "~" and c not in "/:" for c in value)
    )


def cdi_version_tuple(version: str) -> tuple[int, int, int] | None:
    """``"0.6.0"`` or ``"v0.6.0"`` -> ``(0, 6, 0)`` (:func:`ocihook.core.vocab.version_tuple`
    with three numbers), else ``None``."""
    text = version[1:] if version.startswith("v") else version
    parsed = version_tuple(text, parts=(3,), clamp=True)
    return None if parsed is None else (parsed[0], parsed[1], parsed[2])


def _fail(message: str, field: str, value: object = None, hint: str | None = None) -> CdiError:
    return CdiError(message, field=field, value=value, hint=hint)


def _check_version(version: str) -> tuple[int, int, int]:
    parsed = cdi_version_tuple(version)
    if parsed is None:
        raise _fail("invalid version: not MAJOR.MINOR.PATCH", "cdiVersion", version)
    if parsed < (0, 3, 0):
        raise _fail("the spec version must be at least v0.3.0", "cdiVersion", version)
    if version.removeprefix("v") not in KNOWN_VERSIONS:
        raise _fail(
            "unsupported version",
            "cdiVersion",
            version,
            hint="known versions: " + ", ".join(KNOWN_VERSIONS),
        )
    return parsed


def _check_annotations(annotations: Annotations, where: str) -> None:
    """Kubernetes annotation keys: ``[prefix/]name``, prefix a DNS subdomain of at most 253
    characters, name at most 63 (k8s ``apimachinery`` ``ValidateAnnotations``)."""
    for key, _value in annotations:
        field = f"{where}[{jsonfast.dumps(key)}]"
        prefix, slash, name = key.rpartition("/")
        if slash and (len(prefix) > 253 or not _is_dns_subdomain(prefix)):
            raise _fail(
                "invalid annotation key: prefix must be a DNS subdomain (lowercase "
                "alphanumerics, '-' and '.', at most 253 characters)",
                field,
                key,
            )
        if len(name) > 63 or not _is_k8s_name(name):
            raise _fail(
                "invalid annotation key: name must be 1 to 63 alphanumerics, '-', '_' or "
                "'.', alphanumeric at both ends",
                field,
                key,
            )


def _check_env(env: tuple[str, ...], where: str) -> None:
    for i, entry in enumerate(env):
        if entry.find("=") <= 0:
            raise _fail("invalid environment variable: expected KEY=value", f"{where}[{i}]", entry)


def _path_problem(path: str) -> str | None:
    """Why ``path`` cannot name a file (:func:`ocihook.oci.bundle.path_problem`)."""
    from ..oci.bundle import path_problem

    return path_problem(path)


def _check_edits(edits: ContainerEdits, where: str, version: tuple[int, int, int]) -> None:
    _check_env(edits.env, _join(where, "env"))
    for i, node in enumerate(edits.device_nodes):
        at = f"{_join(where, 'deviceNodes')}[{i}]"
        if not node.path:
            raise _fail("device node path is empty", f"{at}.path", node.path)
        if node.type not in _NODE_TYPES:
            raise _fail(
                "invalid device node type", f"{at}.type", node.type, hint="one of b, c, u, p"
            )
        if not _is_permissions(node.permissions):
            raise _fail(
                "invalid device node permissions",
                f"{at}.permissions",
                node.permissions,
                hint="'none' or letters from 'rwm'",
            )
    for i, hook in enumerate(edits.hooks):
        at = f"{_join(where, 'hooks')}[{i}]"
        if hook.hook_name not in HOOK_NAMES:
            raise _fail(
                "invalid hook name", f"{at}.hookName", hook.hook_name, hint=", ".join(HOOK_NAMES)
            )
        if not hook.path:
            raise _fail("hook path is empty", f"{at}.path", hook.path)
        _check_env(hook.env, f"{at}.env")
    for i, mount in enumerate(edits.mounts):
        at = f"{_join(where, 'mounts')}[{i}]"
        if not mount.source:
            raise _fail("mount hostPath is empty", f"{at}.hostPath", mount.source)
        if not mount.destination:
            raise _fail("mount containerPath is empty", f"{at}.containerPath", "")
        # a name no file can have (the reference leaves it to the runtime, which fails)
        for value, name in ((mount.source, "hostPath"), (mount.destination, "containerPath")):
            problem = _path_problem(value)
            if problem is not None:
                raise _fail(f"mount {name} {problem}", f"{at}.{name}", value)
    rdt = edits.intel_rdt
    if rdt is not None and version >= (1, 1, 0):
        for attr, name in (("enable_cmt", "enableCMT"), ("enable_mbm", "enableMBM")):
            if getattr(rdt, attr):
                raise _fail(
                    "unknown field (removed in CDI 1.1.0)",
                    f"{_join(where, 'intelRdt')}.{name}",
                    hint="use enableMonitoring",
                )
    if rdt is not None and rdt.clos_id and rdt.clos_id != "/":
        c = rdt.clos_id  # a directory name under resctrl; "/" is the root CLOS
        if len(c) >= 4096 or c in (".", "..") or "/" in c or "\n" in c:
            raise _fail(
                "invalid intelRdt closID: not a directory name",
                f"{_join(where, 'intelRdt')}.closID",
                c,
                hint="a single file name (no '/' or newline, not '.' or '..'), or '/' for "
                "the root class of service",
            )
    seen: dict[str, dict[str, int]] = {"hostInterfaceName": {}, "name": {}}
    for i, dev in enumerate(edits.net_devices):
        at = f"{_join(where, 'netDevices')}[{i}]"
        for attr, name in (("host_interface_name", "hostInterfaceName"), ("name", "name")):
            value = getattr(dev, attr)
            if not _is_ifname(value):
                raise _fail(
                    "invalid network interface name",
                    f"{at}.{name}",
                    value,
                    hint="1 to 15 printable ASCII characters, no '/', ':' or blank, "
                    "not '.' or '..'",
                )
            first = seen[name].setdefault(value, i)
            if first != i:
                raise _fail(
                    f"duplicate net device {name}",
                    f"{at}.{name}",
                    value,
                    hint=f"{_join(where, 'netDevices')}[{first}] has the same {name}; each "
                    "host interface moves into the container once, under a name of its own",
                )


def validate_spec(spec: Spec, *, path: str | None = None) -> None:
    """Check every rule of CDI ``SPEC.md`` on ``spec``; raise :class:`CdiError` (with
    ``path`` = ``path``, ``field`` = the JSON path, ``value``) at the first violation.

    Rules: a known version ≥ 0.3.0 and ≥ :func:`minimum_version`; ``kind`` is
    ``vendor/class`` with valid parts; at least one device; device names valid and unique;
    each device's edits non-empty; annotation keys follow Kubernetes rules; env entries
    ``KEY=value``; device node ``path`` non-empty, ``type`` in b/c/u/p/"", ``permissions``
    "", ``none`` or from ``rwm``; mounts name both paths; hooks have a known ``hookName``
    and a ``path``; net device names are valid Linux interface names, no
    ``hostInterfaceName`` or ``name`` twice in one edits list; ``intelRdt.closID`` a
    directory name (no ``/`` or newline, not ``.``/``..``, under 4096 bytes) or ``/``;
    ``enableCMT`` and ``enableMBM`` only before 1.1.0 (CDI ``pkg/cdi/container-edits.go``).
    """
    try:
        _validate(spec)
    except CdiError as err:
        if path is not None:
            err.with_path(path)
        raise


def _validate(spec: Spec) -> None:
    version = _check_version(spec.version)
    vendor, slash, cls = spec.kind.partition("/")
    if not slash:
        raise _fail("invalid kind: expected vendor/class", "kind", spec.kind)
    try:
        validate_vendor(vendor)
        validate_class(cls)
    except CdiError as err:
        raise _fail(f"invalid kind: {err.message}", "kind", spec.kind) from None
    _check_annotations(spec.annotations, "annotations")
    _check_edits(spec.container_edits, "containerEdits", version)
    if not spec.devices:
        raise _fail("a spec needs at least one device", "devices")
    seen: set[str] = set()
    for i, device in enumerate(spec.devices):
        at = f"devices[{i}]"
        try:
            validate_device_name(device.name)
        except CdiError as err:
            raise _fail(err.message, f"{at}.name", device.name) from None
        if device.name in seen:
            raise _fail("duplicate device name", f"{at}.name", device.name)
        seen.add(device.name)
        _check_annotations(device.annotations, f"{at}.annotations")
        if device.container_edits.is_empty():
            raise _fail("a device needs non-empty containerEdits", f"{at}.containerEdits")
        _check_edits(device.container_edits, f"{at}.containerEdits", version)
    required = minimum_version(spec)
    if version < cdi_version_tuple(required):  # type: ignore[operator]
        raise _fail(
            f"the spec content needs CDI version {required} or later",
            "cdiVersion",
            spec.version,
            hint=f"declare cdiVersion {required}",
        )


def _all_edits(spec: Spec) -> list[ContainerEdits]:
    return [spec.container_edits, *(d.container_edits for d in spec.devices)]


def minimum_version(spec: Spec) -> str:
    """The oldest CDI version that can express ``spec`` (``"0.3.0"`` ... ``"1.1.0"``, no
    ``v``), by the rules of ``pkg/cdi/version.go`` checked newest first: netDevices or
    intelRdt ``schemata``/``enableMonitoring`` → 1.1.0; any intelRdt or additionalGids →
    0.7.0; annotations or a ``.`` in the class → 0.6.0; a device name starting with a digit
    or a device node ``hostPath`` → 0.5.0; a mount ``type`` → 0.4.0; else 0.3.0.
    Generators must write this version (older consumers reject newer ones).
    """
    edits = _all_edits(spec)
    if any(
        e.net_devices
        or (e.intel_rdt is not None and (e.intel_rdt.schemata or e.intel_rdt.enable_monitoring))
        for e in edits
    ):
        return "1.1.0"
    if any(e.intel_rdt is not None or e.additional_gids for e in edits):
        return "0.7.0"
    if spec.annotations or any(d.annotations for d in spec.devices) or "." in spec.device_class:
        return "0.6.0"
    if any(d.name[:1].isdigit() for d in spec.devices) or any(
        n.host_path for e in edits for n in e.device_nodes
    ):
        return "0.5.0"
    if any(m.type for e in edits for m in e.mounts):
        return "0.4.0"
    return "0.3.0"


def spec_from_dict(data: object, *, path: str | None = None) -> Spec:
    """Build and validate a :class:`Spec` from decoded JSON/YAML data (a ``dict``).
    Unknown fields, wrong types and rule violations raise :class:`CdiError`."""
    try:
        spec = _load_record(Spec, data, "")
    except CdiError as err:
        if path is not None:
            err.with_path(path)
        raise
    assert isinstance(spec, Spec)
    validate_spec(spec, path=path)
    return spec


def decode_spec(data: bytes | str, *, path: str) -> object:
    """Parse a CDI spec file's content (UTF-8 JSON, else YAML) into plain values without
    validating them: what :func:`load_spec` validates, for checks of the raw document
    (``ocihook cdi validate`` also checks it against the CDI JSON Schema).

    Raises:
        CdiError: not UTF-8, neither JSON nor YAML, or a field given twice.
    """
    return _decode(data, path)


def load_spec(data: bytes | str, *, path: str) -> Spec:
    """Parse a CDI spec file's content (UTF-8 JSON or YAML, whatever ``path`` ends with;
    YAML is imported only when the text is not JSON) and validate it.

    ``path`` names the file in errors. Raises :class:`CdiError` and nothing else, for any
    input. Source: CDI ``SPEC.md``; the reference ``pkg/cdi/spec.go`` (strict decoding).
    """
    return spec_from_dict(_decode(data, path), path=path)
