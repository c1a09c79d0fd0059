"""``ocihook.config.validate``: defaults, every key's checks and their messages, and the
hand checks held to the same verdict as the JSON Schema."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import REPO

from ocihook.config import validate
from ocihook.config.load import load_config
from ocihook.config.validate import KEYS, Config, ConfigError, config_from_dict
from ocihook.core.hostroot import HostRoot
from ocihook.request.nvidia import ALL_CAPABILITIES

SPEC_SCHEMA_PATH = os.path.join(REPO, "specs", "config.schema.json")

with open(SPEC_SCHEMA_PATH) as _f:
    SCHEMA: dict[str, Any] = json.load(_f)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def hand_ok(doc: dict[str, Any]) -> bool:
    try:
        config_from_dict(doc)
    except ConfigError:
        return False
    return True


# --- defaults -------------------------------------------------------------------------


def test_defaults() -> None:
    c = Config()
    assert c.driver_root == "/" and c.dev_root == "/"
    assert c.ldcache == "/etc/ld.so.cache"
    assert c.ldconfig == "@/sbin/ldconfig" and c.ldconfig_on_host
    assert c.library_path == ()
    assert c.no_cgroups is False
    assert c.mode == "auto"
    assert c.cdi_spec_dirs == ("/etc/cdi", "/var/run/cdi")
    assert c.default_kind == "nvidia.com/gpu"
    assert c.annotation_prefixes == ("cdi.k8s.io/",)
    assert c.accept_nvidia_visible_devices_envvar_when_unprivileged is True
    assert c.accept_nvidia_visible_devices_as_volume_mounts is False
    assert c.swarm_resource == "" and c.swarm_envvars == ()
    assert c.supported_driver_capabilities == "compat32,compute,display,graphics,ngx,utility,video"
    assert c.driver_capabilities == ALL_CAPABILITIES
    assert c.disable_require is False
    assert c.log_file == "" and c.log_level == "info"
    assert c.source is None
    assert c.host_root() == HostRoot()


def test_defaults_are_the_schemas() -> None:
    props = SCHEMA["properties"]
    assert list(props) == list(KEYS)
    assert Config().as_dict() == {k: p["default"] for k, p in props.items()}
    assert VALIDATOR.is_valid(Config().as_dict())


def test_host_root_normalises_roots() -> None:
    c = Config(driver_root="/run/nvidia/driver/", dev_root="/host/./")
    assert c.host_root().driver_root == "/run/nvidia/driver"
    assert c.host_root().dev_root == "/host"


# --- errors name the file, the key and the value --------------------------------------

#: (key, TOML right-hand side, field named, value named): every key, wrong type and value.
BAD: list[tuple[str, str, str, Any]] = [
    ("driver-root", "1", "driver-root", 1),
    ("driver-root", '"run/nvidia/driver"', "driver-root", "run/nvidia/driver"),
    ("driver-root", '""', "driver-root", ""),
    ("driver-root", '"/a\\u0000b"', "driver-root", "/a\0b"),
    ("dev-root", "true", "dev-root", True),
    ("dev-root", '"dev"', "dev-root", "dev"),
    ("ldcache", '["/etc/ld.so.cache"]', "ldcache", ["/etc/ld.so.cache"]),
    ("ldcache", '"ld.so.cache"', "ldcache", "ld.so.cache"),
    ("ldconfig", "false", "ldconfig", False),
    ("ldconfig", '"ldconfig"', "ldconfig", "ldconfig"),
    ("ldconfig", '"@sbin/ldconfig"', "ldconfig", "@sbin/ldconfig"),
    ("library-path", '"/opt/lib"', "library-path", "/opt/lib"),
    ("library-path", '["/ok", "lib64"]', "library-path[1]", "lib64"),
    ("library-path", "[1]", "library-path[0]", 1),
    ("no-cgroups", '"true"', "no-cgroups", "true"),
    ("no-cgroups", "1", "no-cgroups", 1),
    ("mode", '"csv"', "mode", "csv"),
    ("mode", '"Legacy"', "mode", "Legacy"),
    ("mode", "1", "mode", 1),
    ("cdi-spec-dirs", '"/etc/cdi"', "cdi-spec-dirs", "/etc/cdi"),
    ("cdi-spec-dirs", '["/etc/cdi", "var/run/cdi"]', "cdi-spec-dirs[1]", "var/run/cdi"),
    ("default-kind", '"nvidia.com"', "default-kind", "nvidia.com"),
    ("default-kind", '"nvidia.com/gpu/x"', "default-kind", "nvidia.com/gpu/x"),
    ("default-kind", '"_nvidia.com/gpu"', "default-kind", "_nvidia.com/gpu"),
    ("default-kind", '"nvidia.com/gpu-"', "default-kind", "nvidia.com/gpu-"),
    ("default-kind", '"nvidia.com/gpu=0"', "default-kind", "nvidia.com/gpu=0"),
    ("default-kind", "{ vendor = 'nvidia.com' }", "default-kind", {"vendor": "nvidia.com"}),
    ("annotation-prefixes", '"cdi.k8s.io/"', "annotation-prefixes", "cdi.k8s.io/"),
    ("annotation-prefixes", '[""]', "annotation-prefixes[0]", ""),
    ("annotation-prefixes", '["cdi.k8s.io/", "a b"]', "annotation-prefixes[1]", "a b"),
    ("annotation-prefixes", "[true]", "annotation-prefixes[0]", True),
    (
        "accept-nvidia-visible-devices-envvar-when-unprivileged",
        '"yes"',
        "accept-nvidia-visible-devices-envvar-when-unprivileged",
        "yes",
    ),
    (
        "accept-cdi-annotations-when-unprivileged",
        '"no"',
        "accept-cdi-annotations-when-unprivileged",
        "no",
    ),
    (
        "accept-nvidia-visible-devices-as-volume-mounts",
        "0",
        "accept-nvidia-visible-devices-as-volume-mounts",
        0,
    ),
    ("runtimes", '"runc"', "runtimes", "runc"),
    ("runtimes", "[]", "runtimes", []),
    ("runtimes", '["runc", "bin/crun"]', "runtimes[1]", "bin/crun"),
    ("runtimes", '["run c"]', "runtimes[0]", "run c"),
    ("runtimes", "[1]", "runtimes[0]", 1),
    ("swarm-resource", '["DOCKER_RESOURCE_GPU"]', "swarm-resource", ["DOCKER_RESOURCE_GPU"]),
    ("swarm-resource", '"A,,B"', "swarm-resource", "A,,B"),
    ("swarm-resource", '"A B"', "swarm-resource", "A B"),
    ("swarm-resource", '"X=1"', "swarm-resource", "X=1"),
    ("swarm-resource", '" "', "swarm-resource", " "),
    (
        "supported-driver-capabilities",
        '"compute, utility"',
        "supported-driver-capabilities",
        "compute, utility",
    ),
    (
        "supported-driver-capabilities",
        '"compute,bogus"',
        "supported-driver-capabilities",
        "compute,bogus",
    ),
    ("supported-driver-capabilities", '""', "supported-driver-capabilities", ""),
    (
        "supported-driver-capabilities",
        '"all,compute"',
        "supported-driver-capabilities",
        "all,compute",
    ),
    ("supported-driver-capabilities", '["compute"]', "supported-driver-capabilities", ["compute"]),
    ("disable-require", '"false"', "disable-require", "false"),
    ("cuda-compat", '"mount"', "cuda-compat", "mount"),
    ("cuda-compat", "false", "cuda-compat", False),
    ("log-file", '"ocihook.core.log"', "log-file", "ocihook.core.log"),
    ("log-file", "1", "log-file", 1),
    ("log-level", '"warn"', "log-level", "warn"),
    ("log-level", '"INFO"', "log-level", "INFO"),
    ("log-syslog", '"yes"', "log-syslog", "yes"),
    (
        "log-level",
        "1979-05-27T07:32:00Z",
        "log-level",
        tomllib.loads("v = 1979-05-27T07:32:00Z")["v"],
    ),
]


def test_bad_cases_cover_every_key() -> None:
    assert {case[0] for case in BAD} == set(KEYS)


@pytest.mark.parametrize(("key", "rhs", "field", "value"), BAD)
def test_bad_value_names_key_and_value(
    config_file: Callable[..., str], key: str, rhs: str, field: str, value: Any
) -> None:
    other = "no-cgroups = false" if key != "no-cgroups" else 'mode = "auto"'
    path = config_file(f"# comment\n{other}\n{key} = {rhs}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    err = e.value
    assert (err.path, err.field, err.value) == (path, field, value)
    text = str(err)
    assert "\n" not in text
    assert f"file {path}" in text and f"field {field}" in text and repr(value) in text
    assert err.hint
    # the schema refuses it as well
    assert not VALIDATOR.is_valid(tomllib.loads(f"{key} = {rhs}\n"))


@pytest.mark.parametrize(("key", "bad"), [("mode", "csv"), ("log-level", "warn")])
def test_enum_hint_lists_values(key: str, bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({key: bad})
    for valid in SCHEMA["properties"][key]["enum"]:
        assert valid in (e.value.hint or "")


def test_capability_hint_lists_names() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({"supported-driver-capabilities": "compute,bogus"})
    assert "compat32,compute,display,graphics,ngx,utility,video" in (e.value.hint or "")


def test_first_problem_in_file_order_is_reported(config_file: Callable[..., str]) -> None:
    path = config_file('log-level = "loud"\nmode = "csv"\n')
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.field == "log-level"


def test_unknown_key_lists_valid_keys(config_file: Callable[..., str]) -> None:
    path = config_file('no-cgroup = true\nmode = "auto"\n')
    with pytest.raises(ConfigError) as e:
        load_config(path)
    err = e.value
    assert (err.path, err.field, err.value) == (path, "no-cgroup", True)
    assert err.message == "unknown key"
    assert (err.hint or "").startswith("did you mean no-cgroups? valid keys: ")
    for key in KEYS:
        assert key in (err.hint or "")


@pytest.mark.parametrize(
    ("doc", "field", "guess"),
    [
        ({"driver_root": "/"}, "driver_root", "driver-root"),
        ({"Log-Level": "info"}, "Log-Level", "log-level"),
        ({"zzz": 1}, "zzz", None),
        ({"a.b": 1}, '"a.b"', None),
        ({"table": {"x": 1}}, "table", None),
    ],
)
def test_unknown_key_guess(doc: dict[str, Any], field: str, guess: str | None) -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict(doc)
    assert e.value.field == field
    hint = e.value.hint or ""
    assert (f"did you mean {guess}?" in hint) if guess else ("did you mean" not in hint)


def test_toolkit_section_is_refused_with_the_mapping(config_file: Callable[..., str]) -> None:
    path = config_file(
        "disable-require = false\n"
        "[nvidia-container-cli]\n"
        'root = "/run/nvidia/driver"\n'
        "load-kmods = true\n"
        "no-cgroups = true\n",
    )
    with pytest.raises(ConfigError) as e:
        load_config(path)
    err = e.value
    assert (err.field, err.value) == ("nvidia-container-cli.root", "/run/nvidia/driver")
    hint = err.hint or ""
    assert "driver-root for nvidia-container-cli.root" in hint
    assert "no-cgroups for nvidia-container-cli.no-cgroups" in hint
    assert "remove nvidia-container-cli.load-kmods" in hint
    assert "valid keys: " in hint


def test_toolkit_nested_cdi_section(config_file: Callable[..., str]) -> None:
    path = config_file(
        '[nvidia-container-runtime]\nmode = "cdi"\n'
        '[nvidia-container-runtime.modes.cdi]\nspec-dirs = ["/etc/cdi"]\n'
        "[nvidia-container-runtime.modes.csv]\nmount-spec-path = '/x'\n",
    )
    with pytest.raises(ConfigError) as e:
        load_config(path)
    hint = e.value.hint or ""
    assert e.value.field == "nvidia-container-runtime.mode"
    assert "cdi-spec-dirs for nvidia-container-runtime.modes.cdi.spec-dirs" in hint
    assert "remove nvidia-container-runtime.modes.csv.mount-spec-path" in hint


def test_long_values_are_shortened_in_messages() -> None:
    with pytest.raises(ConfigError) as e:
        config_from_dict({"driver-root": "x" * 10000})
    assert len(str(e.value)) < 1000


def test_config_constructor_checks_values() -> None:
    with pytest.raises(ConfigError) as e:
        Config(mode="csv")  # type: ignore[arg-type]
    assert (e.value.field, e.value.value, e.value.path) == ("mode", "csv", None)
    with pytest.raises(ConfigError) as e2:
        Config(library_path=["/ok", "rel"], source="/etc/x.toml")  # type: ignore[arg-type]
    assert (e2.value.field, e2.value.path) == ("library-path[1]", "/etc/x.toml")
    c = Config(library_path=["/a"])  # type: ignore[arg-type]
    assert c.library_path == ("/a",)
    assert hash(c) == hash(Config(library_path=("/a",)))
    with pytest.raises(AttributeError):
        c.mode = "cdi"  # type: ignore[misc]


def test_capability_names_match_request_module() -> None:
    assert set(validate.CAPABILITIES) == ALL_CAPABILITIES
    assert list(validate.CAPABILITIES) == sorted(validate.CAPABILITIES)


# --- the hand checks and the schema agree ---------------------------------------------

DEFS = SCHEMA["$defs"]


def _resolve(prop: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in prop:
        ref = DEFS[prop["$ref"].rsplit("/", 1)[1]]
        prop = {**ref, **{k: v for k, v in prop.items() if k != "$ref"}}
    return prop


def _valid_values(prop: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values the schema accepts for ``prop``, generated from the schema itself."""
    prop = _resolve(prop)
    if "enum" in prop:
        return st.sampled_from(prop["enum"])
    if "const" in prop:
        return st.just(prop["const"])
    if "anyOf" in prop:
        return st.one_of([_valid_values(p) for p in prop["anyOf"]])
    if prop["type"] == "boolean":
        return st.booleans()
    if prop["type"] == "array":
        return st.lists(_valid_values(prop["items"]), min_size=prop.get("minItems", 0), max_size=3)
    assert prop["type"] == "string"
    pattern = prop["pattern"].removesuffix("(?!\\n)")
    return st.from_regex(pattern, fullmatch=True)


