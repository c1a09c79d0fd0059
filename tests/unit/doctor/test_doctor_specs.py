"""The hooks of the CDI specs on a host (``ocihook.doctor.specs``), as ``ocihook doctor``
and ``ocihook cdi list`` report them: a spec written now names this interpreter with
ocihook's program and records this version; a spec whose hook command is gone, or whose
program's directories hold no ocihook, FAILs; one another version wrote (or one from before
the version was recorded) WARNs, in doctor and on ``cdi list``'s stderr and JSON."""

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
from ocihook.config.options import HOOK_PROGRAM, hook_program, package_dir
from ocihook.core.hostroot import HostRoot
from ocihook.core.version import VERSION
from ocihook.doctor import Context
from ocihook.doctor.specs import check_spec_collisions, check_spec_hooks, spec_hook_problems

INSTALLED = os.path.join(os.path.dirname(sys.executable), "ocihook")
#: The hook command of a spec ``cdi generate`` writes: this interpreter and ocihook's program.
PROGRAM = [sys.executable, "-I", "-S", "-c", hook_program([package_dir()])]


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


def test_a_generated_spec_names_the_interpreter(spec_doc: dict[str, Any]) -> None:
    hooks = _hooks(spec_doc)
    assert hooks and {h["path"] for h in hooks} == {sys.executable}
    assert all(h["args"][:5] == PROGRAM for h in hooks)
    assert all(h["args"][5:9] == ["hook", "cdi", "--ocihook-version", VERSION] for h in hooks)
    assert spec_hook_problems(_spec(spec_doc)) == ([], [])


def test_hook_path_names_an_installed_command(sim: Any, tmp_path: Path) -> None:
    """``cdi generate --hook-path``: the spec's hooks run that command (the form ocihook
    wrote before the interpreter form); a relative path is refused, nothing written."""
    out = tmp_path / "nvidia.json"
    root = ["--driver-root", sim.root, "--dev-root", sim.root, "--output", str(out)]
    r = run_cli("cdi", "generate", *root, "--hook-path", INSTALLED)
    assert r.returncode == 0, r.stderr
    hooks = _hooks(json.loads(out.read_text()))
    assert hooks and all(h["path"] == h["args"][0] == INSTALLED for h in hooks)
    assert all(h["args"][1:5] == ["hook", "cdi", "--ocihook-version", VERSION] for h in hooks)
    out.unlink()
    r = run_cli("cdi", "generate", *root, "--hook-path", "bin/ocihook")
    assert r.returncode != 0 and not out.exists()
    assert r.stderr.splitlines() == [
        "ocihook: error[bad-cdi-spec]: must be an absolute path (field --hook-path, value "
        "'bin/ocihook')"
    ]


def _program(doc: dict[str, Any], dirs: list[str]) -> dict[str, Any]:
    """``doc`` with each hook's program naming ``dirs``."""
    for h in _hooks(doc):
        h["args"][4] = hook_program(dirs)
    return doc


def _holds_no_ocihook(where: str) -> str:
    return (
        f"its hook runs ocihook with {sys.executable} from {where}, which holds no ocihook "
        "(moved, removed, or installed for another Python)"
    )


def test_a_program_whose_directory_holds_no_ocihook_fails(
    spec_doc: dict[str, Any], tmp_path: Path
) -> None:
    """A virtual environment moved, or rebuilt for another Python: the interpreter is there,
    the directory the program names is not (or holds no ocihook)."""
    old = str(tmp_path / "venv/lib/python3.11/site-packages")
    doc = _program(json.loads(json.dumps(spec_doc)), [old])
    want = _holds_no_ocihook(old)
    assert spec_hook_problems(_spec(doc)) == ([want], [])
    (c,) = check_spec_hooks(Context(HostRoot(), str(_write(tmp_path, doc))))
    assert (c.status, c.evidence) == ("FAIL", want)
    # the same directory holding the package: nothing to say
    pkg = Path(old) / "ocihook"
    pkg.mkdir(parents=True)
    (pkg / "_main.py").write_text("")
    assert spec_hook_problems(_spec(doc)) == ([], [])
    # a name holding "]; " is read whole: checked, not skipped
    odd = str(tmp_path / "a]; b")
    assert spec_hook_problems(_spec(_program(doc, [odd]))) == ([_holds_no_ocihook(odd)], [])


def test_a_program_with_a_relative_directory_fails(
    spec_doc: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative directory is found from the runtime's working directory (the bundle, for
    runc): doctor fails it even where it happens to resolve from here."""
    monkeypatch.chdir("/")
    relative = package_dir().lstrip("/")
    doc = _program(json.loads(json.dumps(spec_doc)), [relative])
    want = (
        f"its hook runs ocihook with {sys.executable} from the relative directory "
        f"{relative!r}, which the runtime's working directory would decide"
    )
    assert spec_hook_problems(_spec(doc)) == ([want], [])
    # no directory at all: the package is nowhere
    assert spec_hook_problems(_spec(_program(doc, []))) == ([_holds_no_ocihook("nowhere")], [])


def test_a_missing_hook_command_fails(spec_doc: dict[str, Any], tmp_path: Path) -> None:
    gone = str(tmp_path / "old-venv/bin/python3")
    doc = json.loads(json.dumps(spec_doc).replace(sys.executable, gone))
    assert spec_hook_problems(_spec(doc)) == ([f"hook command {gone} does not exist"], [])
    (c,) = check_spec_hooks(Context(HostRoot(), str(_write(tmp_path, doc))))
    assert (c.layer, c.status) == ("runtime", "FAIL")
    assert c.name == f"CDI hooks of {tmp_path}/etc/cdi/nvidia.json"
    assert c.evidence == f"hook command {gone} does not exist"
    assert c.fix.startswith("regenerate the spec with the installed ocihook")


def test_a_command_that_is_no_program_fails(spec_doc: dict[str, Any], tmp_path: Path) -> None:
    plain = tmp_path / "python3"
    plain.write_text("#!/bin/sh\n")
    doc = json.loads(json.dumps(spec_doc).replace(sys.executable, str(plain)))
    assert spec_hook_problems(_spec(doc))[0] == [f"hook command {plain} is not executable"]


def test_another_version_warns(spec_doc: dict[str, Any], tmp_path: Path) -> None:
    doc = json.loads(json.dumps(spec_doc))
    for h in _hooks(doc):
        h["args"][h["args"].index("--ocihook-version") + 1] = "0.0.9"
    assert spec_hook_problems(_spec(doc)) == (
        [],
        [f"written by ocihook 0.0.9; this is ocihook {VERSION}"],
    )
    (c,) = check_spec_hooks(Context(HostRoot(), str(_write(tmp_path, doc))))
    assert c.status == "WARN"


def test_a_spec_from_before_the_version_warns(spec_doc: dict[str, Any], tmp_path: Path) -> None:
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
    assert warnings == ["written by an older ocihook (its hook has no --ocihook-version)"]


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
    copy = tmp_path / "venv/bin/python3"
    copy.parent.mkdir(parents=True)
    shutil.copy(sys.executable, copy)
    doc = json.loads(json.dumps(spec_doc).replace(sys.executable, str(copy)))
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
