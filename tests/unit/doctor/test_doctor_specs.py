"""The hooks of the CDI specs on a host (``ocihook.doctor.specs``), as ``ocihook doctor``
and ``ocihook cdi list`` report them: a spec written now names an installed ``ocihook``
command that exists and records this version; a spec whose hook command is gone FAILs, one
another version wrote (or an interpreter-bound one from before the version was recorded)
WARNs, in doctor and on ``cdi list``'s stderr and JSON."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from support import run_cli

from ocihook.cdi.spec import Spec, load_spec
from ocihook.config.options import HOOK_PROGRAM
from ocihook.core.hostroot import HostRoot
from ocihook.core.version import VERSION
from ocihook.doctor import Context
from ocihook.doctor.specs import check_spec_collisions, check_spec_hooks, spec_hook_problems

INSTALLED = os.path.join(os.path.dirname(sys.executable), "ocihook")


@pytest.fixture(scope="module")
def spec_doc(sim: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The JSON spec ``ocihook cdi generate`` writes for the simulated host."""
    out = tmp_path_factory.mktemp("gen") / "nvidia.json"
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    r = run_cli("cdi", "generate", *root, "--output", str(out))
    assert r.returncode == 0, r.stderr
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _hooks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    edits = [doc["containerEdits"], *(d["containerEdits"] for d in doc["devices"])]
    return [h for e in edits for h in e.get("hooks", [])]


def _spec(doc: dict[str, Any]) -> Spec:
    return load_spec(json.dumps(doc).encode(), path="nvidia.json")


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    d = tmp_path / "etc/cdi"
    d.mkdir(parents=True, exist_ok=True)
    (d / "nvidia.json").write_text(json.dumps(doc))
    return tmp_path


def test_a_generated_spec_names_the_installed_command(spec_doc: dict[str, Any]) -> None:
    hooks = _hooks(spec_doc)
    assert hooks and {h["path"] for h in hooks} == {INSTALLED}
    assert all(h["args"][1:5] == ["hook", "cdi", "--ocihook-version", VERSION] for h in hooks)
    assert spec_hook_problems(_spec(spec_doc)) == ([], [])


def test_a_missing_hook_command_fails(spec_doc: dict[str, Any], tmp_path: Path) -> None:
    gone = str(tmp_path / "old-venv/bin/ocihook")
    doc = json.loads(json.dumps(spec_doc).replace(INSTALLED, gone))
    assert spec_hook_problems(_spec(doc)) == ([f"hook command {gone} does not exist"], [])
    (c,) = check_spec_hooks(Context(HostRoot(), str(_write(tmp_path, doc))))
    assert (c.layer, c.status) == ("runtime", "FAIL")
    assert c.name == f"CDI hooks of {tmp_path}/etc/cdi/nvidia.json"
    assert c.evidence == f"hook command {gone} does not exist"
    assert c.fix.startswith("regenerate the spec with the installed ocihook")


def test_a_command_that_is_no_program_fails(spec_doc: dict[str, Any], tmp_path: Path) -> None:
    plain = tmp_path / "ocihook"
    plain.write_text("#!/bin/sh\n")
    doc = json.loads(json.dumps(spec_doc).replace(INSTALLED, str(plain)))
    assert spec_hook_problems(_spec(doc))[0] == [f"hook command {plain} is not executable"]


def test_another_version_warns(spec_doc: dict[str, Any], tmp_path: Path) -> None:
    doc = json.loads(json.dumps(spec_doc))
    for h in _hooks(doc):
        h["args"][4] = "0.0.9"
    assert spec_hook_problems(_spec(doc)) == (
        [],
        [f"written by ocihook 0.0.9; this is ocihook {VERSION}"],
    )
    (c,) = check_spec_hooks(Context(HostRoot(), str(_write(tmp_path, doc))))
    assert c.status == "WARN"


