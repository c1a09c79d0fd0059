"""``ocihook.config.migrate`` and ``ocihook config migrate``: the NVIDIA Container
Toolkit's ``config.toml`` converted to ocihook's flat file, every dropped or changed key
named once."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import run_cli

from ocihook.config import migrate
from ocihook.config.load import load_config
from ocihook.config.migrate import migrate_toolkit_config, render_config
from ocihook.config.validate import KEYS, TOOLKIT_KEYS, Config, config_from_dict
from ocihook.core.errors import ConfigError

#: The file the toolkit's packages install (1.17), options as a migrating host sets them.
TOOLKIT_FILE = """\
#accept-nvidia-visible-devices-as-volume-mounts = false
accept-nvidia-visible-devices-envvar-when-unprivileged = false
disable-require = false
supported-driver-capabilities = "compat32,compute, display,graphics,ngx,utility,video"
swarm-resource = "DOCKER_RESOURCE_GPU, DOCKER_RESOURCE_NVIDIA_GPU,"

[nvidia-container-cli]
#debug = "/var/log/nvidia-container-toolkit.log"
environment = []
ldconfig = "@/sbin/ldconfig.real"
load-kmods = true
no-cgroups = true
root = "/run/nvidia/driver"
#user = "root:video"

[nvidia-container-runtime]
debug = "/var/log/nvidia-container-runtime.log"
log-level = "trace"
mode = "cdi"
runtimes = ["docker-runc", "runc", "crun"]

[nvidia-container-runtime.modes]

[nvidia-container-runtime.modes.cdi]
annotation-prefixes = ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"]
default-kind = "nvidia.com/gpu"
spec-dirs = ["/etc/cdi", "/var/run/cdi"]

[nvidia-container-runtime.modes.csv]
mount-spec-path = "/etc/nvidia-container-runtime/host-files-for-container.d"

[nvidia-container-runtime.modes.legacy]
cuda-compat-mode = "hook"

[nvidia-container-runtime-hook]
path = "nvidia-container-runtime-hook"
skip-mode-detection = false

[nvidia-ctk]
path = "nvidia-ctk"

