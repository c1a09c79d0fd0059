"""doctor's OCI runtime check: the version of runc and crun on PATH, WARN for a runc
older than 1.1.14 (CVE-2024-45310, its bind-mount-target race)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

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
