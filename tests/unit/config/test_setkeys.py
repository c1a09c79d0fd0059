"""``ocihook.config.setkeys``: ``config --set`` reads each value by its key's type in the
schema, keeps the file's comments and other keys, and refuses what every command would
refuse."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.config.load import load_schema
from ocihook.config.setkeys import key_type, parse_setting, set_keys
from ocihook.config.validate import KEYS
from ocihook.core.errors import ConfigError

SCHEMA = load_schema()
BOOLEANS = [k for k in KEYS if key_type(SCHEMA, k) == "boolean"]
ARRAYS = [k for k in KEYS if key_type(SCHEMA, k) == "array"]


def test_every_key_has_a_type_from_the_schema() -> None:
    kinds = {k: key_type(SCHEMA, k) for k in KEYS}
    assert set(kinds.values()) == {"boolean", "string", "array"}
    assert kinds["no-cgroups"] == "boolean" and kinds["runtimes"] == "array"
    assert kinds["driver-root"] == "string"  # through $ref absolutePath


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("no-cgroups", ("no-cgroups", True)),
        ("no-cgroups=false", ("no-cgroups", False)),
        ("runtimes=crun:runc", ("runtimes", ["crun", "runc"])),
        ("library-path=", ("library-path", [])),
        ("log-file=/var/log/a=b", ("log-file", "/var/log/a=b")),
    ],
)
def test_parse_setting(setting: str, expected: tuple[str, object]) -> None:
    assert parse_setting(SCHEMA, setting) == expected


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("nope=1", "unknown configuration key"),
        ("no-cgroups=yes", "a boolean key takes true or false"),
        ("mode", "a value is required"),
    ],
)
def test_parse_setting_refuses(setting: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_setting(SCHEMA, setting)


def test_comments_and_order_are_kept_and_new_keys_appended() -> None:
    text = '# the operator\'s notes\nmode = "legacy"  # for the old hook\n\nlog-level = "info"\n'
    new = set_keys(text, ["log-level=debug", "no-cgroups"], SCHEMA, path="c.toml")
    assert new == (
        '# the operator\'s notes\nmode = "legacy"  # for the old hook\n\n'
        'log-level = "debug"\nno-cgroups = true\n'
    )
    assert set_keys(new, ["mode=legacy"], SCHEMA, path="c.toml") == new


def test_the_last_value_of_a_key_wins() -> None:
    new = set_keys("", ["mode=cdi", "mode=auto"], SCHEMA, path="c.toml")
    assert tomllib.loads(new) == {"mode": "auto"}


@pytest.mark.parametrize(
    ("setting", "field"),
    [("mode=csv", "mode"), ("driver-root=relative", "driver-root"), ("runtimes=", "runtimes")],
)
def test_a_value_the_loader_refuses_is_refused(setting: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        set_keys("", [setting], SCHEMA, path="/etc/ocihook/config.toml")
    assert err.value.path == "/etc/ocihook/config.toml" and err.value.field == field


@given(
    key=st.sampled_from(BOOLEANS),
    value=st.booleans(),
    other=st.sampled_from(BOOLEANS),
)
def test_boolean_round_trip(key: str, value: bool, other: str) -> None:
    text = f"{other} = true\n"
    new = set_keys(text, [f"{key}={'true' if value else 'false'}"], SCHEMA, path="c")
    assert tomllib.loads(new) == ({other: True} | {key: value})


@given(st.lists(st.sampled_from(["/opt/a", "/usr/lib/x", "/b"]), min_size=0, max_size=4))
def test_path_arrays_round_trip(paths: list[str]) -> None:
    new = set_keys("", ["library-path=" + ":".join(paths)], SCHEMA, path="c")
    assert tomllib.loads(new)["library-path"] == paths
