"""scripts/setup, scripts/demo and scripts/apt-wait: the demo installs only ocihook (no test
or lint tools), pip runs again only when pyproject.toml changed, and a held apt/dpkg lock
is waited for (bounded, saying so) or explained.

The install tests run the real scripts in a copy of the repository whose ``.venv/bin``
holds stand-ins for ``python`` and ``ocihook`` that log their arguments, with an
``apt-get`` stand-in first on ``PATH``: nothing is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO

#: The holder's /proc/PID/comm: the name this interpreter was started by, cut to 15.
COMM = os.path.basename(sys.executable)[:15]
LOGGER = '#!/bin/sh\necho "$(basename "$0") $*" >>"$STAND_IN_LOG"\n'


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A copy of the scripts and pyproject.toml with logging stand-ins in .venv/bin."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for name in ("setup", "demo", "apt-wait"):
        shutil.copy2(os.path.join(REPO, "scripts", name), repo / "scripts" / name)
    shutil.copy2(os.path.join(REPO, "pyproject.toml"), repo / "pyproject.toml")
    for where, name in ((".venv/bin", "python"), (".venv/bin", "ocihook"), ("fakebin", "apt-get")):
        path = repo / where / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(LOGGER)
        path.chmod(0o755)
    return repo


def run(repo: Path, *argv: str) -> list[str]:
    """Run a script in ``repo``; the stand-ins' log lines it added."""
    log = repo / "log"
    before = log.read_text().splitlines() if log.exists() else []
    env = {
        **os.environ,
        "PATH": f"{repo / 'fakebin'}:{os.environ['PATH']}",
        "PYTHON": sys.executable,
        "STAND_IN_LOG": str(log),
        "APT_LOCK_WAIT": "5",
    }
    proc = subprocess.run(
        [str(repo / "scripts" / argv[0]), *argv[1:]],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return log.read_text().splitlines()[len(before) :] if log.exists() else []


def pip_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("python -m pip ")]


