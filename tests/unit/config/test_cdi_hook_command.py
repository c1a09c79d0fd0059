"""``ocihook.config.options.cdi_hook_command``: the command a CDI spec names for its hooks
is this interpreter, isolated and without ``site``, with ocihook's program naming the one
directory it needs: the one holding the ``ocihook`` package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO

from ocihook.config.options import (
    cdi_hook_command,
    hook_program,
    hook_program_dirs,
    missing_program_module,
    package_dir,
    program_dirs,
    start_path_dirs,
)


def test_the_interpreter_with_the_package_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin/python3"))
    assert package_dir() == REPO  # this checkout: ocihook/ is under the repository root
    command = cdi_hook_command()
    assert command == (str(tmp_path / "bin/python3"), "-I", "-S", "-c", hook_program([REPO]))
    assert hook_program_dirs(command[4]) == [REPO]
    assert start_path_dirs()[0] == package_dir()


def test_the_program_runs_ocihook_from_an_empty_environment(tmp_path: Path) -> None:
    """Started as a runtime starts a hook (no environment, another working directory), the
    command runs this ocihook (``hook cdi --help``: its usage, from the standard library
    alone, as the hook itself needs nothing else)."""
    proc = subprocess.run(
        [*cdi_hook_command(), "hook", "cdi", "--help"],
        capture_output=True,
        text=True,
        env={},
        cwd=tmp_path,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.startswith("usage: ocihook hook cdi [-h] [--ocihook-version VERSION]")


@pytest.mark.parametrize(
    ("text", "dirs"),
    [
        (hook_program(["/a", "/b c"]), ["/a", "/b c"]),
        (hook_program([]), []),
        ("import sys; from ocihook._main import run; run()", None),  # relies on site
        ("import sys; sys.path += ['/a']; import os; os.system('x')", None),  # not ocihook's
        ("import sys; sys.path += [1]; from ocihook._main import run; run()", None),
        ("import sys; sys.path += ['/a'; from ocihook._main import run; run()", None),
        # "]; " inside a directory's name is part of it, not the list's end
        (hook_program(["/opt/a]; b/site-packages"]), ["/opt/a]; b/site-packages"]),
        # escapes (a quote of each kind, a backslash, a newline) go through literal_eval
        (hook_program(["/a'b\"c", "/d\\e", "/f\ng"]), ["/a'b\"c", "/d\\e", "/f\ng"]),
        (hook_program(["/a'b", '/c"d', "/é"]), ["/a'b", '/c"d', "/é"]),
        ("import sys; sys.path += ['/a' '/b']; from ocihook._main import run; run()", ["/a/b"]),
        ("import sys; sys.path += ['/a',]; from ocihook._main import run; run()", ["/a"]),
        ("import sys; sys.path += ['/a',, '/b']; from ocihook._main import run; run()", None),
    ],
)
def test_hook_program_dirs(text: str, dirs: list[str] | None) -> None:
    assert hook_program_dirs(text) == dirs


@given(st.lists(st.text(max_size=12), max_size=4))
def test_hook_program_dirs_round_trip(dirs: list[str]) -> None:
    """Whatever the directories' names, the program names them back (no character of a
    name ends the list early or is read differently)."""
    assert hook_program_dirs(hook_program(dirs)) == dirs


@pytest.mark.parametrize(
    ("dirs", "missing"),
    [
        (["{repo}"], None),
        (["/nonexistent-abc", "{repo}"], None),
        (["/nonexistent-abc"], "/nonexistent-abc/ocihook/_main.py"),
        ([], "ocihook/_main.py"),
        (["relative/dir", "{repo}"], "relative/dir"),
        ([""], ""),
    ],
)
def test_missing_program_module(dirs: list[str], missing: str | None) -> None:
    """What keeps ocihook's -c program from importing ocihook: a relative directory (the
    runtime's working directory would decide, possibly the bundle), else no directory
    holding the package."""
    named = [d.format(repo=REPO) for d in dirs]
    args = ["/usr/bin/python3", "-I", "-S", "-c", hook_program(named), "hook", "cdi"]
    assert missing_program_module(args) == missing
    assert program_dirs(args) == named
    assert missing_program_module(["/usr/bin/ocihook", "hook", "cdi"]) is None


def test_start_path_dirs_are_what_site_added(tmp_path: Path) -> None:
    """A hook started with -I -S gets the directories this interpreter's site added: the
    site-packages, and a directory a .pth file added (a venv's dependencies can come from
    one), never the standard library, the current directory or PYTHONPATH's."""
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
