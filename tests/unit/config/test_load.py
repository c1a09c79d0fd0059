"""``ocihook.config.load``: which file is read, its bytes, parsing, and what loading costs."""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support import REPO
from support import modules_after as _modules_after

from ocihook.config import load
from ocihook.config.load import config_may_set, load_config, load_schema
from ocihook.config.scan import REQUEST_DETECTION_KEYS
from ocihook.config.validate import KEYS, Config, ConfigError, config_from_dict
from ocihook.core.hostroot import HostRoot

SPEC_SCHEMA_PATH = os.path.join(REPO, "specs", "config.schema.json")
PACKAGE_SCHEMA_PATH = os.path.join(REPO, "ocihook", "schemas", "config.schema.json")
EXAMPLE_PATH = os.path.join(REPO, "packaging", "config.toml.example")

with open(SPEC_SCHEMA_PATH) as _f:
    SCHEMA: dict[str, Any] = json.load(_f)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


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


def test_missing_default_file_means_defaults() -> None:
    assert load_config(environ={}) == Config()


def test_default_file_is_read() -> None:
    default = Path(load.DEFAULT_PATH)
    default.parent.mkdir(parents=True)
    default.write_text('driver-root = "/run/nvidia/driver"\n')
    c = load_config(environ={})
    assert c.driver_root == "/run/nvidia/driver"
    assert c.source == load.DEFAULT_PATH


def test_full_file(config_file: Callable[..., str]) -> None:
    path = config_file(FULL)
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


def test_partial_file_keeps_other_defaults(config_file: Callable[..., str]) -> None:
    c = load_config(config_file("no-cgroups = true\n"))
    assert c.no_cgroups is True
    assert c.as_dict() == {**Config().as_dict(), "no-cgroups": True}


def test_empty_file_is_all_defaults(config_file: Callable[..., str]) -> None:
    path = config_file("# nothing\n")
    assert load_config(path) == Config(source=path)


def test_environment_variable(config_file: Callable[..., str]) -> None:
    env_file = config_file('mode = "legacy"\n', "env.toml")
    flag_file = config_file('mode = "cdi"\n', "flag.toml")
    assert load_config(environ={"OCIHOOK_CONFIG": env_file}).mode == "legacy"
    # --config beats the variable
    assert load_config(flag_file, environ={"OCIHOOK_CONFIG": env_file}).mode == "cdi"
    # an empty variable is unset
    assert load_config(environ={"OCIHOOK_CONFIG": ""}) == Config()


