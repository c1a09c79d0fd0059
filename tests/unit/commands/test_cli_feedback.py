"""Each command says what it did, or why it did nothing: ``ocihook hook`` with an unknown,
misspelled or idle stage; ``ocihook edit``'s summary line and ``-q``; ``cdi generate
--output`` into a missing directory; ``cdi list`` without a spec directory."""

from __future__ import annotations

import json
import os
import subprocess
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import busybox_bundle, run_cli

from ocihook.commands.fast import HOOK_STAGES, INJECT_STAGES, hook_stage_error
from ocihook.sim import host as simhost


def _ocihook(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return run_cli(*args, stdin=stdin)


# -- hook stages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stage", "meant"),
    [
        ("createcontainer", "createContainer"),
        ("CreateContainer", "createContainer"),
        ("create_runtime", "createRuntime"),
        ("PRESTART", "prestart"),
        ("poststart", None),
        ("startContainer", None),
        ("create-containers", None),
    ],
)
def test_unknown_stage_is_exit_2_naming_the_stages(stage: str, meant: str | None) -> None:
    r = _ocihook("hook", stage, stdin="{}")
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith(f"ocihook: error[usage]: hook stage {stage!r} is not one of ")
    for valid in HOOK_STAGES:
        assert valid in line
    assert (f"did you mean {meant}?" in line) == (meant is not None), line


def test_missing_stage() -> None:
    r = _ocihook("hook")
    assert r.returncode == 2
    assert r.stderr.startswith("ocihook: error[usage]: no hook stage given: it must be one of")


@given(st.text(max_size=20))
def test_stage_check_accepts_exactly_the_stages(stage: str) -> None:
    err = hook_stage_error(["hook", stage])
    if stage in HOOK_STAGES or stage in ("-h", "--help"):
        assert err is None
    else:
        assert err is not None and all(s in err for s in INJECT_STAGES)
    assert hook_stage_error(["edit", stage]) is None


@pytest.mark.parametrize("stage", ["create-container", "create-symlinks", "update-ldcache"])
def test_idle_helper_stage_is_an_error(stage: str, tmp_path: Any) -> None:
    """``create-container`` is the helper config.json edits register, not the
    createContainer stage: run by a runtime (a valid state) with nothing to do it says
    so, exit 2, instead of exiting 0."""
    bundle = tmp_path / "b"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(
        json.dumps({"ociVersion": "1.0.2", "root": {"path": "rootfs"}})
    )
    state = json.dumps(
        {
            "ociVersion": "1.0.2",
            "id": "c1",
            "status": "created",
            "pid": 2147483647,
            "bundle": str(bundle),
        }
    )
    r = _ocihook("hook", stage, stdin=state)
    assert r.returncode == 2, r.stderr
    assert f"hook {stage} has nothing to do" in r.stderr
    assert "ocihook hook createContainer" in r.stderr
    # a state that is not one is reported as such first (exit 4)
    assert _ocihook("hook", stage, stdin="{}").returncode == 4


def test_helper_with_work_still_runs(tmp_path: Any) -> None:
    """With --link the helper reads its state as before (here: a bad one, exit 4)."""
    r = _ocihook("hook", "create-symlinks", "--link", "a::/b", stdin="{}")
    assert r.returncode == 4 and "bad-state" in r.stderr


# -- edit summary --------------------------------------------------------------------------


@pytest.fixture
def host(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    return simhost.build(str(tmp_path_factory.mktemp("sim")), make_dev_nodes=False)


def _edit(
    bundle: str, host: simhost.SimulatedHost, *extra: str
) -> subprocess.CompletedProcess[str]:
    return _ocihook(
        "edit", "-b", bundle, "--driver-root", host.root, "--dev-root", host.root, *extra
    )


def test_edit_prints_one_summary_line(tmp_path: Any, host: simhost.SimulatedHost) -> None:
    bundle = busybox_bundle(tmp_path / "b", ["sh"], ["NVIDIA_VISIBLE_DEVICES=0,3"])
    r = _edit(bundle, host)
    assert r.returncode == 0 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    with open(os.path.join(bundle, "config.json")) as f:
        doc = json.load(f)
    nodes = len(doc["linux"]["devices"])
    mounts = sum(1 for m in doc["mounts"] if m["source"].startswith(host.root))
    assert line.startswith(f"ocihook: {bundle}/config.json: added 2 GPUs, {nodes} device nodes, ")
    assert f", {mounts} mounts, " in line and line.endswith("; written")
    summary = line.split(": added ", 1)[1].removesuffix("; written")
    again = _edit(bundle, host)
    assert again.returncode == 0
    assert again.stderr == (
        f"ocihook: {bundle}/config.json: already edited by ocihook for this request "
        f"({summary}); unchanged\n"
    )


def test_edit_quiet(tmp_path: Any, host: simhost.SimulatedHost) -> None:
    bundle = busybox_bundle(tmp_path / "b", ["sh"], ["NVIDIA_VISIBLE_DEVICES=1"])
    r = _edit(bundle, host, "-q")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    with open(os.path.join(bundle, "config.json")) as f:
        assert "/dev/nvidia1" in f.read()
    assert _edit(bundle, host, "--quiet").stderr == ""
    nothing = busybox_bundle(tmp_path / "n" / "b", ["sh"], ["A=1"])
    assert _edit(nothing, host, "-q").stderr == ""
    assert "nothing requested" in _edit(nothing, host).stderr


# -- CDI directories -----------------------------------------------------------------------


def test_cdi_generate_creates_the_spec_directory(
    tmp_path: Any, host: simhost.SimulatedHost
) -> None:
    """/var/run/cdi does not exist on a fresh host: --output makes it, 0755 (as the CDI
    library's writer does), and the boot unit's command works."""
    out = tmp_path / "run" / "cdi" / "nvidia.yaml"
    old = os.umask(0o022)
    try:
        r = _ocihook(
            "cdi",
            "generate",
            "--driver-root",
            host.root,
            "--dev-root",
            host.root,
            "--output",
            str(out),
        )
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes().startswith(b"---\ncdiVersion: ")
    for d in (tmp_path / "run", tmp_path / "run" / "cdi"):
        assert oct(d.stat().st_mode & 0o777) == "0o755"
    listed = _ocihook("cdi", "list", "--spec-dir", str(out.parent))
    assert listed.returncode == 0 and "nvidia.com/gpu=0" in listed.stdout.splitlines()


def test_cdi_list_says_when_there_is_nothing(tmp_path: Any) -> None:
    r = _ocihook(
        "cdi", "list", "--spec-dir", str(tmp_path / "a"), "--spec-dir", str(tmp_path / "b")
    )
    assert (r.returncode, r.stdout) == (0, "")
    assert r.stderr.startswith(
        f"ocihook: no CDI spec directory: {tmp_path / 'a'}, {tmp_path / 'b'} do not exist"
    )
    (tmp_path / "a").mkdir()
    r = _ocihook(
        "cdi", "list", "--spec-dir", str(tmp_path / "a"), "--spec-dir", str(tmp_path / "b")
    )
    assert r.stderr.splitlines() == [
        f"ocihook: note: CDI spec directory {tmp_path / 'b'} does not exist",
        f"ocihook: no CDI spec files in {tmp_path / 'a'}, {tmp_path / 'b'}",
    ]
    r = _ocihook("cdi", "list", "--json", "--spec-dir", str(tmp_path / "b"))
    assert json.loads(r.stdout)["missing_dirs"] == [str(tmp_path / "b")]
