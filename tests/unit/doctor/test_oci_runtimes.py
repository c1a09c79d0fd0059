"""doctor's OCI runtime check: the version of runc and crun on PATH, WARN for a runc
older than 1.1.14 (CVE-2024-45310, its bind-mount-target race)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from support import bare_venv

from ocihook.core.hostroot import HostRoot
from ocihook.doctor.context import Context
from ocihook.doctor.runtime import check_oci_runtimes


def _runtime(directory: Path, name: str, line: str) -> None:
    path = directory / name
    path.write_text(f"#!{sys.executable} -I\nprint({line!r})\n")
    path.chmod(0o755)


@pytest.mark.parametrize(
    ("runc", "status"),
    [("runc version 1.1.5+ds1", "WARN"), ("runc version 1.1.14", "PASS"), ("nonsense", "WARN")],
)
def test_runc_version_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runc: str, status: str
) -> None:
    _runtime(tmp_path, "runc", runc)
    _runtime(tmp_path, "crun", "crun version 1.8.1")
    monkeypatch.setenv("PATH", str(tmp_path))
    checks = check_oci_runtimes(Context(HostRoot.single("/")))
    assert [(c.name, c.status) for c in checks] == [
        ("OCI runtime runc", status),
        ("OCI runtime crun", "PASS"),
    ]
    assert checks[1].evidence == f"{tmp_path}/crun: crun 1.8.1"
    if runc.startswith("runc version 1.1.5"):
        assert "CVE-2024-45310" in checks[0].evidence
        assert checks[0].fix == "install runc 1.1.14 or later, or register ocihook in hook mode"
    elif status == "PASS":
        assert checks[0].evidence == f"{tmp_path}/runc: runc 1.1.14"
    else:
        assert checks[0].evidence == f"{tmp_path}/runc --version says no version"


def test_not_installed_or_other_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert check_oci_runtimes(Context(HostRoot.single("/"))) == []
    _runtime(tmp_path, "runc", "runc version 1.1.5")
    assert check_oci_runtimes(Context(HostRoot.single("/"), config_root=str(tmp_path))) == []


@pytest.mark.parametrize("older", [False, True])
def test_a_podman_hook_needs_what_its_program_imports(tmp_path: Path, older: bool) -> None:
    """A hooks.d registration whose program calls ``run()`` (``HOOK_PROGRAM``) is a problem
    for an interpreter whose ocihook predates ``run`` (a downgraded library); one written
    with the earlier program (``main()``) is not."""

    from ocihook.config.options import HOOK_PROGRAM
    from ocihook.doctor import runtime
    from ocihook.engines.common import Registration

    venv = tmp_path / "venv"
    lib = bare_venv(venv)
    (lib / "ocihook").mkdir()
    (lib / "ocihook" / "__init__.py").write_text("")
    main = "def main():\n    return 0\n"
    (lib / "ocihook" / "_main.py").write_text(main if older else main + "def run():\n    pass\n")
    python = str(venv / "bin" / "python")
    earlier = "import sys; from ocihook._main import main; sys.exit(main())"
    for program, broken in ((HOOK_PROGRAM, older), (earlier, False)):
        reg = Registration("podman", "f.json", "f.json", python, (python, "-I", "-c", program))
        problem = runtime._program_problem(reg)
        if broken:
            assert problem is not None and "cannot import name 'run'" in problem
        else:
            assert problem is None