TOKENS = [
    "", ",", " ", "\n", "\t", "\0", "/", "@", "=", ".", "-", "_", "a", "Z", "9", "é", "\u0660",
    "\u00a0", "all", "compute", "utility", "video", "nvidia.com", "gpu", "cdi.k8s.io/",
    "DOCKER_RESOURCE_GPU", "/sbin/ldconfig", "auto", "legacy", "cdi", "info", "warn", "runc",
]  # fmt: skip
_strings = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=6).map("".join),
    st.text(max_size=8),
)
_scalars = st.one_of(
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    _strings,
    st.datetimes(),
    st.none(),
)
_any = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from([*KEYS, "x", "root"]), inner, max_size=2)
    ),
    max_leaves=6,
)


#: Characters that sit at the edges of the schema's patterns.
TRICKY = ["\n", " ", "\t", ",", "-", "_", ".", "/", "@", "=", "\0", "é", "\u0660", "0", "a"]


def _edited(value: str) -> st.SearchStrategy[Any]:
    """``value`` with one character appended, prepended or replaced, or otherwise cut."""
    tricky = st.sampled_from(TRICKY)
    index = st.integers(0, max(len(value) - 1, 0))

    def replace(ic: tuple[int, str]) -> str:
        return value[: ic[0]] + ic[1] + value[ic[0] + 1 :]

    return st.one_of(
        tricky.map(lambda c: value + c),
        tricky.map(lambda c: c + value),
        st.tuples(index, tricky).map(replace),
        index.map(lambda i: value[:i] + value[i + 1 :]),
        st.sampled_from([value.upper(), value + "," + value, [value], ""]),
    )


