"""Injecting CDI devices into an OCI spec (``ocihook.cdi.inject``), checked against the
reference semantics (``pkg/cdi/cache.go`` ``InjectDevices``, ``container-edits.go``
``Apply``, ``container-edits_unix.go`` ``fillMissingInfo``)."""

from __future__ import annotations

import copy
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocihook.cdi import CdiError, Registry, inject_devices, spec_from_dict

Lstat = Callable[[str], os.stat_result]
KIND = "vendor.com/dev"


def fake_stat(fmt: int, major: int = 0, minor: int = 0, mode: int = 0o666) -> os.stat_result:
    return os.stat_result(
        (fmt | mode, 0, 0, 1, 0, 0, 0, 0, 0, 0), {"st_rdev": os.makedev(major, minor)}
    )


def fake_lstat(table: dict[str, os.stat_result]) -> Lstat:
    def lstat(path: str) -> os.stat_result:
        try:
            return table[path]
        except KeyError:
            raise FileNotFoundError(errno.ENOENT, "No such file or directory", path) from None

    return lstat


HOST: dict[str, os.stat_result] = {
    "/dev/gpu0": fake_stat(stat.S_IFCHR, 195, 0, 0o666),
    "/dev/gpu1": fake_stat(stat.S_IFCHR, 195, 1, 0o660),
    "/host/gpu2": fake_stat(stat.S_IFCHR, 195, 2, 0o640),
    "/dev/sda": fake_stat(stat.S_IFBLK, 8, 0, 0o660),
    "/dev/fifo": fake_stat(stat.S_IFIFO, 0, 0, 0o600),
    "/dev/file": fake_stat(stat.S_IFREG, 0, 0, 0o644),
}
LSTAT = fake_lstat(HOST)


def registry(*specs: dict[str, Any]) -> Registry:
    """A registry of spec dicts (``cdiVersion`` 1.1.0 unless given), one file each."""
    loaded = []
    for i, data in enumerate(specs):
        data = {"cdiVersion": "1.1.0", "kind": KIND} | data
        path = f"/etc/cdi/spec{i}.json"
        loaded.append((0, path, spec_from_dict(data, path=path)))
    return Registry.from_specs(loaded)


def one_device(edits: dict[str, Any], common: dict[str, Any] | None = None) -> Registry:
    data: dict[str, Any] = {"devices": [{"name": "d", "containerEdits": edits}]}
    if common:
        data["containerEdits"] = common
    return registry(data)


def inject_one(
    edits: dict[str, Any], oci: dict[str, Any] | None = None, lstat: Lstat = LSTAT
) -> dict[str, Any]:
    return inject_devices(oci or {}, one_device(edits), [f"{KIND}=d"], lstat=lstat)


def nodes(*node: dict[str, Any]) -> dict[str, Any]:
    return {"deviceNodes": list(node)}


def dev(path: str, type_: str, major: int, minor: int, **extra: Any) -> dict[str, Any]:
    return {"path": path, "type": type_, "major": major, "minor": minor} | extra


def rule(type_: str, major: int, minor: int, access: str = "rwm") -> dict[str, Any]:
    out: dict[str, Any] = {"allow": True, "type": type_, "major": major, "minor": minor}
    if access:
        out["access"] = access
    return out


# -- the table: (id, edits, input OCI spec, expected output OCI spec) ---------------------

CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    (
        "env replaced in place, appended, last wins",
        {"env": ["B=1", "C=1", "C=2"]},
        {"process": {"env": ["A=0", "B=0"]}},
        {"process": {"env": ["A=0", "B=1", "C=2"]}},
    ),
    (
        "env: the last of duplicate existing keys is replaced",
        {"env": ["A=2"]},
        {"process": {"env": ["A=0", "A=1"]}},
        {"process": {"env": ["A=0", "A=2"]}},
    ),
    (
        "node filled from host: type, major, minor, fileMode; cgroup rwm",
        nodes({"path": "/dev/gpu0"}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/gpu0", "c", 195, 0, fileMode=0o666)],
                "resources": {"devices": [rule("c", 195, 0)]},
            }
        },
    ),
    (
        "hostPath is what is stat'ed; path is the container path",
        nodes({"path": "/dev/gpu2", "hostPath": "/host/gpu2"}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/gpu2", "c", 195, 2, fileMode=0o640)],
                "resources": {"devices": [rule("c", 195, 2)]},
            }
        },
    ),
    (
        "minimal node (type+major), host missing: kept as is, no fileMode",
        nodes({"path": "/dev/absent", "type": "c", "major": 10, "minor": 7}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/absent", "c", 10, 7)],
                "resources": {"devices": [rule("c", 10, 7)]},
            }
        },
    ),
    (
        "minimal node, host present: only fileMode filled, numbers kept",
        nodes({"path": "/dev/gpu1", "type": "c", "major": 10, "minor": 7}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/gpu1", "c", 10, 7, fileMode=0o660)],
                "resources": {"devices": [rule("c", 10, 7)]},
            }
        },
    ),
    (
        "minimal node, declared type differs from host: not checked",
        nodes({"path": "/dev/gpu1", "type": "b", "major": 10}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/gpu1", "b", 10, 0, fileMode=0o660)],
                "resources": {"devices": [rule("b", 10, 0)]},
            }
        },
    ),
    (
        "minimal node, host not a device: no error, no fileMode",
        nodes({"path": "/dev/file", "type": "c", "major": 10}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/file", "c", 10, 0)],
                "resources": {"devices": [rule("c", 10, 0)]},
            }
        },
    ),
    (
        "minimal fifo (no major), host missing: no cgroup rule",
        nodes({"path": "/dev/nofifo", "type": "p"}),
        {},
        {"linux": {"devices": [dev("/dev/nofifo", "p", 0, 0)]}},
    ),
    (
        "fifo filled from host: type p, no numbers, no cgroup rule",
        nodes({"path": "/dev/fifo"}),
        {},
        {"linux": {"devices": [dev("/dev/fifo", "p", 0, 0, fileMode=0o600)]}},
    ),
    (
        "type with major 0 is not minimal: numbers from host",
        nodes({"path": "/dev/gpu1", "type": "c", "major": 0, "minor": 9}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/gpu1", "c", 195, 1, fileMode=0o660)],
                "resources": {"devices": [rule("c", 195, 1)]},
            }
        },
    ),
    (
        "major without type: type from host, declared numbers kept",
        nodes({"path": "/dev/gpu1", "major": 42, "minor": 5}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/gpu1", "c", 42, 5, fileMode=0o660)],
                "resources": {"devices": [rule("c", 42, 5)]},
            }
        },
    ),
    (
        "explicit fileMode kept; block device; permissions kept",
        nodes({"path": "/dev/sda", "fileMode": 0o600, "permissions": "rw"}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/sda", "b", 8, 0, fileMode=0o600)],
                "resources": {"devices": [rule("b", 8, 0, "rw")]},
            }
        },
    ),
    (
        "permissions none: empty access",
        nodes({"path": "/dev/gpu0", "permissions": "none"}),
        {},
        {
            "linux": {
                "devices": [dev("/dev/gpu0", "c", 195, 0, fileMode=0o666)],
                "resources": {"devices": [rule("c", 195, 0, "")]},
            }
        },
    ),
    (
        "existing entry with the same path replaced (moved last); rules appended",
        nodes({"path": "/dev/gpu0"}),
        {
            "linux": {
                "devices": [
                    {"path": "/dev/gpu0", "type": "c", "major": 1, "minor": 1},
                    {"path": "/dev/x"},
                ],
                "resources": {"devices": [{"allow": False, "access": "rwm"}]},
            }
        },
        {
            "linux": {
                "devices": [{"path": "/dev/x"}, dev("/dev/gpu0", "c", 195, 0, fileMode=0o666)],
                "resources": {"devices": [{"allow": False, "access": "rwm"}, rule("c", 195, 0)]},
            }
        },
    ),
    (
        "uid/gid default to the process user's when > 0; explicit ones kept",
        nodes({"path": "/dev/gpu0"}, {"path": "/dev/gpu1", "uid": 7}),
        {"process": {"user": {"uid": 1000, "gid": 0}}},
        {
            "process": {"user": {"uid": 1000, "gid": 0}},
            "linux": {
                "devices": [
                    dev("/dev/gpu0", "c", 195, 0, fileMode=0o666, uid=1000),
                    dev("/dev/gpu1", "c", 195, 1, fileMode=0o660, uid=7),
                ],
                "resources": {"devices": [rule("c", 195, 0), rule("c", 195, 1)]},
            },
        },
    ),
    (
        "net devices keyed by host interface",
        {"netDevices": [{"hostInterfaceName": "eth1", "name": "net0"}]},
        {"linux": {"netDevices": {"eth0": {"name": "x"}}}},
        {"linux": {"netDevices": {"eth0": {"name": "x"}, "eth1": {"name": "net0"}}}},
    ),
    (
        "mounts: same destination replaced, then stable sort by depth ('/' and '/a' equal)",
        {
            "mounts": [
                {"hostPath": "/h/lib", "containerPath": "/usr/lib", "options": ["ro", "bind"]},
                {"hostPath": "/h/a", "containerPath": "/a", "type": "bind"},
                {"hostPath": "/h/root", "containerPath": "/"},
            ]
        },
        {
            "mounts": [
                {"destination": "/usr/lib/x/y", "source": "s1"},
                {"destination": "/usr/lib", "source": "old"},
                {"destination": "/proc", "source": "proc"},
            ]
        },
        {
            "mounts": [
                {"destination": "/proc", "source": "proc"},
                {"destination": "/a", "type": "bind", "source": "/h/a"},
                {"destination": "/", "source": "/h/root"},
                {"destination": "/usr/lib", "source": "/h/lib", "options": ["ro", "bind"]},
                {"destination": "/usr/lib/x/y", "source": "s1"},
            ]
        },
    ),
    (
        "no mounts in the edits: existing mounts not sorted",
        {"env": ["A=1"]},
        {"mounts": [{"destination": "/a/b"}, {"destination": "/a"}]},
        {"mounts": [{"destination": "/a/b"}, {"destination": "/a"}], "process": {"env": ["A=1"]}},
    ),
    (
        "hooks appended per stage, in order",
        {
            "hooks": [
                {"hookName": "createContainer", "path": "/bin/h1", "args": ["h1", "x"]},
                {"hookName": "prestart", "path": "/bin/h2", "env": ["E=1"], "timeout": 5},
                {"hookName": "createContainer", "path": "/bin/h3"},
            ]
        },
        {"hooks": {"createContainer": [{"path": "/bin/h0"}]}},
        {
            "hooks": {
                "createContainer": [
                    {"path": "/bin/h0"},
                    {"path": "/bin/h1", "args": ["h1", "x"]},
                    {"path": "/bin/h3"},
                ],
                "prestart": [{"path": "/bin/h2", "env": ["E=1"], "timeout": 5}],
            }
        },
    ),
    (
        "intelRdt replaces the whole object",
        {"intelRdt": {"closID": "g1", "schemata": ["L3:0=ff"], "enableMonitoring": True}},
        {"linux": {"intelRdt": {"closID": "old", "memBwSchema": "MB:0=50"}}},
        {
            "linux": {
                "intelRdt": {"closID": "g1", "schemata": ["L3:0=ff"], "enableMonitoring": True}
            }
        },
    ),
    (
        "additionalGids: 0 and present values skipped",
        {"additionalGids": [0, 44, 5, 44, 6]},
        {"process": {"user": {"uid": 0, "gid": 0, "additionalGids": [5]}}},
        {"process": {"user": {"uid": 0, "gid": 0, "additionalGids": [5, 44, 6]}}},
    ),
]


