"""``ocihook edit`` on a bundle it edited before: the record in the
``ocihook.edits`` annotation (ocihook.appliers.editrecord) is taken out before the plan,
so GPUs never add up; the record can only ever take access away."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import busybox_bundle

from ocihook.appliers.editrecord import (
    ANNOTATION,
    edited_without_record,
    read_record,
    record_edit,
    undo_recorded_edit,
)
from ocihook.appliers.spec import edit_bundle
from ocihook.core.errors import SpecError
from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost

COMMAND = ("/py", "-I", "-m", "ocihook")


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    return simhost.build(str(tmp_path_factory.mktemp("sim")), make_dev_nodes=False)


def _doc(bundle: str) -> dict[str, Any]:
    with open(os.path.join(bundle, "config.json")) as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def _write(bundle: str, doc: dict[str, Any]) -> None:
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(doc, f, indent="\t")


def _set_env(doc: dict[str, Any], key: str, value: str) -> None:
    env = [e for e in doc["process"]["env"] if not e.startswith(key + "=")]
    doc["process"]["env"] = [*env, f"{key}={value}"]


def _gpu_nodes(doc: dict[str, Any]) -> list[str]:
    return sorted(
        d["path"]
        for d in doc.get("linux", {}).get("devices", [])
        if d["path"][len("/dev/nvidia") :].isdigit()
    )


def test_re_edit_for_another_request_replans(tmp_path: Any, host: simhost.SimulatedHost) -> None:
    bundle = busybox_bundle(tmp_path / "b", ["sh"], ["NVIDIA_VISIBLE_DEVICES=0,3"])
    root = HostRoot.single(host.root)
    original = _doc(bundle)
    first = edit_bundle(bundle, root, command=COMMAND)
    assert first.written
    doc = _doc(bundle)
    m3 = host.gpus[3].minor
    assert _gpu_nodes(doc) == sorted(["/dev/nvidia0", f"/dev/nvidia{m3}"])
    record = read_record(doc)
    assert record["replaced_env"] == ["NVIDIA_VISIBLE_DEVICES=0,3"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in record["added"]["process.env"]
    # the request is changed by hand: GPU 5 only, not 0, 3 and 5
    _set_env(doc, "NVIDIA_VISIBLE_DEVICES", "5")
    _write(bundle, doc)
    second = edit_bundle(bundle, root, command=COMMAND)
    assert second.written
    doc = _doc(bundle)
    assert _gpu_nodes(doc) == [f"/dev/nvidia{host.gpus[5].minor}"]
    # the links and ld.so.cache are made in the rootfs by the edit; the one hook left
    # (the /proc/driver/nvidia mask, for GPU 5 only) does not pile up
    assert second.in_rootfs and len(doc["hooks"]["createContainer"]) == 1
    args = doc["hooks"]["createContainer"][0]["args"]
    assert "--link" not in args and args.count("--proc-gpu") == 1
    rules = doc["linux"]["resources"]["devices"]
    gpu_rules = [r for r in rules if r.get("major") == 195 and r.get("minor", 255) < 255]
    assert [r["minor"] for r in gpu_rules] == [host.gpus[5].minor]
    assert rules[0] == {"allow": False, "access": "rwm"}
    # the same again: nothing to change
    third = edit_bundle(bundle, root, command=COMMAND)
    assert not third.written and third.after == second.after
    # with nothing requested: what ocihook added is gone, the document is the original
    _set_env(doc, "NVIDIA_VISIBLE_DEVICES", "")
    _write(bundle, doc)
    fourth = edit_bundle(bundle, root, command=COMMAND)
    assert fourth.written and fourth.plan is None
    expect = json.loads(json.dumps(original))
    _set_env(expect, "NVIDIA_VISIBLE_DEVICES", "")
    got = _doc(bundle)
    got["process"]["env"] = sorted(got["process"]["env"])
    expect["process"]["env"] = sorted(expect["process"]["env"])
    assert got == expect


def test_unchanged_request_keeps_env_order(tmp_path: Any, host: simhost.SimulatedHost) -> None:
    """The replaced variable goes back where it stood: a same-request re-edit is
    byte-identical, not a reordered rewrite."""
    bundle = busybox_bundle(tmp_path / "b", ["sh"], ["NVIDIA_VISIBLE_DEVICES=1", "B=2"])
    root = HostRoot.single(host.root)
    first = edit_bundle(bundle, root, command=COMMAND)
    again = edit_bundle(bundle, root, command=COMMAND)
    assert first.written and not again.written
    with open(os.path.join(bundle, "config.json"), "rb") as f:
        assert f.read() == first.after


def test_record_survives_a_text_edit(tmp_path: Any, host: simhost.SimulatedHost) -> None:
    """The record is base64: ``sed s/=void/=2/`` changes the request, not the record."""
    bundle = busybox_bundle(tmp_path / "b", ["sh"], ["NVIDIA_VISIBLE_DEVICES=0"])
    root = HostRoot.single(host.root)
    edit_bundle(bundle, root, command=COMMAND)
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        text = f.read()
    assert text.count("NVIDIA_VISIBLE_DEVICES=void") == 1
    with open(path, "w") as f:
        f.write(text.replace("NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_VISIBLE_DEVICES=2"))
    edit_bundle(bundle, root, command=COMMAND)
    assert _gpu_nodes(_doc(bundle)) == [f"/dev/nvidia{host.gpus[2].minor}"]


def test_legacy_edit_without_record_is_refused(tmp_path: Any, host: simhost.SimulatedHost) -> None:
    """A document holding ocihook's createContainer hook but no record (an ocihook that
    kept none; here: a container with a user namespace, whose links stay with the hook)."""
    bundle = busybox_bundle(tmp_path / "b", ["sh"], ["NVIDIA_VISIBLE_DEVICES=0"])
    root = HostRoot.single(host.root)
    doc = _doc(bundle)
    doc["linux"].setdefault("namespaces", []).append({"type": "user"})
    _write(bundle, doc)
    assert not edit_bundle(bundle, root, command=COMMAND).in_rootfs
    doc = _doc(bundle)
    del doc["annotations"][ANNOTATION]
    assert edited_without_record(doc)
    _set_env(doc, "NVIDIA_VISIBLE_DEVICES", "1")
    _write(bundle, doc)
    with open(os.path.join(bundle, "config.json"), "rb") as f:
        before = f.read()
    with pytest.raises(SpecError, match="without the record of what it added"):
        edit_bundle(bundle, root, command=COMMAND)
    with open(os.path.join(bundle, "config.json"), "rb") as f:
        assert f.read() == before


def test_malformed_record_is_refused(tmp_path: Any, host: simhost.SimulatedHost) -> None:
    bundle = busybox_bundle(tmp_path / "b", ["sh"], ["NVIDIA_VISIBLE_DEVICES=0"])
    doc = _doc(bundle)
    doc["annotations"] = {ANNOTATION: "not base64 JSON!"}
    _write(bundle, doc)
    with pytest.raises(SpecError) as e:
        edit_bundle(bundle, HostRoot.single(host.root), command=COMMAND)
    assert e.value.field == f'annotations["{ANNOTATION}"]'


def _forged(record: dict[str, Any]) -> str:
    return base64.b64encode(json.dumps(record).encode()).decode()


def test_a_forged_record_cannot_grant_anything() -> None:
    """Whoever can set annotations can write the record: undoing it removes no deny
    rule, no non-bind mount, no hook that is not ocihook's, and restores nothing but
    environment entries."""
    deny = {"allow": False, "access": "rwm"}
    tmpfs = {"destination": "/secret", "type": "tmpfs", "source": "tmpfs", "options": ["ro"]}
    seccomp_hook = {"path": "/usr/bin/guard", "args": ["guard", "hook"]}
    doc = {
        "process": {"env": ["A=1"]},
        "linux": {"resources": {"devices": [deny]}, "devices": [], "maskedPaths": []},
        "mounts": [tmpfs],
        "hooks": {"prestart": [seccomp_hook]},
        "annotations": {
            ANNOTATION: _forged(
                {
                    "version": 1,
                    "added": {
                        "linux.resources.devices": [deny],
                        "mounts": [tmpfs],
                        "hooks.prestart": [seccomp_hook],
                        "linux.devices": [{"path": "/dev/sda"}],
                    },
                    "replaced_env": ["B=2"],
                    "created": ["mounts", "linux.devices", "linux.maskedPaths"],
                }
            )
        },
    }
    out, had = undo_recorded_edit(doc, path="config.json")
    assert had
    assert out["linux"]["resources"]["devices"] == [deny]
    assert out["mounts"] == [tmpfs]
    assert out["hooks"]["prestart"] == [seccomp_hook]
    # B=2 goes back only in place of an entry ocihook set; there is none: not restored
    assert out["process"]["env"] == ["A=1"]
    assert "annotations" not in out and "devices" not in out["linux"]  # empty, made by "us"
    assert out["linux"]["maskedPaths"] == []  # not a field an edit makes: left alone


_entry = st.dictionaries(st.sampled_from(["path", "type", "x"]), st.text(max_size=3), max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    env=st.lists(
        st.from_regex(r"[A-C]=[0-9]", fullmatch=True), max_size=4, unique_by=lambda e: e[0]
    ),
    devices=st.lists(_entry, max_size=3),
    new_env=st.dictionaries(st.sampled_from("ABCD"), st.sampled_from(["void", "1"]), max_size=3),
    new_devices=st.lists(_entry, max_size=3),
    gids=st.lists(st.integers(0, 5), max_size=3, unique=True),
)
def test_undo_of_record_is_the_document_before(
    env: list[str],
    devices: list[dict[str, str]],
    new_env: dict[str, str],
    new_devices: list[dict[str, str]],
    gids: list[int],
) -> None:
    """For edits of the kind ocihook makes (variables set in place or appended, devices,
    bind mounts, allow rules, gids, ocihook hooks appended), taking the record out gives
    the document before the edit back."""
    before: dict[str, Any] = {"process": {"env": list(env)}, "linux": {"devices": list(devices)}}
    after: dict[str, Any] = json.loads(json.dumps(before))
    out_env = after["process"]["env"]
    for k, v in new_env.items():
        for i, e in enumerate(out_env):
            if e.startswith(k + "="):
                out_env[i] = f"{k}={v}"
                break
        else:
            out_env.append(f"{k}={v}")
    after["linux"]["devices"] += [d for d in new_devices if d not in before["linux"]["devices"]]
    if gids:
        after["process"]["user"] = {"additionalGids": gids}
        after["mounts"] = [{"destination": "/l", "source": "/h", "options": ["ro", "bind"]}]
        after["linux"]["resources"] = {"devices": [{"allow": True, "type": "c", "access": "rw"}]}
        after["hooks"] = {
            "createContainer": [{"path": "/py", "args": ["/py", "-m", "ocihook", "hook", "x"]}]
        }
    recorded = record_edit(before, after)
    out, had = undo_recorded_edit(recorded, path="config.json")
    if recorded is after:
        assert not had and out == before == after
    else:
        assert had and out == before


def test_a_removed_variable_is_not_put_back(tmp_path: Any, host: simhost.SimulatedHost) -> None:
    """Deleting ocihook's ``NVIDIA_VISIBLE_DEVICES=void`` entry unsets the request: the
    next edit takes ocihook's additions out and does not restore the old ``0,3``."""
    bundle = busybox_bundle(tmp_path / "b", ["sh"], ["NVIDIA_VISIBLE_DEVICES=0,3"])
    root = HostRoot.single(host.root)
    assert edit_bundle(bundle, root, command=COMMAND).written
    doc = _doc(bundle)
    doc["process"]["env"].remove("NVIDIA_VISIBLE_DEVICES=void")
    _write(bundle, doc)
    again = edit_bundle(bundle, root, command=COMMAND)
    assert again.written and again.plan is None
    doc = _doc(bundle)
    assert not any(e.startswith("NVIDIA_VISIBLE_DEVICES=") for e in doc["process"]["env"])
    assert _gpu_nodes(doc) == []


@given(
    st.lists(
        st.text(alphabet=st.sampled_from(["a", "=", "\ud800", "é", "\x00"]), max_size=8),
        max_size=4,
    )
)
def test_record_of_lone_surrogates_round_trips(env: list[str]) -> None:
    """An env entry holding a lone surrogate (JSON's "\\ud800" escape, which an image's
    config.json may hold; a high one alone, as JSON decoding pairs a high and a low one) is
    recorded and read back exactly: it once raised
    UnicodeEncodeError while the record was written."""
    before = {"process": {"env": [*env, "NVIDIA_VISIBLE_DEVICES=0"]}}
    after = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}, "linux": {"devices": [1]}}
    doc = record_edit(before, after)
    record = read_record(doc)
    assert record is not None
    assert record["replaced_env"] == [
        e for e in [*env, "NVIDIA_VISIBLE_DEVICES=0"] if e not in after["process"]["env"]
    ]
    assert record["added"]["linux.devices"] == [1]
    assert doc["annotations"]["ocihook.edits"].isascii()