def _mutated(value: Any) -> st.SearchStrategy[Any]:
    """A value one small edit away from a valid one."""
    if isinstance(value, str):
        return _edited(value)
    if isinstance(value, list):

        def put(i: int) -> Callable[[Any], list[Any]]:
            return lambda e: [*value[:i], e, *value[i + 1 :]]

        return st.one_of(
            st.just(value[0] if value else ""),
            _strings.map(lambda s: [*value, s]),
            *(_edited(item).map(put(i)) for i, item in enumerate(value)),
        )
    return st.sampled_from([value, int(value), str(value).lower()])


def _near_values(key: str) -> st.SearchStrategy[Any]:
    valid = _valid_values(SCHEMA["properties"][key])
    edited = valid.flatmap(_mutated)
    joined = st.tuples(valid, valid).map(
        lambda ab: ab[0] + "," + ab[1] if isinstance(ab[0], str) else ab[0] + ab[1]
    )
    return st.one_of(valid, edited, edited, joined, _any)


_KEY_NAMES = [*KEYS, "driver_root", "bogus", "nvidia-container-cli"]


@st.composite
def _documents(draw: st.DrawFn) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    for key in draw(st.lists(st.sampled_from(_KEY_NAMES), max_size=5, unique=True)):
        doc[key] = draw(_near_values(key) if key in KEYS else _any)
    return doc


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(list(KEYS)), data=st.data())
def test_hand_checks_agree_with_schema_per_key(key: str, data: st.DataObject) -> None:
    doc = {key: data.draw(_near_values(key))}
    assert hand_ok(doc) == VALIDATOR.is_valid(doc), doc


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=_documents())
def test_hand_checks_agree_with_schema_documents(doc: dict[str, Any]) -> None:
    assert hand_ok(doc) == VALIDATOR.is_valid(doc), doc


