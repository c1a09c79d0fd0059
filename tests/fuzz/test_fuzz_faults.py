"""The fuzz campaign, fault part: ``strace --inject`` into the write paths of ``ocihook
edit`` (config.json), ``ocihook cdi generate --output`` (a CDI spec) and ``ocihook
runtime configure`` (an engine's configuration file).

For each command a clean run under strace finds its write path: every traced call from the
last ``openat`` of the file's directory on (the directory descriptor, the temporary file,
its write, fchmod, fsync, close, the rename, the directory's close). Then the command is
run again once per call of that window with an error injected into exactly that call
(``-e inject=SYSCALL:error=E:when=N``; strace counts calls per syscall and per process),
and once per call with SIGKILL delivered there (``signal=KILL``).

Asserted after every fault: the file holds exactly the old or exactly the new bytes;
stderr has no traceback; an error exit is a documented status; after an injected error
(the process lives on to clean up) no temporary file is left; exit 0 means the new file is
in place; after a kill, too, no temporary file is left (the writer's guardian removes a
named one, :mod:`ocihook.linux.atomicfile`); an error writing a message to stderr is no
traceback and changes no exit status (:func:`ocihook.core.stdio.tolerant_stderr`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import FUZZ_COUNTS, WRAPPER

from ocihook.core.errors import EXIT_CODES
from ocihook.sim import host as simhost
from ocihook.sim.demo import default_config

STRACE = shutil.which("strace")
pytestmark = pytest.mark.skipif(STRACE is None, reason="needs strace (apt-get install strace)")

#: The calls of a write path, and the error injected into each.
ERRORS = {
    "openat": "EMFILE",
    "write": "ENOSPC",
    "fchmod": "EPERM",
    "fchown": "EPERM",
    "fsync": "EIO",
    "close": "EIO",
    "rename": "EIO",
    "renameat": "EIO",
    "renameat2": "EIO",
    "linkat": "EIO",
    "unlinkat": "EIO",
}
DOCUMENTED = {0, 2, 9, *EXIT_CODES.values()}
_LINE = re.compile(r"^(\w+)\((.*)\)\s+= (-?\d+|\?)")


class Case:
    """One command writing one file: ``setup(tmp)`` makes its inputs and returns the
    argv, the file written and the file's old bytes."""

    def __init__(self, name: str, setup: Callable[[Path], tuple[list[str], Path, bytes]]) -> None:
        self.name = name
        self.setup = setup


def _edit(sim: simhost.SimulatedHost) -> Case:
    def setup(tmp: Path) -> tuple[list[str], Path, bytes]:
        bundle = tmp / "bundle"
        (bundle / "rootfs").mkdir(parents=True)
        old = (
            __import__("json")
            .dumps(default_config(["sh"], ["NVIDIA_VISIBLE_DEVICES=0"]), indent=1)
            .encode()
        )
        (bundle / "config.json").write_bytes(old)
        roots = ["--driver-root", sim.root, "--dev-root", sim.root]
        return (
            [sys.executable, "-m", "ocihook", "edit", "-b", str(bundle), *roots],
            bundle / "config.json",
            old,
        )

    return Case("edit", setup)


def _cdi_generate(sim: simhost.SimulatedHost) -> Case:
    def setup(tmp: Path) -> tuple[list[str], Path, bytes]:
        out = tmp / "cdi" / "nvidia.yaml"
        out.parent.mkdir(parents=True)
        old = b"cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n"
        out.write_bytes(old)
        roots = ["--driver-root", sim.root, "--dev-root", sim.root]
        argv = [sys.executable, "-m", "ocihook", "cdi", "generate", *roots, "--output", str(out)]
        return argv, out, old

    return Case("cdi_generate", setup)


def _configure() -> Case:
    def setup(tmp: Path) -> tuple[list[str], Path, bytes]:
        path = tmp / "docker" / "daemon.json"
        path.parent.mkdir(parents=True)
        old = b'{\n    "log-level": "warn"\n}\n'
        path.write_bytes(old)
        argv = [
            sys.executable,
            "-m",
            "ocihook",
            "runtime",
            "configure",
            "--runtime",
            "docker",
            "--config",
            str(path),
            "--runtime-path",
            WRAPPER,
        ]
        return argv, path, old

    return Case("runtime_configure", setup)