[features]
disable-imex-channel-creation = true
"""


def test_the_packaged_file_converts_key_by_key() -> None:
    m = migrate_toolkit_config(tomllib.loads(TOOLKIT_FILE))
    assert m.document == {
        "accept-nvidia-visible-devices-envvar-when-unprivileged": False,
        "disable-require": False,
        "supported-driver-capabilities": "compat32,compute,display,graphics,ngx,utility,video",
        "swarm-resource": "DOCKER_RESOURCE_GPU,DOCKER_RESOURCE_NVIDIA_GPU",
        "ldconfig": "@/sbin/ldconfig.real",
        "no-cgroups": True,
        "driver-root": "/run/nvidia/driver",
        "log-file": "/var/log/nvidia-container-runtime.log",
        "log-level": "debug",
        "mode": "cdi",
        "runtimes": ["docker-runc", "runc", "crun"],
        "annotation-prefixes": ["cdi.k8s.io/", "nvidia.cdi.k8s.io/"],
        "default-kind": "nvidia.com/gpu",
        "cdi-spec-dirs": ["/etc/cdi", "/var/run/cdi"],
        "cuda-compat": "ldconfig",
    }
    assert [n.split(" ", 1)[0] for n in m.notes] == [
        "nvidia-container-cli.environment",
        "nvidia-container-cli.load-kmods",
        "nvidia-container-runtime.log-level",
        "nvidia-container-runtime.modes.csv.mount-spec-path",
        "nvidia-container-runtime.modes.legacy.cuda-compat-mode",
        "nvidia-container-runtime-hook.path",
        "nvidia-container-runtime-hook.skip-mode-detection",
        "nvidia-ctk.path",
        "features.disable-imex-channel-creation",
    ]
    assert "becomes 'ldconfig'" in m.notes[4] and "becomes 'debug'" in m.notes[2]
    # what is written is what ocihook reads
    text = render_config(m.document, "converted")
    assert text.startswith("# converted\n")
    cfg = config_from_dict(tomllib.loads(text))
    assert cfg.mode == "cdi" and cfg.no_cgroups and cfg.driver_root == "/run/nvidia/driver"
    assert cfg.swarm_envvars == ("DOCKER_RESOURCE_GPU", "DOCKER_RESOURCE_NVIDIA_GPU")


def test_defaults_and_the_dev_null_log_are_left_out() -> None:
    m = migrate_toolkit_config(
        {"nvidia-container-runtime": {"debug": "/dev/null"}, "nvidia-container-cli": {"root": ""}}
    )
    assert m.document == {} and m.notes == ()
    assert config_from_dict(m.document) == Config()


def test_two_log_files_keep_the_first_and_say_so() -> None:
    m = migrate_toolkit_config(
        {
            "nvidia-container-cli": {"debug": "/var/log/a.log"},
            "nvidia-container-runtime": {"debug": "/var/log/b.log"},
        }
    )
    assert m.document == {"log-file": "/var/log/a.log"}
    assert m.notes == (
        "nvidia-container-runtime.debug ignored: log-file is already set to '/var/log/a.log' "
        "by nvidia-container-cli.debug",
    )


def test_jit_cdi_becomes_auto() -> None:
    m = migrate_toolkit_config({"nvidia-container-runtime": {"mode": "jit-cdi"}})
    assert m.document == {"mode": "auto"} and "'jit-cdi' becomes 'auto'" in m.notes[0]


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"nvidia-container-runtime": {"mode": "csv"}}, "nvidia-container-runtime.mode", "csv"),
        (
            {"nvidia-container-runtime": {"log-level": "loud"}},
            "nvidia-container-runtime.log-level",
            "unknown log level",
        ),
        ({"nvidia-container-cli": {"root": "relative"}}, "nvidia-container-cli.root", "absolute"),
        (
            {"nvidia-container-cli": {"no-cgroups": "yes"}},
            "nvidia-container-cli.no-cgroups",
            "boolean",
        ),
        (
            {"supported-driver-capabilities": "compute,bogus"},
            "supported-driver-capabilities",
            "capab",
        ),
    ],
)
def test_values_without_meaning_are_refused_naming_the_toolkit_key(
    data: dict[str, object], field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as ei:
        migrate_toolkit_config(data, source="/etc/nvidia-container-runtime/config.toml")
    assert ei.value.field == field
    assert message in ei.value.message
    assert ei.value.path == "/etc/nvidia-container-runtime/config.toml"


def test_an_ocihook_file_with_toolkit_sections_points_at_migrate(tmp_path: Path) -> None:
    f = tmp_path / "config.toml"
    f.write_text(TOOLKIT_FILE)
    with pytest.raises(ConfigError) as ei:
        load_config(str(f))
    assert "ocihook config migrate" in (ei.value.hint or "")


@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=20))
def test_rendered_strings_parse_back(text: str) -> None:
    doc = {"log-file": "/" + text.replace("\0", ""), "runtimes": ["runc", "/" + text]}
    parsed = tomllib.loads(render_config(doc))
    assert parsed == doc


def test_command_writes_the_file_and_names_each_dropped_key_once(tmp_path: Path) -> None:
    src = tmp_path / "toolkit.toml"
    src.write_text(TOOLKIT_FILE)
    out = tmp_path / "ocihook.toml"
    r = run_cli("config", "migrate", str(src), "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert r.stderr.count("ocihook: note: ") == 9
    assert r.stderr.count("nvidia-container-cli.load-kmods") == 1
    assert os.stat(out).st_mode & 0o777 == 0o644
    assert load_config(str(out)).mode == "cdi"
    again = run_cli("config", "migrate", str(src), "--output", str(out))
    assert again.returncode == 1 and "exists; pass --force" in again.stderr
    assert run_cli("config", "migrate", str(src), "--output", str(out), "--force").returncode == 0
    bad = tmp_path / "csv.toml"
    bad.write_text('[nvidia-container-runtime]\nmode = "csv"\n')
    r = run_cli("config", "migrate", str(bad))
    assert r.returncode == 10 and "nvidia-container-runtime.mode" in r.stderr and r.stdout == ""


def test_every_toolkit_mapping_names_a_key() -> None:
    for ours in TOOLKIT_KEYS.values():
        assert ours is None or ours in KEYS
    for toolkit, ours in TOOLKIT_KEYS.items():
        if ours is not None:
            assert toolkit in (migrate.__doc__ or "")


def test_missing_toolkit_file_says_whose_file_and_how_to_name_it(tmp_path: Path) -> None:
    r = run_cli("config", "migrate", str(tmp_path / "nope.toml"))
    assert r.returncode == 10
    assert r.stderr == (
        "ocihook: error[bad-config]: the NVIDIA Container Toolkit's configuration file not "
        f"found (file {tmp_path / 'nope.toml'}); hint: name the toolkit's config.toml: "
        "ocihook config migrate PATH\n"
    )
