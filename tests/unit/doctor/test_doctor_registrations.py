"""doctor's check of hooks registered without ``env`` where the image's environment reaches
them (:mod:`ocihook.doctor.registrations`): hooks.d files and a bundle's ``config.json``,
and the interpreter the installed commands start."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from support import REPO

from ocihook.core.hostroot import HostRoot
from ocihook.doctor import Context, check_registrations
from ocihook.doctor.registrations import (
    EXPOSED_STAGES,
    SCRIPT_EXEC_SITE,
    SCRIPT_HEAD,
    UnsafeHook,
    hooks_d_without_env,
    hooks_without_env,
    installed_script_python,
)
from ocihook.engines import HOOKS_D_DIRS, hooks_d_document

HOOK_PROGRAM = "/usr/bin/python3"
OCIHOOK_ARGS = [HOOK_PROGRAM, "-I", "-c", "from ocihook._main import main", "hook"]


def _ctx(etc: Path) -> Context:
    return Context(HostRoot.single(str(etc)), str(etc))


def _hooks_d(etc: Path, name: str, doc: Any) -> str:
    path = etc / HOOKS_D_DIRS[1].lstrip("/") / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def _hand(stage: str, program: str = HOOK_PROGRAM, env: list[str] | None = None) -> dict[str, Any]:
    """A hooks.d file written by hand: ocihook's (``program`` the interpreter) or another
    program's, at ``stage``, with ``env`` when given."""
    args = [*OCIHOOK_ARGS, stage] if program == HOOK_PROGRAM else [program]
    hook: dict[str, Any] = {"path": program, "args": args}
    if env is not None:
        hook["env"] = env
    return {"version": "1.0.0", "hook": hook, "when": {"always": True}, "stages": [stage]}


def test_ocihooks_own_hooks_d_files_pass(tmp_path: Path) -> None:
    for stage in ("prestart", "poststop"):
        _hooks_d(tmp_path, f"ocihook-{stage}.json", hooks_d_document(HOOK_PROGRAM, stage))
    (check,) = check_registrations(_ctx(tmp_path))
    assert (check.status, check.name) == ("PASS", "hook registrations")
    assert check.evidence == (
        "2 hook(s) in 2 file(s): none at createContainer or startContainer without an explicit env"
    )


def test_hooks_d_without_env_at_an_exposed_stage(tmp_path: Path) -> None:
    """ocihook's hook without env at createContainer is FAIL (it refuses to run so),
    another program's at startContainer WARN; prestart without env (the runtime's
    environment), an explicit env, and a file that is not JSON are not flagged."""
    ours = _hooks_d(tmp_path, "a.json", _hand("createContainer"))
    theirs = _hooks_d(tmp_path, "b.json", _hand("startContainer", "/usr/bin/vendor-hook"))
    _hooks_d(tmp_path, "c.json", _hand("prestart"))
    _hooks_d(tmp_path, "d.json", _hand("createContainer", env=["PATH=/usr/bin"]))
    _hooks_d(tmp_path, "e.json", "{not json")
    checks = check_registrations(_ctx(tmp_path))
    assert [(c.status, c.name) for c in checks] == [
        ("FAIL", f"hook registration {ours}"),
        ("WARN", f"hook registration {theirs}"),
    ]
    assert checks[0].evidence == (
        "ocihook's hook at createContainer has no env: runc runs it with the container's "
        "process.env, chosen by the image; ocihook refuses to run so (exit 9, "
        "error[container-environment]): containers fail to start"
    )
    assert "hook /usr/bin/vendor-hook at startContainer has no env" in checks[1].evidence
    assert "LD_PRELOAD runs inside it as root" in checks[1].evidence
    assert all('"env": ["PATH=' in c.fix for c in checks)


def test_bundle_hooks(tmp_path: Path) -> None:
    """Every stage of a bundle's config.json: only createContainer and startContainer
    hooks without env (absent or null; ``[]`` is an empty environment) are flagged."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    bare = {"path": "/usr/local/bin/ocihook", "args": ["ocihook", "hook", "createContainer"]}
    hooks = {
        stage: [dict(bare), {**bare, "env": ["PATH=/bin"]}, {**bare, "env": None}]
        for stage in ("prestart", "createRuntime", *EXPOSED_STAGES, "poststart", "poststop")
    }
    hooks["createContainer"].append({**bare, "env": []})
    (bundle / "config.json").write_text(json.dumps({"ociVersion": "1.0.2", "hooks": hooks}))
    empty = tmp_path / "etc"
    empty.mkdir()
    checks = check_registrations(_ctx(empty), str(bundle))
    config = f"{bundle}/config.json"
    assert [(c.status, c.name) for c in checks] == [("FAIL", f"hook registration {config}")] * 4
    assert [c.evidence.split(" has no env")[0] for c in checks] == [
        "ocihook's hook at createContainer",
        "ocihook's hook at createContainer",
        "ocihook's hook at startContainer",
        "ocihook's hook at startContainer",
    ]
    (bundle / "config.json").write_text(json.dumps({"hooks": {"prestart": [bare]}}))
    (check,) = check_registrations(_ctx(empty), str(bundle))
    assert check.status == "PASS" and check.evidence.startswith("1 hook(s) in 1 file(s)")


def test_nothing_read_is_no_check(tmp_path: Path) -> None:
    assert check_registrations(_ctx(tmp_path)) == []
    assert check_registrations(_ctx(tmp_path), str(tmp_path / "no-bundle")) == []


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(["hooks", "hook", "path", "args", "env", "stages", *EXPOSED_STAGES]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(JSON)
def test_any_document_is_read_without_raising(doc: Any) -> None:
    for found in (hooks_without_env(doc, "f"), hooks_d_without_env(doc, "f")):
        assert all(isinstance(h, UnsafeHook) and h.stage in EXPOSED_STAGES for h in found)
        assert all(isinstance(h.path, str) for h in found)


def test_installed_script_python() -> None:
    """packaging/bin's commands start the python3 beside the path the engine names; any
    other file is not one of them."""
    for name in ("ocihook", "ocihook-runtime", "nvidia-container-runtime-hook"):
        with open(os.path.join(REPO, "packaging/bin", name)) as f:
            head = f.read(512)
        assert installed_script_python(f"/opt/venv/bin/{name}", head) == "/opt/venv/bin/python3"
        assert installed_script_python(name, head) == "./python3"
    assert installed_script_python("/usr/bin/x", "#!/usr/bin/python3 -I\nimport sys\n") is None
    assert installed_script_python("/usr/bin/x", "#!/bin/sh\nexec python3 -I x\n") is None
    # 0.1.0's scripts (-I alone) start the same interpreter
    old = SCRIPT_HEAD + "case $0 in */*) d=${0%/*} ;; *) d=. ;; esac\n" + SCRIPT_EXEC_SITE
    assert installed_script_python("/opt/v/bin/ocihook", old) == "/opt/v/bin/python3"
    # a line that names another interpreter is not one of them
    other = SCRIPT_HEAD + 'exec "$d/python2" -I -S "$0" "$@"\n'
    assert installed_script_python("/opt/v/bin/ocihook", other) is None