def test_an_interpreter_bound_spec_from_before_the_version_warns(
    spec_doc: dict[str, Any], tmp_path: Path
) -> None:
    """The form older ocihook versions wrote: the interpreter with a ``-c`` program and
    ``hook create-container --link ... --lib ...``."""
    doc = json.loads(json.dumps(spec_doc))
    (hook,) = doc["containerEdits"]["hooks"]
    hook["path"] = sys.executable
    hook["args"] = [sys.executable, "-I", "-c", HOOK_PROGRAM, "hook", "create-container"]
    hook["args"] += [
        "--link",
        "libcuda.so.1::/usr/lib/libcuda.so",
        "--lib",
        "/usr/lib/libcuda.so.1",
    ]
    doc["devices"] = [d for d in doc["devices"] if "hooks" not in d["containerEdits"]]
    failures, warnings = spec_hook_problems(_spec(doc))
    assert failures == []
    assert warnings == [
        "written by an older ocihook (its hook has no --ocihook-version)",
        f"its hook runs ocihook as a program given to the interpreter {sys.executable}: a "
        "moved or recreated virtual environment or a Python upgrade breaks it",
    ]


def test_other_hooks_are_checked_for_their_command_only(tmp_path: Path) -> None:
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "example.com/dev",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/null"}]}}],
        "containerEdits": {
            "hooks": [{"hookName": "createContainer", "path": "/bin/true", "args": ["true"]}]
        },
    }
    assert spec_hook_problems(_spec(doc)) == ([], [])
    doc["containerEdits"]["hooks"][0]["path"] = "/usr/bin/nvidia-cdi-hook-gone"
    assert spec_hook_problems(_spec(doc))[0] == [
        "hook command /usr/bin/nvidia-cdi-hook-gone does not exist"
    ]


def test_cdi_list_reports_the_hooks(spec_doc: dict[str, Any], tmp_path: Path) -> None:
    copy = tmp_path / "venv/bin/ocihook"
    copy.parent.mkdir(parents=True)
    shutil.copy(INSTALLED, copy)
    doc = json.loads(json.dumps(spec_doc).replace(INSTALLED, str(copy)))
    spec_dir = _write(tmp_path, doc) / "etc/cdi"
    r = run_cli("cdi", "list", "--spec-dir", str(spec_dir))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    copy.unlink()  # the virtual environment is gone: the spec's devices would not start
    r = run_cli("cdi", "list", "--spec-dir", str(spec_dir))
    assert r.returncode == 0 and "nvidia.com/gpu=all" in r.stdout.splitlines()
    assert r.stderr.splitlines() == [
        f"ocihook: warning: {spec_dir}/nvidia.json: hook command {copy} does not exist: "
        "containers given its devices do not start; hint: regenerate the spec with the "
        "installed ocihook: systemctl start ocihook-cdi-refresh.service, or ocihook cdi "
        "generate --output <the spec file>"
    ]
    r = run_cli("cdi", "list", "--json", "--spec-dir", str(spec_dir))
    assert json.loads(r.stdout)["hook_problems"] == {
        f"{spec_dir}/nvidia.json": {
            "failures": [f"hook command {copy} does not exist"],
            "warnings": [],
        }
    }


def test_two_producers_of_one_name(spec_doc: dict[str, Any], tmp_path: Path) -> None:
    """Two spec files of one directory defining the same names: one FAIL naming both
    files; a later directory's file overriding an earlier one: one WARN; one producer per
    name: one PASS; no spec at all: nothing."""
    root = _write(tmp_path, spec_doc)
    ctx = Context(HostRoot(), str(root))
    (c,) = check_spec_collisions(ctx)
    assert (c.name, c.status) == ("CDI device names", "PASS")
    first = root / "etc/cdi/nvidia.json"
    second = root / "etc/cdi/toolkit.json"
    shutil.copy(first, second)
    (c,) = check_spec_collisions(ctx)
    assert (c.layer, c.status, c.name) == (
        "runtime",
        "FAIL",
        f"CDI device names of {first}, {second}",
    )
    assert c.evidence.startswith(f"CDI specs {first} and {second} all define nvidia.com/gpu=")
    assert "\n" not in c.evidence and c.fix.startswith("keep one producer per kind")
    run = root / "var/run/cdi"
    run.mkdir(parents=True)
    second.rename(run / "nvidia.json")
    (c,) = check_spec_collisions(ctx)
    assert (c.status, c.evidence.split(" for ")[0]) == (
        "WARN",
        f"CDI spec {run / 'nvidia.json'} overrides {first}",
    )
    assert check_spec_collisions(Context(HostRoot(), str(tmp_path / "empty"))) == []