def _strace(
    argv: list[str], log: Path, inject: str | None = None
) -> subprocess.CompletedProcess[bytes]:
    cmd = [STRACE or "strace", "-qq", "-o", str(log), "-e", "trace=" + ",".join(ERRORS)]
    if inject:
        cmd += ["-e", "inject=" + inject]
    env = {**os.environ, "OCIHOOK_CONFIG": str(log.parent / "empty.toml")}
    return subprocess.run([*cmd, "--", *argv], capture_output=True, timeout=120, env=env)


def _window(log: Path, directory: Path) -> list[tuple[str, int, str]]:
    """The write path's calls: (syscall, its number among that syscall's calls, line)."""
    calls: list[tuple[str, int, str]] = []
    seen: dict[str, int] = {}
    start = None
    for line in log.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        name = m.group(1)
        seen[name] = seen.get(name, 0) + 1
        if name == "openat" and f'"{directory}"' in line and "O_DIRECTORY" in line:
            start = len(calls)
        calls.append((name, seen[name], line))
    assert start is not None, f"no openat of {directory} in the trace"
    return calls[start:]


class Outcome:
    """What one faulted run left: the fault, exit status, stderr, the file's state
    ("old", "new" or "other"), the temporaries left."""

    def __init__(self, fault: str, rc: int, err: str, state: str, left: list[str]) -> None:
        self.fault, self.rc, self.err, self.state, self.left = fault, rc, err, state, left

    def __repr__(self) -> str:
        return f"<{self.fault}: exit {self.rc}, file {self.state}, left {self.left}>"


def _campaign(case: Case, tmp: Path) -> tuple[list[Outcome], int]:
    """Run ``case`` clean, then once per write-path call with an error and once with a
    kill. Returns the outcomes and the length of the window."""
    clean = tmp / "clean"
    clean.mkdir()
    (clean / "empty.toml").write_bytes(b"")
    argv, path, old = case.setup(clean)
    proc = _strace(argv, clean / "trace")
    assert proc.returncode == 0, proc.stderr.decode()
    new = path.read_bytes()
    assert new != old
    window = _window(clean / "trace", path.parent)
    outcomes = []
    for i, (name, number, line) in enumerate(window):
        for kind, inject in (
            ("error", f"{name}:error={ERRORS[name]}:when={number}"),
            ("kill", f"{name}:signal=KILL:when={number}"),
        ):
            run = tmp / f"{kind}-{i}"
            run.mkdir()
            (run / "empty.toml").write_bytes(b"")
            argv, path, old = case.setup(run)
            before = set(os.listdir(path.parent))
            proc = _strace(argv, run / "trace", inject)
            data = path.read_bytes() if path.exists() else None
            state = "old" if data == old else "new" if data == new else "other"
            left = sorted(set(os.listdir(path.parent)) - before)
            rc = -9 if kind == "kill" and proc.returncode in (137, -9) else proc.returncode
            fault = f"{kind} at {line.split('(', 1)[0]} #{number}: {line[:90]}"
            outcomes.append(Outcome(fault, rc, proc.stderr.decode(errors="replace"), state, left))
            temp = ", temporary left" if left else ""
            for key in (
                f"faults {case.name} {kind}",
                f"faults {case.name} {kind}: exit {rc}, {state} file{temp}",
            ):
                FUZZ_COUNTS[key] = FUZZ_COUNTS.get(key, 0) + 1
    return outcomes, len(window)


CASES = ["edit", "cdi_generate", "runtime_configure"]


@pytest.fixture(scope="module")
def campaigns(
    sim: simhost.SimulatedHost, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Any]:
    """Each case's outcomes, run once for the module (lazily, per case)."""
    cases = {
        "edit": _edit(sim),
        "cdi_generate": _cdi_generate(sim),
        "runtime_configure": _configure(),
    }
    done: dict[str, list[Outcome]] = {}

    def get(name: str) -> list[Outcome]:
        if name not in done:
            done[name], _ = _campaign(cases[name], tmp_path_factory.mktemp(name))
        return done[name]

    return {"get": get}


