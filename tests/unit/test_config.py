"""The operator configuration file: loading, errors, the schema and the hand checks agree."""

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

from ocihook import config as cfgmod
from ocihook.config import (
    KEYS,
    Config,
    ConfigError,
    config_from_dict,
    config_may_set,
    load_config,
    load_schema,
)
from ocihook.core.hostroot import HostRoot
from ocihook.request import ALL_CAPABILITIES

SPEC_SCHEMA_PATH = os.path.join(REPO, "specs", "config.schema.json")
PACKAGE_SCHEMA_PATH = os.path.join(REPO, "ocihook", "schemas", "config.schema.json")
EXAMPLE_PATH = os.path.join(REPO, "packaging", "config.toml.example")

with open(SPEC_SCHEMA_PATH) as _f:
    SCHEMA: dict[str, Any] = json.load(_f)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


@pytest.fixture(autouse=True)
def _no_default_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Tests never read the machine's /etc/ocihook/config.toml or OCIHOOK_CONFIG."""
    monkeypatch.setattr(cfgmod, "DEFAULT_PATH", str(tmp_path / "etc-ocihook" / "config.toml"))
    monkeypatch.delenv("OCIHOOK_CONFIG", raising=False)


def write(tmp_path: Any, text: str | bytes, name: str = "config.toml") -> str:
    path = os.path.join(str(tmp_path), name)
    with open(path, "wb") as f:
        f.write(text.encode() if isinstance(text, str) else text)
    return path


def hand_ok(doc: dict[str, Any]) -> bool:
    try:
        config_from_dict(doc)
    except ConfigError:
        return False
    return True


# --- defaults and where the file comes from -----------------------------------------


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


def test_missing_default_file_means_defaults() -> None:
    assert load_config(environ={}) == Config()


def test_default_file_is_read(tmp_path: Any) -> None:
    os.makedirs(os.path.dirname(cfgmod.DEFAULT_PATH))
    write(os.path.dirname(cfgmod.DEFAULT_PATH), 'driver-root = "/run/nvidia/driver"\n')
    c = load_config(environ={})
    assert c.driver_root == "/run/nvidia/driver"
    assert c.source == cfgmod.DEFAULT_PATH


FULL = """\
driver-root = "/run/nvidia/driver"
dev-root = "/host"
ldcache = "/etc/ld.so.cache.d/nvidia"
ldconfig = "/sbin/ldconfig.real"
library-path = ["/var/lib/nvidia/lib64", "/opt/nvidia/lib"]
no-cgroups = true
mode = "cdi"
cdi-spec-dirs = ["/etc/cdi"]
default-kind = "example.com/accel"
annotation-prefixes = ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"]
accept-nvidia-visible-devices-envvar-when-unprivileged = false
accept-cdi-annotations-when-unprivileged = false
accept-nvidia-visible-devices-as-volume-mounts = true
swarm-resource = "DOCKER_RESOURCE_GPU, DOCKER_RESOURCE_NVIDIA-GPU"
supported-driver-capabilities = "compute,utility"
disable-require = true
log-file = "/var/log/ocihook.core.log"
log-level = "debug"
runtimes = ["crun", "/usr/local/sbin/runc"]
"""


def test_full_file(tmp_path: Any) -> None:
    path = write(tmp_path, FULL)
    c = load_config(path)
    assert c == Config(
        driver_root="/run/nvidia/driver",
        dev_root="/host",
        ldcache="/etc/ld.so.cache.d/nvidia",
        ldconfig="/sbin/ldconfig.real",
        library_path=("/var/lib/nvidia/lib64", "/opt/nvidia/lib"),
        no_cgroups=True,
        mode="cdi",
        cdi_spec_dirs=("/etc/cdi",),
        default_kind="example.com/accel",
        annotation_prefixes=("cdi.k8s.io/", "nvidia.cdi.k8s.io/"),
        accept_nvidia_visible_devices_envvar_when_unprivileged=False,
        accept_cdi_annotations_when_unprivileged=False,
        accept_nvidia_visible_devices_as_volume_mounts=True,
        swarm_resource="DOCKER_RESOURCE_GPU, DOCKER_RESOURCE_NVIDIA-GPU",
        supported_driver_capabilities="compute,utility",
        disable_require=True,
        log_file="/var/log/ocihook.core.log",
        log_level="debug",
        runtimes=("crun", "/usr/local/sbin/runc"),
        source=path,
    )
    assert not c.ldconfig_on_host
    assert c.swarm_envvars == ("DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_NVIDIA-GPU")
    assert c.driver_capabilities == {"compute", "utility"}
    assert c.host_root() == HostRoot(
        driver_root="/run/nvidia/driver",
        dev_root="/host",
        ldcache="/etc/ld.so.cache.d/nvidia",
        library_dirs=("/var/lib/nvidia/lib64", "/opt/nvidia/lib"),
    )
    assert VALIDATOR.is_valid(tomllib.loads(FULL))
    # as_dict round-trips
    assert config_from_dict(c.as_dict(), source=path) == c


