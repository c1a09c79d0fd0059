"""CDI spec files: model, loader, validation rules, minimum version, schema agreement."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import subprocess
import sys
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import GOOD_CDI_YAML as GOOD_YAML
from support import REPO

from ocihook.cdi import (
    HOOK_NAMES,
    KNOWN_VERSIONS,
    CdiError,
    ContainerEdits,
    Device,
    DeviceNode,
    Hook,
    IntelRdt,
    Mount,
    NetDevice,
    Spec,
    load_spec,
    minimum_version,
    spec_from_dict,
)

with open(os.path.join(REPO, "specs/cdi.schema.json")) as _f:
    SCHEMA = json.load(_f)
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
PATH = "/etc/cdi/vendor.yaml"


def schema_ok(data: object) -> bool:
    return VALIDATOR.is_valid(data)


def model_ok(data: object) -> bool:
    try:
        spec_from_dict(data, path=PATH)
    except CdiError:
        return False
    return True


def make(version: object = "0.3.0", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "cdiVersion": version,
        "kind": "nvidia.com/gpu",
        "devices": [
            {
                "name": "gpu0",
                "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]},
            }
        ],
    }
    spec.update(extra)
    return spec


def edits(**e: Any) -> dict[str, Any]:
    """A spec whose only device has edits ``e`` (plus a device node)."""
    spec = make("1.1.0")
    spec["devices"][0]["containerEdits"].update(e)
    return spec


FULL = {
    "cdiVersion": "1.1.0",
    "kind": "nvidia.com/gpu",
    "annotations": {"example.com/owner": "ocihook"},
    "devices": [
        {
            "name": "0",
            "annotations": {"index": "0"},
            "containerEdits": {
                "deviceNodes": [
                    {
                        "path": "/dev/nvidia0",
                        "hostPath": "/dev/nvidia0",
                        "type": "c",
                        "major": 195,
                        "minor": 0,
                        "fileMode": 438,
                        "permissions": "rw",
                        "uid": 0,
                        "gid": 0,
                    }
                ],
                "netDevices": [{"hostInterfaceName": "ib0", "name": "net1"}],
            },
        },
        {"name": "all", "containerEdits": {"env": ["A=1"], "additionalGids": [44]}},
    ],
    "containerEdits": {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": "/dev/nvidiactl"}],
        "hooks": [
            {
                "hookName": "createContainer",
                "path": "/usr/bin/nvidia-cdi-hook",
                "args": ["nvidia-cdi-hook", "update-ldcache"],
                "env": ["X=y"],
                "timeout": 10,
            }
        ],
        "mounts": [
            {
                "hostPath": "/usr/lib/libcuda.so.1",
                "containerPath": "/usr/lib/libcuda.so.1",
                "options": ["ro", "nosuid", "nodev", "bind"],
                "type": "bind",
            }
        ],
        "intelRdt": {"closID": "c1", "schemata": ["L3:0=ff"], "enableMonitoring": True},
    },
}

VALID_FIXTURES: dict[str, dict[str, Any]] = {
    "minimal": make(),
    "full-1.1.0": FULL,
    "v-prefix": make("v0.3.0"),
    "newer-than-needed": make("0.8.0"),
    "null-optional-fields": make(
        "0.3.0",
        containerEdits={"env": None, "mounts": None, "intelRdt": None},
        annotations=None,
    ),
    "null-top-edits": make(containerEdits=None),
    "empty-top-edits": make(containerEdits={}),
    "empty-lists-in-device": edits(env=[], mounts=[]),
    "digit-name-0.5.0": make("0.5.0", devices=[{"name": "0", "containerEdits": {"env": ["A=b"]}}]),
    "dotted-class-0.6.0": make("0.6.0", kind="vendor.com/class.sub"),
    "intelRdt-empty-0.7.0": make(
        "0.7.0", devices=[{"name": "d", "containerEdits": {"intelRdt": {}}}]
    ),
    "legacy-rdt-0.7.0": make(
        "0.7.0",
        devices=[{"name": "d", "containerEdits": {"intelRdt": {"enableCMT": True}}}],
    ),
    "mount-type-0.4.0": make(
        "0.4.0",
        devices=[
            {
                "name": "d",
                "containerEdits": {
                    "mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "x"}]
                },
            }
        ],
    ),
    "permissions-none": edits(deviceNodes=[{"path": "/dev/x", "permissions": "none"}]),
    "env-empty-value": edits(env=["A="]),
    "annotation-key-forms": make(
        "0.6.0",
        annotations={"a": "", "a.b-c_d": "x", "example.com/name": "y", "k8s.io/Z9": "z"},
    ),
}

# (name, data, JSON path of the error, text in the message)
INVALID_FIXTURES: list[tuple[str, Any, str | None, str]] = [
    ("not-an-object", [], "(document)", "expected an object"),
    ("no-version", {k: v for k, v in make().items() if k != "cdiVersion"}, "cdiVersion", "missing"),
    ("version-0.2.0", make("0.2.0"), "cdiVersion", "at least v0.3.0"),
    ("version-0.1.0", make("v0.1.0"), "cdiVersion", "at least v0.3.0"),
    ("version-unknown", make("1.2.0"), "cdiVersion", "unsupported"),
    ("version-padded", make("00.3.0"), "cdiVersion", "unsupported"),
    ("version-junk", make("latest"), "cdiVersion", "not MAJOR.MINOR.PATCH"),
    ("version-int", make(1), "cdiVersion", "expected a string"),
    ("kind-no-slash", make(kind="nvidia.com"), "kind", "vendor/class"),
    ("kind-bad-vendor", make(kind="_nvidia.com/gpu"), "kind", "vendor"),
    ("kind-bad-class", make(kind="nvidia.com/gpu-"), "kind", "class"),
    ("no-devices", make(devices=[]), "devices", "at least one device"),
    ("devices-null", make(devices=None), "devices", "missing"),
    (
        "device-name-bad",
        make(devices=[{"name": "gpu:", "containerEdits": {"env": ["A=b"]}}]),
        "devices[0].name",
        "device name",
    ),
    (
        "duplicate-names",
        make(
            devices=[
                {"name": "a", "containerEdits": {"env": ["A=b"]}},
                {"name": "a", "containerEdits": {"env": ["A=c"]}},
            ]
        ),
        "devices[1].name",
        "duplicate",
    ),
    (
        "device-empty-edits",
        make(devices=[{"name": "a", "containerEdits": {}}]),
        "devices[0].containerEdits",
        "non-empty",
    ),
    (
        "device-only-empty-lists",
        make(devices=[{"name": "a", "containerEdits": {"env": [], "mounts": None}}]),
        "devices[0].containerEdits",
        "non-empty",
    ),
    (
        "device-no-edits",
        make(devices=[{"name": "a"}]),
        "devices[0].containerEdits",
        "missing",
    ),
    ("env-no-equals", edits(env=["A"]), "devices[0].containerEdits.env[0]", "KEY=value"),
    ("env-leading-equals", edits(env=["=A"]), "devices[0].containerEdits.env[0]", "KEY=value"),
    ("env-not-string", edits(env=[1]), "devices[0].containerEdits.env[0]", "expected a string"),
    (
        "node-no-path",
        edits(deviceNodes=[{"type": "c"}]),
        "devices[0].containerEdits.deviceNodes[0].path",
        "missing",
    ),
    (
        "node-empty-path",
        edits(deviceNodes=[{"path": ""}]),
        "devices[0].containerEdits.deviceNodes[0].path",
        "empty",
    ),
    (
        "node-bad-type",
        edits(deviceNodes=[{"path": "/x", "type": "x"}]),
        "devices[0].containerEdits.deviceNodes[0].type",
        "type",
    ),
    (
        "node-bad-perms",
        edits(deviceNodes=[{"path": "/x", "permissions": "rx"}]),
        "devices[0].containerEdits.deviceNodes[0].permissions",
        "permissions",
    ),
    (
        "node-negative-major",
        edits(deviceNodes=[{"path": "/x", "major": -1}]),
        "devices[0].containerEdits.deviceNodes[0].major",
        "range",
    ),
    (
        "node-bool-major",
        edits(deviceNodes=[{"path": "/x", "major": True}]),
        "devices[0].containerEdits.deviceNodes[0].major",
        "expected an integer",
    ),
    (
        "node-float-major",
        edits(deviceNodes=[{"path": "/x", "major": 1.0}]),
        "devices[0].containerEdits.deviceNodes[0].major",
        "expected an integer",
    ),
    (
        "node-uid-too-big",
        edits(deviceNodes=[{"path": "/x", "uid": 2**32}]),
        "devices[0].containerEdits.deviceNodes[0].uid",
        "range",
    ),
    (
        "mount-no-host",
        edits(mounts=[{"containerPath": "/b"}]),
        "devices[0].containerEdits.mounts[0].hostPath",
        "missing",
    ),
    (
        "mount-empty-container",
        edits(mounts=[{"hostPath": "/a", "containerPath": ""}]),
        "devices[0].containerEdits.mounts[0].containerPath",
        "empty",
    ),
    (
        "mount-options-not-list",
        edits(mounts=[{"hostPath": "/a", "containerPath": "/b", "options": "ro"}]),
        "devices[0].containerEdits.mounts[0].options",
        "array",
    ),
    (
        "hook-bad-name",
        edits(hooks=[{"hookName": "prestop", "path": "/h"}]),
        "devices[0].containerEdits.hooks[0].hookName",
        "hook name",
    ),
    (
        "hook-no-path",
        edits(hooks=[{"hookName": "prestart"}]),
        "devices[0].containerEdits.hooks[0].path",
        "missing",
    ),
    (
        "hook-empty-path",
        edits(hooks=[{"hookName": "prestart", "path": ""}]),
        "devices[0].containerEdits.hooks[0].path",
        "empty",
    ),
    (
        "hook-bad-env",
        edits(hooks=[{"hookName": "prestart", "path": "/h", "env": ["x"]}]),
        "devices[0].containerEdits.hooks[0].env[0]",
        "KEY=value",
    ),
    (
        "hook-zero-timeout",
        edits(hooks=[{"hookName": "prestart", "path": "/h", "timeout": 0}]),
        "devices[0].containerEdits.hooks[0].timeout",
        "range",
    ),
    (
        "netdev-empty",
        edits(netDevices=[{"hostInterfaceName": "", "name": "eth1"}]),
        "devices[0].containerEdits.netDevices[0].hostInterfaceName",
        "interface name",
    ),
    (
        "netdev-slash",
        edits(netDevices=[{"hostInterfaceName": "a/b", "name": "eth1"}]),
        "devices[0].containerEdits.netDevices[0].hostInterfaceName",
        "interface name",
    ),
    (
        "netdev-too-long",
        edits(netDevices=[{"hostInterfaceName": "eth0", "name": "x" * 16}]),
        "devices[0].containerEdits.netDevices[0].name",
        "interface name",
    ),
    (
        "netdev-dot",
        edits(netDevices=[{"hostInterfaceName": "eth0", "name": "."}]),
        "devices[0].containerEdits.netDevices[0].name",
        "interface name",
    ),
    (
        "netdev-missing-name",
        edits(netDevices=[{"hostInterfaceName": "eth0"}]),
        "devices[0].containerEdits.netDevices[0].name",
        "missing",
    ),
    (
        "gid-negative",
        edits(additionalGids=[-1]),
        "devices[0].containerEdits.additionalGids[0]",
        "range",
    ),
    (
        "annotation-key-long",
        make("0.6.0", annotations={"a" * 64: "x"}),
        'annotations["' + "a" * 64 + '"]',
        "63",
    ),
    (
        "annotation-key-upper-prefix",
        make("0.6.0", annotations={"Example.com/x": "x"}),
        'annotations["Example.com/x"]',
        "DNS subdomain",
    ),
    (
        "annotation-key-empty",
        make("0.6.0", annotations={"": "x"}),
        'annotations[""]',
        "annotation key",
    ),
    (
        "annotation-key-two-slashes",
        make("0.6.0", annotations={"a/b/c": "x"}),
        'annotations["a/b/c"]',
        "annotation key",
    ),
    (
        "annotation-value-int",
        make("0.6.0", annotations={"a": 1}),
        'annotations["a"]',
        "expected a string",
    ),
    (
        "device-annotation-bad",
        make(
            "0.6.0",
            devices=[{"name": "a", "annotations": {"-x": "y"}, "containerEdits": {"env": ["A=b"]}}],
        ),
        'devices[0].annotations["-x"]',
        "annotation key",
    ),
    ("unknown-top", make(extra=1), "extra", "unknown field"),
    (
        "unknown-device",
        make(devices=[{"name": "a", "containerEdits": {"env": ["A=b"]}, "x": 1}]),
        "devices[0].x",
        "unknown field",
    ),
    (
        "unknown-mount",
        edits(
            mounts=[
                {"hostPath": "/a", "containerPath": "/b"},
                {"hostPath": "/a", "containerPath": "/b", "hostpath": "/c"},
            ]
        ),
        "devices[0].containerEdits.mounts[1].hostpath",
        "unknown field",
    ),
    (
        "legacy-rdt-1.1.0",
        edits(intelRdt={"enableCMT": True}),
        "devices[0].containerEdits.intelRdt.enableCMT",
        "removed in CDI 1.1.0",
    ),
    # minimum-version violations
    (
        "mount-type-0.3.0",
        make(
            containerEdits={"mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]}
        ),
        "cdiVersion",
        "0.4.0",
    ),
    (
        "hostpath-0.4.0",
        make("0.4.0", containerEdits={"deviceNodes": [{"path": "/a", "hostPath": "/b"}]}),
        "cdiVersion",
        "0.5.0",
    ),
    (
        "digit-name-0.4.0",
        make("0.4.0", devices=[{"name": "0", "containerEdits": {"env": ["A=b"]}}]),
        "cdiVersion",
        "0.5.0",
    ),
    ("annotations-0.5.0", make("0.5.0", annotations={"a": "b"}), "cdiVersion", "0.6.0"),
    ("dotted-class-0.5.0", make("0.5.0", kind="a/b.c"), "cdiVersion", "0.6.0"),
    ("gids-0.6.0", make("0.6.0", containerEdits={"additionalGids": [5]}), "cdiVersion", "0.7.0"),
    ("rdt-0.6.0", make("0.6.0", containerEdits={"intelRdt": {}}), "cdiVersion", "0.7.0"),
    (
        "netdev-1.0.0",
        make("1.0.0", containerEdits={"netDevices": [{"hostInterfaceName": "a", "name": "b"}]}),
        "cdiVersion",
        "1.1.0",
    ),
    (
        "schemata-0.8.0",
        make("0.8.0", containerEdits={"intelRdt": {"schemata": ["L3:0=f"]}}),
        "cdiVersion",
        "1.1.0",
    ),
    (
        "monitoring-v1.0.0",
        make("v1.0.0", containerEdits={"intelRdt": {"enableMonitoring": True}}),
        "cdiVersion",
        "1.1.0",
    ),
]

#: Rules a JSON Schema cannot express; the loader alone enforces them.
SCHEMA_BLIND = {"duplicate-names", "node-float-major"}


def as_json(data: object) -> bytes:
    return json.dumps(data).encode()


def as_yaml(data: object) -> bytes:
    return yaml.safe_dump(data, allow_unicode=False, sort_keys=False).encode()


@pytest.mark.parametrize("name", VALID_FIXTURES)
def test_valid_fixtures(name: str) -> None:
    data = VALID_FIXTURES[name]
    from_json = load_spec(as_json(data), path="x.yaml")
    from_yaml = load_spec(as_yaml(data), path="x.json")
    assert from_json == from_yaml
    assert schema_ok(data)
    again = load_spec(json.dumps(from_json.to_dict()), path="again.json")
    assert again == from_json


@pytest.mark.parametrize(
    ("name", "data", "field", "text"), INVALID_FIXTURES, ids=[f[0] for f in INVALID_FIXTURES]
)
def test_invalid_fixtures(name: str, data: Any, field: str, text: str) -> None:
    for blob in (as_json(data), as_yaml(data)):
        with pytest.raises(CdiError) as info:
            load_spec(blob, path=PATH)
        err = info.value
        assert err.path == PATH
        assert err.field == field, str(err)
        assert text in err.message, str(err)
        assert PATH in str(err) and field in str(err)
    assert schema_ok(data) is (name in SCHEMA_BLIND)


def test_error_names_value() -> None:
    with pytest.raises(CdiError) as info:
        load_spec(as_json(edits(env=["NOEQUALS"])), path=PATH)
    assert info.value.value == "NOEQUALS"
    assert "'NOEQUALS'" in str(info.value)
    assert info.value.reference == "bad-cdi-spec"


def test_unknown_field_is_named_with_its_path() -> None:
    data = edits(
        mounts=[
            {"hostPath": "/a", "containerPath": "/a"},
            {"hostPath": "/b", "containerPath": "/b", "hostpath": "/c"},
        ]
    )
    with pytest.raises(CdiError) as info:
        load_spec(as_yaml(data), path=PATH)
    assert info.value.field == "devices[0].containerEdits.mounts[1].hostpath"
    assert "hostPath" in (info.value.hint or "")


# -- minimum version --------------------------------------------------------------------

MIN_VERSION_TABLE = [
    ({}, "0.3.0"),
    ({"mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}]}, "0.4.0"),
    ({"mounts": [{"hostPath": "/a", "containerPath": "/b", "type": ""}]}, "0.3.0"),
    ({"deviceNodes": [{"path": "/a", "hostPath": "/b"}]}, "0.5.0"),
    ({"additionalGids": [1]}, "0.7.0"),
    ({"additionalGids": []}, "0.3.0"),
    ({"intelRdt": {}}, "0.7.0"),
    ({"intelRdt": {"closID": "x", "enableMonitoring": False}}, "0.7.0"),
    ({"intelRdt": {"schemata": ["x"]}}, "1.1.0"),
    ({"intelRdt": {"enableMonitoring": True}}, "1.1.0"),
    ({"netDevices": [{"hostInterfaceName": "a", "name": "b"}]}, "1.1.0"),
    (
        {
            "netDevices": [{"hostInterfaceName": "a", "name": "b"}],
            "mounts": [{"hostPath": "/a", "containerPath": "/b", "type": "bind"}],
        },
        "1.1.0",
    ),
]


@pytest.mark.parametrize(("top_edits", "expected"), MIN_VERSION_TABLE)
def test_minimum_version_table(top_edits: dict[str, Any], expected: str) -> None:
    data = make("1.1.0", containerEdits=top_edits)
    assert minimum_version(spec_from_dict(data)) == expected
    data["cdiVersion"] = expected
    assert model_ok(data) and schema_ok(data)
    lower = [v for v in KNOWN_VERSIONS if v < expected]
    if lower:
        data["cdiVersion"] = lower[-1]
        assert not model_ok(data) and not schema_ok(data)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"kind": "a/b.c"}, "0.6.0"),
        ({"annotations": {"a": "b"}}, "0.6.0"),
        ({"annotations": {}}, "0.3.0"),
        ({"devices": [{"name": "0", "containerEdits": {"env": ["A=b"]}}]}, "0.5.0"),
        (
            {
                "devices": [
                    {"name": "a", "annotations": {"x": "y"}, "containerEdits": {"env": ["A=b"]}}
                ]
            },
            "0.6.0",
        ),
        ({"devices": [{"name": "a", "containerEdits": {"additionalGids": [3]}}]}, "0.7.0"),
    ],
)
def test_minimum_version_spec_level(changes: dict[str, Any], expected: str) -> None:
    assert minimum_version(spec_from_dict(make("1.1.0", **changes))) == expected


def test_full_fixture_model() -> None:
    spec = load_spec(as_json(FULL), path=PATH)
    assert spec.vendor == "nvidia.com" and spec.device_class == "gpu"
    assert spec.annotations == (("example.com/owner", "ocihook"),)
    node = spec.devices[0].container_edits.device_nodes[0]
    assert node == DeviceNode(
        path="/dev/nvidia0", host_path="/dev/nvidia0", type="c", major=195, minor=0,
        file_mode=0o666, permissions="rw", uid=0, gid=0,
    )  # fmt: skip
    assert spec.container_edits.intel_rdt == IntelRdt(
        clos_id="c1", schemata=("L3:0=ff",), enable_monitoring=True
    )
    assert spec.devices[0].container_edits.net_devices == (NetDevice("ib0", "net1"),)
    assert spec.to_dict() == FULL
    with pytest.raises(AttributeError):
        spec.kind = "x/y"  # type: ignore[misc]


def test_yaml_features() -> None:
    text = b"""# nvidia-ctk style