def test_environment_defaults_to_os_environ(
    config_file: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OCIHOOK_CONFIG", config_file("disable-require = true\n"))
    assert load_config().disable_require is True
    assert load_config(environ={}).disable_require is False  # what hooks pass


def test_relative_path_reported_absolute(
    config_file: Callable[..., str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file("no-cgroups = true\n", "rel.toml")
    monkeypatch.chdir(tmp_path)
    assert load_config("rel.toml").source == os.path.join(str(tmp_path), "rel.toml")


def test_missing_explicit_file_is_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(ConfigError) as e:
        load_config(missing)
    assert e.value.path == missing
    assert "--config" in str(e.value) and missing in str(e.value)
    assert e.value.reference == "bad-config"
    with pytest.raises(ConfigError, match="OCIHOOK_CONFIG"):
        load_config(environ={"OCIHOOK_CONFIG": missing})


def test_unreadable_files(config_file: Callable[..., str], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(str(tmp_path))
    fifo = str(tmp_path / "fifo.toml")
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):  # and does not hang
        load_config(fifo)
    big = config_file(b"#" * (load.MAX_SIZE + 1), "big.toml")
    with pytest.raises(ConfigError, match="larger than"):
        load_config(big)
    with pytest.raises(ConfigError, match="UTF-8") as e:
        load_config(config_file(b'mode = "\xff"\n', "latin.toml"))
    assert "byte offset 8" in str(e.value)
    # a directory where the default file's directory should be: an error, not defaults
    Path(load.DEFAULT_PATH).parent.write_text("")
    with pytest.raises(ConfigError, match="cannot read configuration file: Not a directory"):
        load_config(environ={})


def test_toml_syntax_error_names_the_line(config_file: Callable[..., str]) -> None:
    path = config_file('mode = "auto"\n\nno-cgroups = \n')
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert e.value.line == 3
    assert "line 3" in str(e.value) and path in str(e.value)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="invalid TOML") as e2:  # duplicate key
        load_config(config_file("mode = 'auto'\nmode = 'cdi'\n", "dup.toml"))
    assert e2.value.line == 2


def test_deeply_nested_toml_is_an_error(config_file: Callable[..., str]) -> None:
    path = config_file("x = " + "[" * 50000 + "]" * 50000 + "\n")
    with pytest.raises(ConfigError):
        load_config(path)


def test_config_may_set(config_file: Callable[..., str], tmp_path: Path) -> None:
    keys = REQUEST_DETECTION_KEYS
    assert not config_may_set(keys, environ={})  # no default file
    assert not config_may_set(keys, config_file("no-cgroups = true\n", "a.toml"))
    assert config_may_set(keys, config_file('swarm-resource = "X"\n', "b.toml"))
    assert config_may_set(keys, config_file("'annotation-prefixes' = []\n", "c.toml"))
    # a quoted key can spell a name with escapes only
    assert config_may_set(keys, config_file('"swarm\\u002dresource" = "X"\n', "d.toml"))
    # an explicit file that cannot be read: the caller's load_config reports it
    assert config_may_set(keys, str(tmp_path / "missing.toml"))
    assert config_may_set(keys, environ={"OCIHOOK_CONFIG": str(tmp_path / "missing.toml")})


def test_import_is_cheap() -> None:
    baseline = _modules_after("pass")
    loaded = _modules_after("import ocihook.config.load, ocihook.config.scan") - baseline
    heavy = {"jsonschema", "typing", "dataclasses", "tomllib", "re", "json", "difflib", "click"}
    assert not (heavy & loaded), heavy & loaded


def test_no_file_loads_no_parser(tmp_path: Path) -> None:
    baseline = _modules_after("pass")
    missing = str(tmp_path / "absent" / "config.toml")
    loaded = _modules_after(
        "import ocihook.config.load as c, ocihook.config.validate as v\n"
        f"c.DEFAULT_PATH = {missing!r}\nassert c.load_config(environ={{}}) == v.Config()"
    )
    assert not ({"jsonschema", "tomllib", "typing", "dataclasses"} & (loaded - baseline))


def test_a_file_loads_no_jsonschema(config_file: Callable[..., str]) -> None:
    path = config_file(FULL)
    # no parse cache (a warm /run/ocihook would spare the parse this test looks at)
    loaded = _modules_after(
        "from ocihook.linux import cachestore\n"
        "cachestore.DEFAULT_DIR = '/nonexistent'\n"
        f"import ocihook.config.load as c\nassert c.load_config({path!r}).source == {path!r}"
    )
    assert "jsonschema" not in loaded
    # parsed by tomllib, whose modules this one-shot process dropped again once parsed
    assert "tomllib" not in loaded


def test_schema_is_valid_and_shipped_identical() -> None:
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    with open(SPEC_SCHEMA_PATH, "rb") as a, open(PACKAGE_SCHEMA_PATH, "rb") as b:
        assert a.read() == b.read(), "ocihook/schemas/config.schema.json must copy specs/"
    assert load_schema() == SCHEMA


def _example_uncommented() -> str:
    """The example with every ``# key = value`` line uncommented."""
    out = []
    with open(EXAMPLE_PATH) as f:
        for line in f:
            body = line[2:] if line.startswith("# ") else ""
            name = body.partition("=")[0].strip()
            out.append(body if name in KEYS else line)
    return "".join(out)


def test_example_file(config_file: Callable[..., str]) -> None:
    # as shipped: everything commented out, so the defaults
    assert load_config(EXAMPLE_PATH) == Config(source=EXAMPLE_PATH)
    text = _example_uncommented()
    doc = tomllib.loads(text)
    assert list(doc) == list(KEYS), "the example shows every key once, in the docs' order"
    VALIDATOR.validate(doc)
    path = config_file(text)
    assert load_config(path) == Config(source=path), "the example shows the defaults"