@pytest.mark.parametrize(
    ("edits", "oci", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rules(edits: dict[str, Any], oci: dict[str, Any], expected: dict[str, Any]) -> None:
    before = copy.deepcopy(oci)
    assert inject_one(edits, oci) == expected
    assert oci == before


ERRORS = [
    ("host missing", {"path": "/dev/none"}, 'failed to stat CDI host device "/dev/none"'),
    (
        "hostPath missing",
        {"path": "/dev/x", "hostPath": "/h/none"},
        'failed to stat CDI host device "/h/none"',
    ),
    (
        "type without major, host missing",
        {"path": "/dev/none", "type": "c"},
        "failed to stat CDI host device",
    ),
    ("host is a regular file", {"path": "/dev/file"}, "not a device node"),
    ("declared type differs", {"path": "/dev/gpu0", "type": "b"}, "host type mismatch (b, c)"),
    ("type u is not c", {"path": "/dev/gpu0", "type": "u"}, "host type mismatch (u, c)"),
]


@pytest.mark.parametrize(("node", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_node_errors_leave_spec_untouched(node: dict[str, Any], message: str) -> None:
    oci: dict[str, Any] = {"process": {"env": ["A=1"]}, "linux": {"devices": []}}
    before = copy.deepcopy(oci)
    with pytest.raises(CdiError) as info:
        inject_one({"env": ["B=2"], "deviceNodes": [node]}, oci)
    assert message in str(info.value)
    assert oci == before


def test_unresolvable_names_all_listed_and_spec_untouched() -> None:
    reg = one_device({"env": ["A=1"]})
    oci: dict[str, Any] = {"process": {"env": ["X=1"]}}
    before = copy.deepcopy(oci)
    names = ["vendor.com/dev=gone", f"{KIND}=d", "other.com/x=1", "bad name"]
    with pytest.raises(CdiError) as info:
        inject_devices(oci, reg, names, lstat=LSTAT)
    assert info.value.value == ("vendor.com/dev=gone", "other.com/x=1", "bad name")
    assert "unresolvable CDI devices vendor.com/dev=gone, other.com/x=1, bad name" in str(
        info.value
    )
    assert oci == before


def test_common_edits_once_per_spec_before_its_first_device() -> None:
    reg = registry(
        {
            "kind": "a.com/x",
            "containerEdits": {
                "env": ["COMMON_A=1"],
                "hooks": [{"hookName": "prestart", "path": "/ca"}],
            },
            "devices": [
                {
                    "name": "1",
                    "containerEdits": {
                        "env": ["A1=1"],
                        "hooks": [{"hookName": "prestart", "path": "/a1"}],
                    },
                },
                {"name": "2", "containerEdits": {"env": ["A2=1"]}},
            ],
        },
        {
            "kind": "b.com/y",
            "containerEdits": {"env": ["COMMON_B=1"]},
            "devices": [{"name": "1", "containerEdits": {"env": ["B1=1"]}}],
        },
    )
    out = inject_devices({}, reg, ["a.com/x=2", "b.com/y=1", "a.com/x=1"], lstat=LSTAT)
    assert out["process"]["env"] == ["COMMON_A=1", "A2=1", "COMMON_B=1", "B1=1", "A1=1"]
    assert out["hooks"]["prestart"] == [{"path": "/ca"}, {"path": "/a1"}]
    # a device named twice contributes its edits twice (env then dedups by key)
    out = inject_devices({}, reg, ["a.com/x=1", "a.com/x=1"], lstat=LSTAT)
    assert out["process"]["env"] == ["COMMON_A=1", "A1=1"]
    assert out["hooks"]["prestart"] == [{"path": "/ca"}, {"path": "/a1"}, {"path": "/a1"}]


def test_apply_order_device_node_after_env() -> None:
    # env is applied before nodes; a failing node still leaves the input as it was
    reg = one_device({"env": ["A=1"], "deviceNodes": [{"path": "/dev/none"}]})
    oci: dict[str, Any] = {}
    with pytest.raises(CdiError):
        inject_devices(oci, reg, [f"{KIND}=d"], lstat=LSTAT)
    assert oci == {}


def test_no_names_is_a_copy() -> None:
    oci: dict[str, Any] = {"process": {"env": ["A=1"]}}
    out = inject_devices(oci, Registry.from_specs([]), [])
    assert out == oci and out is not oci and out["process"] is not oci["process"]


def test_real_dev_null() -> None:
    st_null = os.lstat("/dev/null")
    if not stat.S_ISCHR(st_null.st_mode):
        pytest.skip("/dev/null is not a character device here")
    out = inject_one(nodes({"path": "/dev/null"}), lstat=os.lstat)
    assert out["linux"]["devices"] == [
        dev("/dev/null", "c", 1, 3, fileMode=stat.S_IMODE(st_null.st_mode))
    ]
    assert out["linux"]["resources"]["devices"] == [rule("c", 1, 3)]


def test_real_fake_gpu_node(tmp_path: Path) -> None:
    node = str(tmp_path / "nvidia0")
    if os.geteuid() != 0:
        pytest.skip("creating a device node with os.mknod needs root")
    try:
        os.mknod(node, stat.S_IFCHR | 0o660, os.makedev(195, 0))
    except OSError as err:
        pytest.skip(f"os.mknod refused here ({err.strerror}); cannot make a fake GPU node")
    os.chmod(node, 0o660)  # mknod's mode is masked by the umask
    out = inject_one(nodes({"path": "/dev/nvidia0", "hostPath": node}), lstat=os.lstat)
    assert out["linux"]["devices"] == [dev("/dev/nvidia0", "c", 195, 0, fileMode=0o660)]
    # a real regular file is not a device node
    plain = tmp_path / "plain"
    plain.write_text("")
    with pytest.raises(CdiError, match="not a device node"):
        inject_one(nodes({"path": "/dev/x", "hostPath": str(plain)}), lstat=os.lstat)


# -- property: injecting twice == injecting once (env, devices, mounts) ------------------

_PATHS = ["/dev/gpu0", "/dev/gpu1", "/host/gpu2", "/dev/sda", "/dev/fifo", "/dev/absent"]
_DESTS = ["/", "/a", "/a/b", "/usr/lib", "/usr/lib/x", "/b"]
_node = st.builds(
    lambda p, minimal: {"path": p} | ({"type": "c", "major": 10, "minor": 1} if minimal else {}),
    st.sampled_from(_PATHS),
    st.booleans(),
).filter(lambda n: n["path"] != "/dev/absent" or "type" in n)
_mount = st.builds(
    lambda d, h: {"hostPath": h, "containerPath": d},
    st.sampled_from(_DESTS),
    st.sampled_from(["/h1", "/h2"]),
)
_env = st.builds(lambda k, v: f"{k}={v}", st.sampled_from("ABCD"), st.sampled_from("123"))
_edits = st.fixed_dictionaries(
    {
        "env": st.lists(_env, max_size=3),
        "deviceNodes": st.lists(_node, max_size=3),
        "mounts": st.lists(_mount, max_size=3),
    }
).filter(lambda e: any(e.values()))
_oci = st.fixed_dictionaries(
    {
        "process": st.fixed_dictionaries(
            {
                "env": st.lists(_env, max_size=3),
                "user": st.fixed_dictionaries(
                    {"uid": st.sampled_from([0, 1000]), "gid": st.just(0)}
                ),
            }
        ),
        "mounts": st.lists(st.sampled_from(_DESTS), unique=True, max_size=3).map(
            lambda ds: [{"destination": d, "source": "orig"} for d in ds]
        ),
        "linux": st.lists(st.sampled_from(_PATHS), unique=True, max_size=2).map(
            lambda ps: {"devices": [{"path": p, "type": "c", "major": 1, "minor": 1} for p in ps]}
        ),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    common=st.one_of(st.none(), _edits),
    devices=st.lists(_edits, min_size=1, max_size=3),
    oci=_oci,
    picks=st.lists(st.integers(0, 2), min_size=1, max_size=4),
)
def test_inject_twice_same_as_once(
    common: dict[str, Any] | None,
    devices: list[dict[str, Any]],
    oci: dict[str, Any],
    picks: list[int],
) -> None:
    data: dict[str, Any] = {
        "devices": [{"name": f"d{i}", "containerEdits": e} for i, e in enumerate(devices)]
    }
    if common:
        data["containerEdits"] = common
    reg = registry(data)
    names = [f"{KIND}=d{i % len(devices)}" for i in picks]
    before = copy.deepcopy(oci)
    once = inject_devices(oci, reg, names, lstat=LSTAT)
    assert oci == before
    twice = inject_devices(once, reg, names, lstat=LSTAT)
    assert twice["process"]["env"] == once["process"]["env"]
    assert twice["linux"]["devices"] == once["linux"]["devices"]
    assert twice["mounts"] == once["mounts"]