cdiVersion: "0.5.0"
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
      fileMode: 0666
"""
    spec = load_spec(text, path="/etc/cdi/nvidia.json")
    assert spec.devices[0].container_edits.device_nodes[0].file_mode == 0o666
    aliased = b"cdiVersion: 0.3.0\nkind: a/b\ndevices:\n- &d {name: a, containerEdits: {env: [A=b]}}\n- *d\n"
    with pytest.raises(CdiError, match="aliases"):
        load_spec(aliased, path=PATH)
    with pytest.raises(CdiError, match="neither JSON"):
        load_spec(b"{not: [valid", path=PATH)
    with pytest.raises(CdiError, match="UTF-8"):
        load_spec(b"\xff\xfe", path=PATH)
    with pytest.raises(CdiError, match="expected an object"):
        load_spec(b"", path=PATH)


def test_yaml_not_imported_for_json() -> None:
    code = (
        "import sys, json; from ocihook.cdi import load_spec; "
        f"load_spec({json.dumps(json.dumps(make()))}.encode(), path='x.yaml'); "
        "assert 'yaml' not in sys.modules, 'yaml imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# -- hypothesis ---------------------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
NONEMPTY = TEXT.filter(bool)
VENDOR_CLASS = st.from_regex(r"[A-Za-z](?:[A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?", fullmatch=True)
DEVICE_NAME = st.from_regex(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]{0,8}[A-Za-z0-9])?", fullmatch=True)
IFNAME = st.from_regex(r"[!-.0-9;-~]{1,15}", fullmatch=True).filter(lambda s: s not in (".", ".."))
ANN_KEY = st.from_regex(
    r"(?:[a-z0-9](?:[-a-z0-9]{0,5}[a-z0-9])?(?:\.[a-z0-9]{1,4})?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,8}[A-Za-z0-9])?",
    fullmatch=True,
)
ANNOTATIONS = st.dictionaries(ANN_KEY, TEXT, max_size=2).map(lambda d: tuple(d.items()))
ENV = st.builds(lambda k, v: f"{k}={v}", NONEMPTY.filter(lambda s: "=" not in s), TEXT)
U32 = st.integers(0, 2**32 - 1)
OPT_U32 = st.none() | U32
LISTS: dict[str, Any] = {"max_size": 2}

DEVICE_NODES = st.builds(
    DeviceNode,
    path=NONEMPTY,
    host_path=TEXT,
    type=st.sampled_from(["", "b", "c", "u", "p"]),
    major=st.none() | st.integers(0, 2**63 - 1),
    minor=st.none() | st.integers(0, 2**63 - 1),
    file_mode=OPT_U32,
    permissions=st.sampled_from(["", "none", "r", "rw", "rwm", "mw", "rr"]),
    uid=OPT_U32,
    gid=OPT_U32,
)
#: A mount path: a name a file can have (no NUL byte), as the model requires.
MOUNT_PATH = NONEMPTY.filter(lambda s: "\0" not in s)
MOUNTS = st.builds(
    Mount,
    source=MOUNT_PATH,
    destination=MOUNT_PATH,
    options=st.lists(TEXT, **LISTS).map(tuple),
    type=TEXT,
)
HOOKS = st.builds(
    Hook,
    hook_name=st.sampled_from(HOOK_NAMES),
    path=NONEMPTY,
    args=st.lists(TEXT, **LISTS).map(tuple),
    env=st.lists(ENV, **LISTS).map(tuple),
    timeout=st.none() | st.integers(1, 2**31 - 1),
)
RDT = st.builds(
    IntelRdt,
    clos_id=TEXT.filter(
        lambda c: c == "/" or ("/" not in c and "\n" not in c and c not in (".", ".."))
    ),
    l3_cache_schema=TEXT,
    mem_bw_schema=TEXT,
    schemata=st.lists(TEXT, **LISTS).map(tuple),
    enable_monitoring=st.booleans(),
)
EDITS = st.builds(
    ContainerEdits,
    env=st.lists(ENV, **LISTS).map(tuple),
    device_nodes=st.lists(DEVICE_NODES, **LISTS).map(tuple),
    hooks=st.lists(HOOKS, **LISTS).map(tuple),
    mounts=st.lists(MOUNTS, **LISTS).map(tuple),
    intel_rdt=st.none() | RDT,
    additional_gids=st.lists(U32, **LISTS).map(tuple),
    net_devices=st.lists(
        st.builds(NetDevice, IFNAME, IFNAME),
        unique_by=(lambda d: d.host_interface_name, lambda d: d.name),
        **LISTS,
    ).map(tuple),
)
DEVICES = st.builds(
    Device,
    name=DEVICE_NAME,
    container_edits=EDITS.filter(lambda e: not e.is_empty()),
    annotations=ANNOTATIONS,
)


@st.composite
def specs(draw: st.DrawFn) -> Spec:
    draft = Spec(
        version="1.1.0",
        kind=f"{draw(VENDOR_CLASS)}/{draw(VENDOR_CLASS)}",
        devices=tuple(draw(st.lists(DEVICES, min_size=1, max_size=3, unique_by=lambda d: d.name))),
        container_edits=draw(EDITS),
        annotations=draw(ANNOTATIONS),
    )
    lowest = minimum_version(draft)
    version = draw(st.sampled_from([v for v in KNOWN_VERSIONS if v >= lowest]))
    prefix = draw(st.sampled_from(["", "v"]))
    return Spec(
        version=prefix + version,
        kind=draft.kind,
        devices=draft.devices,
        container_edits=draft.container_edits,
        annotations=draft.annotations,
    )


SLOW = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SLOW
@given(specs())
def test_round_trip_json_yaml(spec: Spec) -> None:
    data = spec.to_dict()
    assert schema_ok(data)
    assert load_spec(as_json(data), path="s.json") == spec
    assert load_spec(as_yaml(data), path="s.json") == spec


def _mutations(data: Any) -> list[tuple[Any, Any]]:
    """(container, key) pairs of every value inside ``data``."""
    out: list[tuple[Any, Any]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append((data, k))
            out.extend(_mutations(v))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            out.append((data, i))
            out.extend(_mutations(v))
    return out


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 2**33)
    | st.sampled_from(["", "x", "A=b", "0", "a/b", "rw", "c", "prestart"]),
    lambda inner: (
        st.lists(inner, max_size=2)
        | st.dictionaries(st.sampled_from(["path", "name", "x"]), inner, max_size=2)
    ),
    max_leaves=4,
)


@SLOW
@given(specs(), st.data())
def test_model_and_schema_agree_on_mutated_specs(spec: Spec, data: st.DataObject) -> None:
    doc = copy.deepcopy(spec.to_dict())
    spots = _mutations(doc)
    container, key = data.draw(st.sampled_from(spots))
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "delete" or (action == "add" and not isinstance(container, dict)):
        del container[key]
    elif action == "add":
        container[
            data.draw(st.sampled_from(["x", "type", "hostPath", "annotations", "intelRdt"]))
        ] = data.draw(JSON_VALUES)
    else:
        container[key] = data.draw(JSON_VALUES)
    devices = doc.get("devices")
    devices = devices if isinstance(devices, list) else []
    names = [d.get("name") for d in devices if isinstance(d, dict)]
    if len(names) != len(set(map(repr, names))):
        return  # unique names: a rule outside the schema
    if _nul_in_mount_path(doc):
        return  # mount paths that name no file: a rule outside the schema
    assert model_ok(doc) == schema_ok(doc), json.dumps(doc)


def _nul_in_mount_path(doc: Any) -> bool:
    devices = doc.get("devices")
    edits = [doc.get("containerEdits")] + [
        d.get("containerEdits")
        for d in (devices if isinstance(devices, list) else [])
        if isinstance(d, dict)
    ]
    for e in edits:
        mounts = e.get("mounts") if isinstance(e, dict) else None
        for m in mounts if isinstance(mounts, list) else []:
            if isinstance(m, dict) and any(
                isinstance(m.get(k), str) and "\0" in m[k] for k in ("hostPath", "containerPath")
            ):
                return True
    return False


@settings(max_examples=300, deadline=None)
@given(st.binary() | st.text().map(str.encode))
def test_loader_raises_only_cdi_error_on_bytes(blob: bytes) -> None:
    try:
        load_spec(blob, path=PATH)
    except CdiError as err:
        assert err.path == PATH


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_loader_raises_only_cdi_error_on_text(text: str) -> None:
    with contextlib.suppress(CdiError):
        load_spec(text, path=PATH)


@pytest.mark.parametrize(
    "blob",
    [
        b"[" * 100000,
        b"- " * 5000 + b"x",
        b"{" + b'"a":' * 3000,
        b"1" * 5000,
        b"NaN",
        b"!!binary aGk=",
        b"2001-12-14",
    ],
)
def test_loader_hostile_inputs(blob: bytes) -> None:
    with pytest.raises(CdiError):
        load_spec(blob, path=PATH)


# --- malformed and hostile input to the CDI generator and loader ----------------------------------


def test_load_spec_huge_yaml_integer_is_a_cdi_error() -> None:
    """YAML reads ``0x`` + 5000 hex digits as one int; the out-of-range error then puts the
    value in its message, and ``repr`` of an int of more than 4300 decimal digits raises
    ValueError (CPython's int_max_str_digits). load_spec must raise CdiError only."""
    text = GOOD_YAML.replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/x, major: 0x" + "f" * 5000 + "}]"
    )
    with pytest.raises(CdiError, match="out of range"):
        load_spec(text, path="big.yaml")


def test_unquoted_mig_style_name_reads_as_the_reference_does() -> None:
    """``name: 1:0`` unquoted (a MIG device by index, written by hand) is the string "1:0"
    for the reference parser (sigs.k8s.io/yaml on go-yaml, which leaves YAML 1.1 base-60
    numbers out on purpose: go-yaml resolve.go), so podman and containerd accept the
    spec. PyYAML's YAML 1.1 resolver makes it the integer 60, and load_spec rejects the
    whole file ("expected a string, found int"), dropping every device in it."""
    text = GOOD_YAML.replace("0.3.0", "0.5.0").replace("name: gpu0", "name: 1:0")
    spec = load_spec(text, path="mig.yaml")
    assert [d.name for d in spec.devices] == ["1:0"]