def test_partial_file_keeps_other_defaults(tmp_path: Any) -> None:
    c = load_config(write(tmp_path, "no-cgroups = true\n"))
    assert c.no_cgroups is True
    assert c.as_dict() == {**Config().as_dict(), "no-cgroups": True}


def test_empty_file_is_all_defaults(tmp_path: Any) -> None:
    path = write(tmp_path, "# nothing\n")
    assert load_config(path) == Config(source=path)


def test_host_root_normalises_roots() -> None:
    c = Config(driver_root="/run/nvidia/driver/", dev_root="/host/./")
    assert c.host_root().driver_root == "/run/nvidia/driver"
    assert c.host_root().dev_root == "/host"


def test_environment_variable(tmp_path: Any) -> None:
    env_file = write(tmp_path, 'mode = "legacy"\n', "env.toml")
    flag_file = write(tmp_path, 'mode = "cdi"\n', "flag.toml")
    assert load_config(environ={"OCIHOOK_CONFIG": env_file}).mode == "legacy"
    # --config beats the variable
    assert load_config(flag_file, environ={"OCIHOOK_CONFIG": env_file}).mode == "cdi"
    # an empty variable is unset
    assert load_config(environ={"OCIHOOK_CONFIG": ""}) == Config()


def test_environment_defaults_to_os_environ(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCIHOOK_CONFIG", write(tmp_path, "disable-require = true\n"))
    assert load_config().disable_require is True
    assert load_config(environ={}).disable_require is False  # what hooks pass


def test_relative_path_reported_absolute(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, "no-cgroups = true\n", "rel.toml")
    monkeypatch.chdir(tmp_path)
    assert load_config("rel.toml").source == os.path.join(str(tmp_path), "rel.toml")


def test_missing_explicit_file_is_an_error(tmp_path: Any) -> None:
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(ConfigError) as e:
        load_config(missing)
    assert e.value.path == missing
    assert "--config" in str(e.value) and missing in str(e.value)
    assert e.value.reference == "bad-config"
    with pytest.raises(ConfigError, match="OCIHOOK_CONFIG"):
        load_config(environ={"OCIHOOK_CONFIG": missing})


def test_unreadable_files(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(str(tmp_path))
    fifo = str(tmp_path / "fifo.toml")
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):  # and does not hang
        load_config(fifo)
    big = write(tmp_path, b"#" * (cfgmod.MAX_SIZE + 1), "big.toml")
    with pytest.raises(ConfigError, match="larger than"):
        load_config(big)
    with pytest.raises(ConfigError, match="UTF-8") as e:
        load_config(write(tmp_path, b'mode = "\xff"\n', "latin.toml"))
    assert "byte offset 8" in str(e.value)
    # a directory where the default file's directory should be: an error, not defaults
    os.makedirs(os.path.dirname(os.path.dirname(cfgmod.DEFAULT_PATH)), exist_ok=True)
    write(os.path.dirname(os.path.dirname(cfgmod.DEFAULT_PATH)), "", "etc-ocihook")
    with pytest.raises(ConfigError, match="cannot open"):
        load_config(environ={})


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
    tmp_path: Any, key: str, rhs: str, field: str, value: Any
) -> None:
    other = "no-cgroups = false" if key != "no-cgroups" else 'mode = "auto"'
    path = write(tmp_path, f"# comment\n{other}\n{key} = {rhs}\n")
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


def test_first_problem_in_file_order_is_reported(tmp_path: Any) -> None:
    path = write(tmp_path, 'log-level = "loud"\nmode = "csv"\n')
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.field == "log-level"


def test_unknown_key_lists_valid_keys(tmp_path: Any) -> None:
    path = write(tmp_path, 'no-cgroup = true\nmode = "auto"\n')
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