def test_demo_installs_ocihook_only_and_once(checkout: Path) -> None:
    first = run(checkout, "demo", "--mode", "hook")
    assert pip_lines(first) == ["python -m pip install -q --disable-pip-version-check -e ."]
    assert first[-1] == "ocihook demo --mode hook"
    for line in first:  # as root, Debian packages only for the demo (when missing)
        if line.startswith("apt-get ") and " install " in line:
            asked = set(line.split(" -qq ", 1)[1].split())
            assert asked <= {"runc", "busybox-static", "python3-venv"}, line
    stamp = (checkout / ".venv/.ocihook-setup-stamp").read_text()
    digest = subprocess.run(
        ["sha256sum", str(checkout / "pyproject.toml")], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    assert stamp == f"{digest} \n"
    # nothing changed: no pip
    second = run(checkout, "demo")
    assert pip_lines(second) == [] and second[-1] == "ocihook demo"


def test_a_changed_pyproject_reinstalls(checkout: Path) -> None:
    run(checkout, "demo")
    with open(checkout / "pyproject.toml", "a") as f:
        f.write("# a new line\n")
    again = run(checkout, "demo")
    assert pip_lines(again) == ["python -m pip install -q --disable-pip-version-check -e ."]
    assert pip_lines(run(checkout, "demo")) == []


def test_development_setup_serves_the_demo(checkout: Path) -> None:
    """The development install (test and lint extras) is a superset: the demo after it
    runs no pip; a demo install does not serve scripts/setup."""
    run(checkout, "demo")
    dev = run(checkout, "setup")
    assert pip_lines(dev) == [
        "python -m pip install -q --disable-pip-version-check -e .[test,lint,k8s,docs]"
    ]
    assert pip_lines(run(checkout, "setup")) == []
    assert pip_lines(run(checkout, "demo")) == []


def test_a_failed_pip_leaves_no_stamp(checkout: Path) -> None:
    python = checkout / ".venv/bin/python"
    python.write_text(LOGGER + 'case "$*" in *pip*) exit 1;; esac\n')
    proc = subprocess.run(
        [str(checkout / "scripts/setup"), "--demo"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHON": sys.executable, "STAND_IN_LOG": str(checkout / "log"),
             "PATH": f"{checkout / 'fakebin'}:{os.environ['PATH']}"},
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    assert not (checkout / ".venv/.ocihook-setup-stamp").exists()


# --- apt-wait -------------------------------------------------------------------------------


@pytest.fixture
def held(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    """A lock file and a process holding an fcntl lock on it (as apt and dpkg lock) until
    it is sent a line or 30 s pass."""
    lock = tmp_path / "lock-frontend"
    lock.touch()
    code = (
        "import fcntl, os, sys, select\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR)\n"
        "fcntl.lockf(fd, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "select.select([sys.stdin], [], [], 30)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
    yield lock, holder
    holder.kill()
    holder.wait()


def apt_wait(*files: str, wait: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [os.path.join(REPO, "scripts", "apt-wait"), *files],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "APT_LOCK_WAIT": str(wait)},
    )


def test_apt_wait_free(tmp_path: Path) -> None:
    (tmp_path / "lock").touch()
    proc = apt_wait(str(tmp_path / "lock"), str(tmp_path / "missing"), wait=5)
    assert proc.communicate(timeout=30) == (None, "") and proc.returncode == 0


def test_apt_wait_gives_up_and_explains(held: tuple[Path, subprocess.Popen[str]]) -> None:
    lock, holder = held
    proc = apt_wait(str(lock), wait=1)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 3
    what = f"{lock} is held by process {holder.pid} ({COMM})"
    assert err.splitlines() == [
        f"apt-wait: {what}; waiting up to 1s for it to finish",
        f"apt-wait: {what}, still after 1s: another package manager (apt, dpkg, "
        "unattended-upgrades) is at work; let it finish, then run this again "
        "(APT_LOCK_WAIT=SECONDS waits longer)",
    ]


def test_apt_wait_waits_for_the_holder(held: tuple[Path, subprocess.Popen[str]]) -> None:
    lock, holder = held
    proc = apt_wait(str(lock), wait=60)
    assert proc.stderr is not None
    first = proc.stderr.readline()
    assert (
        first
        == f"apt-wait: {lock} is held by process {holder.pid} ({COMM}); waiting up to 60s for it to finish\n"
    )
    assert proc.poll() is None  # still waiting
    assert holder.stdin is not None
    holder.stdin.write("release\n")
    holder.stdin.flush()
    holder.wait(timeout=30)
    rest = proc.stderr.read()
    assert proc.wait(timeout=30) == 0
    assert rest.startswith("apt-wait: the lock is free after ") and rest.endswith("s\n")


def test_apt_wait_on_dpkgs_own_lock() -> None:
    """The real /var/lib/dpkg/lock-frontend held with flock(1) for 2 s (a flock lock does
    not stop apt or dpkg, which take fcntl locks, so nobody's apt-get is disturbed):
    apt-wait with its default lock files names it and waits it out."""
    lock = "/var/lib/dpkg/lock-frontend"
    if os.geteuid() != 0 or not os.path.exists(lock) or shutil.which("flock") is None:
        pytest.skip(f"needs root, {lock} and flock(1)")
    holder = subprocess.Popen(
        ["flock", "-n", "-o", lock, "-c", "echo locked; sleep 2"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        if holder.stdout.readline() != "locked\n":
            pytest.skip(f"{lock} is flock-ed by another process now")
        proc = apt_wait(wait=30)
        _, err = proc.communicate(timeout=60)
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, err
    lines = err.splitlines()
    assert lines[0].startswith(f"apt-wait: {lock} is held by process "), err
    assert lines[0].endswith("; waiting up to 30s for it to finish")
    assert lines[-1].startswith("apt-wait: the lock is free after ")


def test_setup_waits_for_the_lock_before_apt_get(checkout: Path) -> None:
    """scripts/setup --demo with runc missing (a PATH without it) and dpkg's lock held
    (flock(1), 2 s): it says it waits, then runs apt-get (a stand-in) for runc."""
    lock = "/var/lib/dpkg/lock-frontend"
    if os.geteuid() != 0 or not os.path.exists(lock) or shutil.which("flock") is None:
        pytest.skip(f"needs root, {lock} and flock(1)")
    fakebin = checkout / "fakebin"
    tools = "id ldd grep sed sha256sum cut rm stat awk cat sleep dirname basename tr uname"
    for tool in tools.split():
        found = shutil.which(tool)
        assert found is not None, tool
        (fakebin / tool).symlink_to(found)
    holder = subprocess.Popen(
        ["flock", "-n", "-o", lock, "-c", "echo locked; sleep 2"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        if holder.stdout.readline() != "locked\n":
            pytest.skip(f"{lock} is flock-ed by another process now")
        proc = subprocess.run(
            [str(checkout / "scripts/setup"), "--demo"],
            capture_output=True,
            text=True,
            env={"PATH": str(fakebin), "PYTHON": sys.executable, "APT_LOCK_WAIT": "30",
                 "STAND_IN_LOG": str(checkout / "log")},
            timeout=120,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("setup: installing Debian packages: runc"), proc.stdout
    err = proc.stderr.splitlines()
    assert err[0].startswith(f"apt-wait: {lock} is held by process ") and "(flock)" in err[0]
    assert err[0].endswith("; waiting up to 30s for it to finish")
    assert err[1].startswith("apt-wait: the lock is free after ")
    apt = [
        line for line in (checkout / "log").read_text().splitlines() if line.startswith("apt-get")
    ]
    assert apt[0] == "apt-get -o DPkg::Lock::Timeout=30 update -qq"
    assert apt[1].startswith("apt-get -o DPkg::Lock::Timeout=30 install -y -qq ")
    assert "runc" in apt[1].split() and "crun" not in apt[1].split()


# --- scripts/test: CI fails when the realistic host cannot be built -------------------------


@pytest.mark.parametrize(("ci", "code"), [("true", 1), ("", 0)])
def test_scripts_test_fails_in_ci_without_the_realistic_host(
    tmp_path: Path, ci: str, code: int
) -> None:
    """``scripts/test`` with a realistic-host build that fails: under ``CI=true`` it stops
    with exit 1 before the tests (they would skip silently); elsewhere it says so and goes
    on to lint and pytest."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy2(os.path.join(REPO, "scripts", "test"), repo / "scripts" / "test")
    log = tmp_path / "log"
    stand_ins = {
        "scripts/setup": LOGGER,
        # the build of the realistic host fails; any other python call (pytest) succeeds
        ".venv/bin/python": LOGGER + 'case "$1" in fixtures/*) exit 1;; esac\n',
        ".venv/bin/ruff": LOGGER,
        ".venv/bin/mypy": LOGGER,
        ".venv/bin/mkdocs": LOGGER,
    }
    for where, text in stand_ins.items():
        path = repo / where
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755)
    env = {**os.environ, "STAND_IN_LOG": str(log), "CI": ci}
    proc = subprocess.run(
        [str(repo / "scripts" / "test"), "-q"], capture_output=True, text=True, env=env
    )
    assert proc.returncode == code, proc.stderr
    calls = log.read_text().splitlines()
    assert calls[:2] == ["setup ", "python fixtures/realistic/build.py"]
    if code:
        assert "could not be built (CI=true): failing" in proc.stderr
        assert len(calls) == 2  # neither lint nor pytest ran
    else:
        assert "its tests will skip" in proc.stderr
        assert calls[-1] == "python -m pytest -q"