@settings(max_examples=500, deadline=None)
@given(key=st.sampled_from(list(KEYS)), data=st.data())
def test_schema_valid_values_load(key: str, data: st.DataObject) -> None:
    value = data.draw(_valid_values(SCHEMA["properties"][key]))
    c = config_from_dict({key: value})
    assert c.as_dict()[key] == value


#: Values where Python's ``re`` and the hand checks could part ways: trailing newlines,
#: non-ASCII letters and digits, empty items.
EDGES: list[tuple[str, Any]] = [
    ("default-kind", "nvidia.com/gpu\n"),
    ("default-kind", "a/b"),
    ("default-kind", "é.com/gpu"),
    ("default-kind", "nvidia.com/gpu\u0660"),
    ("default-kind", "/gpu"),
    ("default-kind", "nvidia.com/"),
    ("default-kind", "nvidia.com/gpu-"),
    ("default-kind", "nvidia.com/gpu,nvidia.com/gpu"),
    ("supported-driver-capabilities", "all,compute"),
    ("supported-driver-capabilities", "compute,all"),
    ("supported-driver-capabilities", ",compute"),
    ("annotation-prefixes", ["cdi.k8s.io/\n"]),
    ("annotation-prefixes", ["/"]),
    ("swarm-resource", "A\n"),
    ("swarm-resource", "\n"),
    ("swarm-resource", "  A  ,B "),
    ("swarm-resource", "A,"),
    ("supported-driver-capabilities", "compute\n"),
    ("supported-driver-capabilities", "all\n"),
    ("supported-driver-capabilities", "compute,compute"),
    ("log-file", "\n"),
    ("log-file", "/\n"),
    ("log-file", ""),
    ("driver-root", "/\n"),
    ("driver-root", "/\0"),
    ("ldconfig", "@/\n"),
    ("ldconfig", "@"),
    ("ldconfig", "@@/sbin/ldconfig"),
    ("mode", "auto\n"),
    ("library-path", []),
    ("library-path", ["/"]),
    ("runtimes", []),
    ("runtimes", ["runc\n"]),
    ("runtimes", ["/usr/sbin/runc\n"]),
    ("runtimes", ["bin/runc"]),
    ("runtimes", [""]),
    ("runtimes", ["runc", "/"]),
    ("runtimes", ["ruñc"]),
]


@pytest.mark.parametrize(("key", "value"), EDGES)
def test_hand_checks_agree_with_schema_on_edges(key: str, value: Any) -> None:
    doc = {key: value}
    assert hand_ok(doc) == VALIDATOR.is_valid(doc)