def test_toolkit_section_is_refused_with_the_mapping(tmp_path: Any) -> None:
    path = write(
        tmp_path,
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


def test_toolkit_nested_cdi_section(tmp_path: Any) -> None:
    path = write(
        tmp_path,
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


def test_every_toolkit_mapping_names_a_key() -> None:
    for ours in cfgmod.TOOLKIT_KEYS.values():
        assert ours is None or ours in KEYS
    for toolkit, ours in cfgmod.TOOLKIT_KEYS.items():
        if ours is not None:
            assert toolkit in (cfgmod.__doc__ or "")


def test_toml_syntax_error_names_the_line(tmp_path: Any) -> None:
    path = write(tmp_path, 'mode = "auto"\n\nno-cgroups = \n')
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.line == 3
    assert "line 3" in str(e.value) and path in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="invalid TOML") as e2:  # duplicate key
        load_config(write(tmp_path, "mode = 'auto'\nmode = 'cdi'\n", "dup.toml"))
    assert e2.value.line == 2


def test_deeply_nested_toml_is_an_error(tmp_path: Any) -> None:
    path = write(tmp_path, "x = " + "[" * 50000 + "]" * 50000 + "\n")
    with pytest.raises(ConfigError):
        load_config(path)


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


# --- the start path -------------------------------------------------------------------


def test_config_may_set(tmp_path: Any) -> None:
    keys = cfgmod.REQUEST_DETECTION_KEYS
    assert not config_may_set(keys, environ={})  # no default file
    assert not config_may_set(keys, write(tmp_path, "no-cgroups = true\n", "a.toml"))
    assert config_may_set(keys, write(tmp_path, 'swarm-resource = "X"\n', "b.toml"))
    assert config_may_set(keys, write(tmp_path, "'annotation-prefixes' = []\n", "c.toml"))
    # a quoted key can spell a name with escapes only
    assert config_may_set(keys, write(tmp_path, '"swarm\\u002dresource" = "X"\n', "d.toml"))
    # an explicit file that cannot be read: the caller's load_config reports it
    assert config_may_set(keys, str(tmp_path / "missing.toml"))
    assert config_may_set(keys, environ={"OCIHOOK_CONFIG": str(tmp_path / "missing.toml")})


def test_extra_request_markers() -> None:
    assert Config().extra_request_markers() == (b"cdi.k8s.io",)
    c = Config(
        swarm_resource="DOCKER_RESOURCE_GPU, B",
        annotation_prefixes=("nvidia.cdi.k8s.io/", "x/", "/"),
        accept_nvidia_visible_devices_as_volume_mounts=True,
    )
    assert c.extra_request_markers() == (
        b"DOCKER_RESOURCE_GPU",
        b"B",
        b"nvidia.cdi.k8s.io",
        b"x",
        b"/",
        b"nvidia-container-devices",
    )
    # each marker occurs in the JSON of a request, whichever way JSON writes its slashes
    spec = json.dumps(
        {
            "annotations": {"nvidia.cdi.k8s.io/a": "nvidia.com/gpu=0"},
            "mounts": [{"destination": "/var/run/nvidia-container-devices/0"}],
        }
    )
    for escaped in (spec, spec.replace("/", "\\/")):
        assert b"nvidia.cdi.k8s.io" in escaped.encode()
        assert b"nvidia-container-devices" in escaped.encode()


# --- the schema, the example file and the docs ---------------------------------------


def test_schema_is_valid_and_shipped_identical() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    with open(SPEC_SCHEMA_PATH, "rb") as a, open(PACKAGE_SCHEMA_PATH, "rb") as b:
        assert a.read() == b.read(), "ocihook/schemas/config.schema.json must copy specs/"
    assert load_schema() == SCHEMA


def test_capability_names_match_request_module() -> None:
    assert set(cfgmod.CAPABILITIES) == ALL_CAPABILITIES
    assert list(cfgmod.CAPABILITIES) == sorted(cfgmod.CAPABILITIES)


def _example_uncommented() -> str:
    """The example with every ``# key = value`` line uncommented."""
    out = []
    with open(EXAMPLE_PATH) as f:
        for line in f:
            body = line[2:] if line.startswith("# ") else ""
            name = body.partition("=")[0].strip()
            out.append(body if name in KEYS else line)
    return "".join(out)


def test_example_file(tmp_path: Any) -> None:
    # as shipped: everything commented out, so the defaults
    assert load_config(EXAMPLE_PATH) == Config(source=EXAMPLE_PATH)
    text = _example_uncommented()
    doc = tomllib.loads(text)
    assert list(doc) == list(KEYS), "the example shows every key once, in the docs' order"
    VALIDATOR.validate(doc)
    path = write(tmp_path, text)
    assert load_config(path) == Config(source=path), "the example shows the defaults"


def test_docstring_documents_every_key() -> None:
    doc = cfgmod.__doc__ or ""
    table = doc.split("Keys (all top-level", 1)[1].split("A *path*", 1)[0]
    documented = [line.split()[0] for line in table.splitlines() if line[:1].isalpha()]
    assert documented[1:] == list(KEYS)  # after the "key" heading


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
