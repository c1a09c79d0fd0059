"""``ocihook.config.options.cdi_hook_command``: the command a CDI spec names for its hooks
is an installed ``ocihook`` (the one writing the spec, else the one beside the
interpreter), never the interpreter with a program unless no such command exists."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support import REPO

from ocihook.config.options import cdi_hook_command, hook_program


def _command(path: Path, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(mode)
    return path


def test_the_command_writing_the_spec_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = _command(tmp_path / "usr/bin/ocihook")
    assert cdi_hook_command(str(writer)) == (str(writer),)
    # a relative argv[0] (./ocihook) is made absolute
    monkeypatch.chdir(writer.parent)
    assert cdi_hook_command("./ocihook") == (str(writer),)


def test_else_the_command_beside_the_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    venv = tmp_path / "venv/bin"
    beside = _command(venv / "ocihook")
    monkeypatch.setattr(sys, "executable", str(venv / "python3"))
    # argv[0] of another program (pytest, python -m ocihook's __main__.py)
    assert cdi_hook_command("/usr/lib/python3/dist-packages/ocihook/__main__.py") == (str(beside),)
    # an ocihook argv[0] that is no executable file is passed over
    plain = _command(tmp_path / "plain/ocihook", mode=0o644)
    assert cdi_hook_command(str(plain)) == (str(beside),)


def test_without_an_installed_command_the_interpreter_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin/python3"))
    assert cdi_hook_command("-c") == (
        str(tmp_path / "bin/python3"),
        "-I",
        "-S",
        "-c",
        hook_program(),
    )


def test_start_path_dirs_are_what_site_added(tmp_path: Path) -> None:
    """A hook started with -I -S gets the directories this interpreter's site added: the
    site-packages, and a directory a .pth file added (a venv's dependencies can come from
    one), never the standard library, the current directory or PYTHONPATH's."""
    import subprocess
    import sysconfig

    extra = tmp_path / "from-a-pth"
    extra.mkdir()
    code = (
        "import sys\n"
        f"sys.path.append({str(extra)!r}); sys.path.insert(0, '')\n"
        "from ocihook.config.options import start_path_dirs\n"
        "print('\\n'.join(start_path_dirs()))\n"
    )
    before = tmp_path / "from-pythonpath"
    before.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(before)},
    ).stdout.split()
    # PYTHONPATH comes before the standard library: never named (the hook runs as root)
    assert str(before) not in out
    assert out[0] == REPO
    assert sysconfig.get_path("purelib") in out
    assert str(extra) in out
    assert sysconfig.get_path("stdlib") not in out and "" not in out
    assert not [p for p in out if p.endswith((".zip", "lib-dynload"))]