def _on_stderr(o: Outcome) -> bool:
    return ": write(2, " in o.fault


@pytest.mark.parametrize("case", CASES)
def test_faults_leave_the_old_or_the_new_file(campaigns: dict[str, Any], case: str) -> None:
    # a failing write of a message to stderr: test_a_failing_stderr_is_no_traceback
    outcomes = [o for o in campaigns["get"](case) if not _on_stderr(o)]
    assert len(outcomes) >= 10  # the window holds at least open, write, fsync, rename
    bad = [o for o in outcomes if o.state == "other"]
    assert not bad, bad
    assert not [o for o in outcomes if "Traceback" in o.err], "a traceback"
    assert not [o for o in outcomes if o.rc not in DOCUMENTED and o.rc != -9], [
        (o.fault, o.rc) for o in outcomes
    ]
    assert all(o.state == "new" for o in outcomes if o.rc == 0)
    # an error the process survives is cleaned up after
    assert not [o for o in outcomes if o.fault.startswith("error") and o.left], [
        o for o in outcomes if o.left
    ]
    # faults before the rename that fail the command keep the old file
    assert any(o.state == "old" and o.rc not in (0, -9) for o in outcomes)


@pytest.mark.parametrize("case", CASES)
def test_kills_leave_no_temporary(campaigns: dict[str, Any], case: str) -> None:
    """A kill at any call of the write path, between ``linkat`` and ``rename`` included,
    leaves no temporary file: the writer's guardian removes a named one once the writer
    is dead, and holds the writer's stderr until then (so the run's end is after it)."""
    outcomes = campaigns["get"](case)
    kills = [o for o in outcomes if o.fault.startswith("kill")]
    # the campaign reaches the instant in question: killed at the rename, the temporary
    # linked under its name and the old file still in place
    assert [o for o in kills if o.fault.startswith("kill at rename") and o.state == "old"]
    left = [o for o in outcomes if o.fault.startswith("kill") and o.left]
    assert not left, left


@pytest.mark.parametrize("case", CASES)
def test_a_reported_failure_means_the_old_file(campaigns: dict[str, Any], case: str) -> None:
    outcomes = campaigns["get"](case)
    lying = [o for o in outcomes if o.rc not in (0, -9) and o.state == "new"]
    assert not lying, lying


@pytest.mark.parametrize(
    ("case", "says"), [("edit", True), ("cdi_generate", False), ("runtime_configure", True)]
)
def test_a_failing_stderr_is_no_traceback(campaigns: dict[str, Any], case: str, says: bool) -> None:
    """An error writing a message (a full disk under the log, a closed pipe) is no crash:
    the file is whole and the exit status a documented one — after the file was replaced
    (the closing ``...; written`` line), the success status 0 (``ocihook._main.
    tolerant_stderr``). ``says``: whether the command writes to stderr in its write path
    (``cdi generate --output`` says nothing)."""
    on_stderr = [o for o in campaigns["get"](case) if _on_stderr(o)]
    assert bool(on_stderr) == says, on_stderr
    crashed = [o for o in on_stderr if "Traceback" in o.err or o.rc not in {*DOCUMENTED, -9}]
    assert not crashed, crashed
    assert all(o.state in ("old", "new") for o in on_stderr)
    assert all(o.rc == 0 for o in on_stderr if o.fault.startswith("error") and o.state == "new")


