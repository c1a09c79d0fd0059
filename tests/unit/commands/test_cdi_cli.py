"""``ocihook cdi validate`` and ``ocihook cdi list`` run as a user would run them."""

from __future__ import annotations

import json
from pathlib import Path

from support import run_cli, run_cli_process

GOOD = {
    "cdiVersion": "0.5.0",
    "kind": "vendor.com/gpu",
    "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/vgpu0"}]}}],
    "containerEdits": {"env": ["A=1"]},
}
YAML_GOOD = 'cdiVersion: "0.6.0"\nkind: other.org/net\ndevices:\n- name: eth\n  containerEdits:\n    env: [B=2]\n'
BAD_FIELD = {
    "cdiVersion": "0.5.0",
    "kind": "vendor.com/gpu",
    "devices": [{"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "bogus": 1}]}}],
}


def _write(path: Path, data: object) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_validate_reports_every_file_and_exits_11(tmp_path: Path) -> None:
    _write(tmp_path / "good.json", GOOD)
    _write(tmp_path / "net.yaml", YAML_GOOD)
    _write(tmp_path / "bad.json", BAD_FIELD)
    r = run_cli(
        "cdi", "validate", "good.json", "bad.json", "net.yaml", "missing.json", cwd=tmp_path
    )
    assert r.returncode == 11, r.stderr
    assert r.stdout.splitlines() == [
        "good.json: ok: kind vendor.com/gpu, 1 devices, cdiVersion 0.5.0 (minimum 0.5.0)",
        "net.yaml: ok: kind other.org/net, 1 devices, cdiVersion 0.6.0 (minimum 0.3.0)",
    ]
    err = r.stderr.splitlines()
    assert err[0].startswith("bad.json: invalid: unknown field (file bad.json, ")
    assert "field devices[0].containerEdits.deviceNodes[0].bogus" in err[0]
    assert err[1] == (
        "bad.json: invalid: schema: $.devices[0].containerEdits.deviceNodes[0]: "
        "Additional properties are not allowed ('bogus' was unexpected)"
    )
    assert err[2] == "missing.json: invalid: cannot read: No such file or directory"
    assert err[3] == "ocihook: error[bad-cdi-spec]: 2 of 4 CDI spec files invalid"


def test_validate_all_good_exits_0(tmp_path: Path) -> None:
    _write(tmp_path / "good.json", GOOD)
    r = run_cli("cdi", "validate", "good.json", cwd=tmp_path)
    assert (r.returncode, r.stderr) == (0, "")


def test_validate_below_minimum_version_is_invalid(tmp_path: Path) -> None:
    # intelRdt appeared in CDI 0.7.0: a spec declaring 0.3.0 and using it is invalid
    spec = dict(GOOD, cdiVersion="0.3.0")
    spec["containerEdits"] = {"intelRdt": {"closID": "c"}}
    _write(tmp_path / "old.json", spec)
    r = run_cli("cdi", "validate", "old.json", cwd=tmp_path)
    assert r.returncode == 11
    assert "old.json: invalid:" in r.stderr
    assert "0.7.0" in r.stderr


def test_list_priorities_errors_and_conflicts(tmp_path: Path) -> None:
    low, high = tmp_path / "etc", tmp_path / "run"
    _write(low / "a.json", GOOD)
    _write(high / "net.yaml", YAML_GOOD)
    _write(high / "bad.json", BAD_FIELD)
    # two files at the same priority defining other.org/net=dup: dropped and reported
    dup = {
        "cdiVersion": "0.3.0",
        "kind": "other.org/net",
        "devices": [{"name": "dup", "containerEdits": {"env": ["X=1"]}}],
    }
    _write(high / "d1.json", dup)
    _write(high / "d2.json", dup)
    r = run_cli("cdi", "list", "--spec-dir", str(low), "--spec-dir", str(high), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["other.org/net=eth", "vendor.com/gpu=0"]
    assert f"skipped {high / 'bad.json'}:" in r.stderr
    d1, d2 = high / "d1.json", high / "d2.json"
    assert (
        f"ocihook: warning: skipped: CDI specs {d1} and {d2} all define other.org/net=dup at one "
        "priority: a CDI registry uses none of these devices; hint: keep one producer per kind"
        in r.stderr
    )
    # a later directory's copy of a.json: a note naming both files, the later one used
    _write(high / "a-again.json", GOOD)
    r = run_cli("cdi", "list", "--spec-dir", str(low), "--spec-dir", str(high), cwd=tmp_path)
    assert (
        f"ocihook: note: CDI spec {high / 'a-again.json'} overrides {low / 'a.json'} for "
        "vendor.com/gpu=0 (a later spec directory wins)\n" in r.stderr
    )
    (high / "a-again.json").unlink()

    j = run_cli(
        "cdi", "list", "--json", "--spec-dir", str(low), "--spec-dir", str(high), cwd=tmp_path
    )
    out = json.loads(j.stdout)
    assert out["devices"] == ["other.org/net=eth", "vendor.com/gpu=0"]
    assert out["vendors"] == ["other.org", "vendor.com"]
    assert out["classes"] == ["gpu", "net"]
    assert list(out["errors"]) == [str(high / "bad.json")]
    assert out["conflicts"] == {"other.org/net=dup": [str(high / "d1.json"), str(high / "d2.json")]}
    assert out["overridden"] == {}


def test_list_missing_dirs_is_empty(tmp_path: Path) -> None:
    """Nothing to list, and it says why (no spec directory): exit 0, nothing on stdout."""
    r = run_cli("cdi", "list", "--spec-dir", str(tmp_path / "none"), cwd=tmp_path)
    assert (r.returncode, r.stdout) == (0, "")
    assert r.stderr == (
        f"ocihook: no CDI spec directory: {tmp_path / 'none'} does not exist; hint: ocihook "
        "cdi generate --output /var/run/cdi/nvidia.yaml writes a spec (and its directory)\n"
    )


def test_validate_special_files_do_not_block(tmp_path: Path) -> None:
    """A FIFO, /dev/zero and a directory are each reported as not a regular file, without
    reading them, and the other files are still validated (exit 11, not a usage error)."""
    import os

    _write(tmp_path / "good.json", GOOD)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "dir.json").mkdir()
    # a process with a timeout: reading the FIFO or /dev/zero would block
    r = run_cli_process(
        "cdi",
        "validate",
        "good.json",
        "fifo.json",
        "dir.json",
        "/dev/zero",
        cwd=tmp_path,
        timeout=30,
    )
    assert r.returncode == 11
    assert r.stdout.startswith("good.json: ok:")
    assert r.stderr.splitlines()[:3] == [
        "fifo.json: invalid: cannot read: not a regular file (a FIFO)",
        "dir.json: invalid: cannot read: not a regular file (a directory)",
        "/dev/zero: invalid: cannot read: not a regular file (a device)",
    ]


def test_validate_duplicate_fields(tmp_path: Path) -> None:
    text = json.dumps(GOOD)[:-1] + ', "kind": "x/y"}'
    _write(tmp_path / "dup.json", text)
    _write(tmp_path / "dup.yaml", YAML_GOOD + "kind: x/y\n")
    r = run_cli("cdi", "validate", "dup.json", "dup.yaml", cwd=tmp_path)
    assert r.returncode == 11
    err = r.stderr.splitlines()
    assert err[0] == "dup.json: invalid: duplicate field (file dup.json, value 'kind')"
    assert err[1].startswith("dup.yaml: invalid:") and "duplicate field 'kind'" in err[1]