#: The calls of spec mode's work in the rootfs (mount targets, links, ld.so.cache), and
#: the error injected into each.
ROOTFS_ERRORS = {
    "openat": "EMFILE",
    "close": "EIO",
    "mkdirat": "ENOSPC",
    "symlinkat": "ENOSPC",
    "unlinkat": "EIO",
    "renameat2": "EIO",
    "write": "ENOSPC",
}


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _rootfs_window(trace: Path, rootfs: Path, bundle: Path) -> list[tuple[str, int, str]]:
    """The calls of the edit's work in the rootfs: from the rootfs's ``openat`` to the
    bundle directory's, keeping only those on the bundle's paths and on descriptors they
    opened (the interpreter's late imports and the loader's opens are not the edit's)."""
    calls: list[tuple[str, int, str]] = []
    seen: dict[str, int] = {}
    start = end = None
    for line in trace.read_text(errors="replace").splitlines():
        m = _LINE.match(line)
        if m is None:
            continue
        name = m.group(1)
        seen[name] = seen.get(name, 0) + 1
        if start is None and name == "openat" and f'"{rootfs}"' in line:
            start = len(calls)
        if start is not None and end is None and name == "openat" and f'"{bundle}"' in line:
            end = len(calls)
        calls.append((name, seen[name], line))
    assert start is not None and end is not None, (start, end)
    window = []
    ours: set[str] = set()
    for name, number, line in calls[start:end]:
        m = _LINE.match(line)
        assert m is not None
        args, ret = m.group(2), m.group(3)
        fd = args.split(",", 1)[0]
        if name == "openat":
            if fd == "AT_FDCWD" and str(bundle) not in args:
                continue
            ours.add(ret)
        elif name in ("close", "write"):
            if fd not in ours:
                continue
            if name == "close":
                ours.discard(fd)
        window.append((name, number, line))
    return window


def test_faults_in_the_rootfs_leave_it_as_it_was(
    sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    """``ocihook edit`` makes mount targets, links and ``ld.so.cache`` in the rootfs before
    it writes config.json. An error injected into each call of that work (an ``EIO`` from
    ``close`` included) ends in one of three ways: exit 0 with config.json written; a
    documented error with config.json and the rootfs as they were; or a documented error
    whose message names what it left. Never a traceback."""
    case = _edit(sim)
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "empty.toml").write_bytes(b"")
    argv, path, old = case.setup(clean)
    trace = ["-e", "trace=" + ",".join(ROOTFS_ERRORS)]
    env = {**os.environ, "OCIHOOK_CONFIG": str(clean / "empty.toml")}
    strace = [STRACE or "strace", "-qq", *trace]
    proc = subprocess.run(
        [*strace, "-o", str(clean / "trace"), "--", *argv],
        capture_output=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    window = _rootfs_window(clean / "trace", path.parent / "rootfs", path.parent)
    assert len(window) >= 10, window
    outcomes: list[tuple[str, int, str, bool]] = []
    for i, (name, number, line) in enumerate(window):
        run = tmp_path / f"run-{i}"
        run.mkdir()
        (run / "empty.toml").write_bytes(b"")
        argv, path, old = case.setup(run)
        before = _listing(path.parent / "rootfs")
        inject = f"{name}:error={ROOTFS_ERRORS[name]}:when={number}"
        proc = subprocess.run(
            [*strace, "-o", str(run / "trace"), "-e", "inject=" + inject, "--", *argv],
            capture_output=True,
            timeout=120,
            env={**env, "OCIHOOK_CONFIG": str(run / "empty.toml")},
        )
        err = proc.stderr.decode(errors="replace")
        unchanged = path.read_bytes() == old and _listing(path.parent / "rootfs") == before
        outcomes.append((f"{inject}: {line[:80]}", proc.returncode, err, unchanged))
        key = f"faults rootfs: exit {proc.returncode}" + (", as it was" if unchanged else "")
        FUZZ_COUNTS[key] = FUZZ_COUNTS.get(key, 0) + 1
    crashed = [
        (f, rc, e[-400:]) for f, rc, e, _ in outcomes if "Traceback" in e or rc not in DOCUMENTED
    ]
    assert not crashed, crashed
    # a failure: the old state, or one line naming what was left
    dirty = [
        (f, rc, e[-400:])
        for f, rc, e, unchanged in outcomes
        if rc != 0 and not unchanged and "left in the rootfs" not in e
    ]
    assert not dirty, dirty
    assert any(rc != 0 for _, rc, _, _ in outcomes)  # the faults reached the work
