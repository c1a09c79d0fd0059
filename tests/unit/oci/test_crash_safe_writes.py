"""Crash-safe writes of config.json and every other replaced file.

A writer killed between creating its temporary file and the rename leaves nothing: the
temporary is an anonymous ``O_TMPFILE`` file, and while it has a name (just before the
rename, or from the start where it had to be named) a guardian process removes it once
the writer is dead; a temporary whose guardian died too, or that had none (a container's
root, the wrapper's config.json), is removed by the next write. A
failure before the rename leaves the old file and no temporary (exit 7); a failure after
it (flushing the directory, closing) is a warning, not "cannot replace config.json". Faults are injected with ``strace -e inject`` into ``ocihook
edit`` and with a patched ``os`` function in a child process that is then SIGKILLed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import make_bundle

from ocihook.linux import atomicfile, pathsafe
from ocihook.oci.bundle import write_bytes_atomic

OLD = b'{"old": true}\n'
NEW = b'{"new": true}\n'


def _need_strace() -> None:
    if shutil.which("strace") is None:
        pytest.skip("needs strace (apt-get install strace)")


def _entries(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def _nth(tmp: Path, root: str, syscall: str, match: str, *, last: bool = False) -> int:
    """Which call (1-based) of ``syscall`` on the bundle directory (``-P``) is the first
    (or last) whose line holds ``match``, in a run of ``ocihook edit`` on a copy of the
    bundle (so that ``when=N`` hits exactly that call)."""
    bundle = make_bundle(tmp / "probe", ["NVIDIA_VISIBLE_DEVICES=0"], minimal=True, indent=None)
    trace = tmp / "probe.trace"
    r = _edit(bundle, root, ["-P", str(bundle), "-e", f"trace={syscall}"], str(trace))
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in trace.read_text().splitlines() if f"{syscall}(" in ln]
    hits = [i + 1 for i, ln in enumerate(lines) if match in ln]
    assert hits, lines
    return hits[-1] if last else hits[0]


def _edit(
    bundle: Path, root: str, strace: list[str], out: str = "/dev/null"
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *("strace", "-f", "-qq", "-o", out, *strace),
            *(sys.executable, "-m", "ocihook", "edit", "-b", str(bundle)),
            *("--driver-root", root, "--dev-root", root),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize(
    ("syscall", "when"),
    [("fsync", 1), ("linkat", 1), ("renameat", 1)],
)
def test_fault_before_rename_keeps_old_file(
    syscall: str, when: int, tmp_path: Path, sim: Any
) -> None:
    """``fsync`` of the new file, ``linkat`` naming it, ``renameat`` itself: exit 7, the
    old config.json byte for byte, no temporary."""
    _need_strace()
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], minimal=True, indent=None)
    before = (bundle / "config.json").read_bytes()
    inject = ["-e", f"trace={syscall}", "-e", f"inject={syscall}:error=EIO:when={when}"]
    if syscall != "fsync":  # config.json's, not the rootfs's ld.so.cache (made first)
        inject = ["-P", str(bundle), *inject]
    r = _edit(bundle, sim.root, inject)
    assert r.returncode == 7, r.stderr
    assert r.stderr.strip().startswith(
        "ocihook: error[apply-failed]: cannot replace config.json: Input/output error"
    ), r.stderr
    assert (bundle / "config.json").read_bytes() == before
    assert _entries(bundle) == ["config.json", "rootfs"]
    # the links, the ld.so.cache and the mount targets made in the rootfs are gone again
    assert [str(p) for p in (bundle / "rootfs").rglob("*")] == []


@pytest.mark.parametrize(
    ("syscall", "warning"),
    [
        (
            "fsync",
            "config.json was replaced, but flushing its directory failed: Input/output "
            "error; after a power loss the old file may come back",
        ),
        (
            "close",
            "config.json was replaced, but closing its directory failed: Input/output error",
        ),
    ],
)
def test_fault_after_rename_is_a_warning(
    syscall: str, warning: str, tmp_path: Path, sim: Any
) -> None:
    """The directory's ``fsync`` or its final ``close`` fails after the rename:
    config.json is the new one, exit 0, and the warning says so."""
    _need_strace()
    when = _nth(tmp_path, sim.root, syscall, "", last=True)
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], minimal=True, indent=None)
    inject = ["-P", str(bundle), "-e", f"trace={syscall}"]
    inject += ["-e", f"inject={syscall}:error=EIO:when={when}"]
    r = _edit(bundle, sim.root, inject)
    assert r.returncode == 0, r.stderr
    assert f"ocihook: warning: {bundle}/config.json: {warning}\n" in r.stderr
    assert "cannot replace" not in r.stderr
    doc = json.loads((bundle / "config.json").read_text())
    assert "NVIDIA_VISIBLE_DEVICES=void" in doc["process"]["env"] or doc.get("mounts")
    assert _entries(bundle) == ["config.json", "rootfs"]


def test_no_locks_still_writes(tmp_path: Path, sim: Any) -> None:
    """``flock`` refused (ENOLCK: NFS mounted without locks): the file is written anyway;
    the lock only helps tell a dead writer's temporary from a live one's."""
    _need_strace()
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], minimal=True, indent=None)
    r = _edit(bundle, sim.root, ["-e", "trace=flock", "-e", "inject=flock:error=ENOLCK"])
    assert r.returncode == 0, r.stderr
    assert json.loads((bundle / "config.json").read_text())["mounts"]
    assert _entries(bundle) == ["config.json", "rootfs"]


def test_no_tmpfile_falls_back_to_a_named_temporary(tmp_path: Path, sim: Any) -> None:
    """``O_TMPFILE`` refused (EOPNOTSUPP, as on NFS): the same result through a named
    temporary, which the rename consumes."""
    _need_strace()
    when = _nth(tmp_path, sim.root, "openat", "O_TMPFILE")
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], minimal=True, indent=None)
    trace = tmp_path / "trace"
    r = subprocess.run(
        [
            *("strace", "-f", "-qq", "-o", str(trace), "-P", str(bundle)),
            *("-e", "trace=openat,renameat"),
            *("-e", f"inject=openat:error=EOPNOTSUPP:when={when}"),
            *(sys.executable, "-m", "ocihook", "edit", "-b", str(bundle)),
            *("--driver-root", sim.root, "--dev-root", sim.root),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    lines = trace.read_text().splitlines()
    assert any(
        "O_TMPFILE" in ln and "EOPNOTSUPP (Operation not supported) (INJECTED)" in ln
        for ln in lines
    ), lines
    named = [ln for ln in lines if "O_CREAT|O_EXCL" in ln and ".config.json." in ln]
    assert len(named) == 1, lines
    assert _entries(bundle) == ["config.json", "rootfs"]
    assert json.loads((bundle / "config.json").read_text())["mounts"]


DRIVER = textwrap.dedent(
    """
    import os, sys, threading, time
    from ocihook.linux import atomicfile
    from ocihook.oci.bundle import write_bytes_atomic

    path, pause_at, named, ready = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4])
    guardian = sys.argv[5]
    if named:
        atomicfile._open_anonymous = lambda dir_fd: None
    if guardian == "none":  # as if it had been killed with the writer
        atomicfile.guard_name = lambda dir_fd, name: None
    elif guardian == "thread":  # a second thread: no guardian is forked
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
    real = getattr(os, pause_at)

    def pause(*args, **kwargs):
        os.write(ready, b"x")
        time.sleep(600)
        return real(*args, **kwargs)

    setattr(os, pause_at, pause)
    write_bytes_atomic(path, b'{"new": true}\\n')
    """
)


def _killed_writer(path: Path, pause_at: str, *, named: bool, guardian: str = "fork") -> None:
    """Run a writer of ``path`` in a child process, SIGKILL it when it reaches
    ``os.<pause_at>`` (after creating its temporary file, before the rename), and wait
    until its standard output reaches end-of-file: the writer's guardian (``guardian``
    ``"fork"``, the default; ``"none"``: as if killed too; ``"thread"``: the writer has
    a second thread) holds it until it has done its work."""
    r, w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(path), pause_at, str(int(named)), str(w), guardian],
        pass_fds=(w,),
        stdout=subprocess.PIPE,
    )
    os.close(w)
    try:
        assert os.read(r, 1) == b"x", "the writer never reached " + pause_at
    finally:
        os.close(r)
        child.send_signal(signal.SIGKILL)
        assert child.stdout is not None
        assert child.stdout.read() == b""  # end-of-file: the guardian is gone too
        child.wait()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize("pause_at", ["fsync", "fchmod", "link"])
def test_kill_while_writing_anonymous_leaves_nothing(pause_at: str, tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_bytes(OLD)
    _killed_writer(target, pause_at, named=False)
    assert _entries(tmp_path) == ["config.json"]
    assert target.read_bytes() == OLD


@pytest.mark.parametrize(
    ("pause_at", "named"), [("rename", True), ("fsync", True), ("rename", False)]
)
def test_kill_with_a_named_temporary_leaves_nothing(
    pause_at: str, named: bool, tmp_path: Path
) -> None:
    """A writer killed while its temporary has a name (no O_TMPFILE, or between linkat
    and rename): its guardian removes the name once the writer is dead."""
    target = tmp_path / "config.json"
    target.write_bytes(OLD)
    _killed_writer(target, pause_at, named=named)
    assert _entries(tmp_path) == ["config.json"]
    assert target.read_bytes() == OLD


@pytest.mark.parametrize(
    ("pause_at", "named", "guardian"),
    [
        ("rename", True, "none"),
        ("fsync", True, "none"),
        ("rename", False, "none"),
        ("rename", False, "thread"),
    ],
)
def test_a_temporary_left_without_guardian_is_cleaned_by_next_write(
    pause_at: str, named: bool, guardian: str, tmp_path: Path
) -> None:
    """A named temporary of a dead writer whose guardian died too (the whole cgroup
    killed) or that had none (a second thread) is removed by the next write of the same
    file."""
    target = tmp_path / "config.json"
    target.write_bytes(OLD)
    _killed_writer(target, pause_at, named=named, guardian=guardian)
    left = [e for e in _entries(tmp_path) if e != "config.json"]
    assert len(left) == 1 and atomicfile.is_temporary_of(left[0], "config.json"), left
    assert target.read_bytes() == OLD
    write_bytes_atomic(str(target), NEW)
    assert _entries(tmp_path) == ["config.json"]
    assert target.read_bytes() == NEW


GUARDED = textwrap.dedent(
    """
    import os, sys
    from ocihook.linux import atomicfile

    directory, gone = sys.argv[1], sys.argv[2] == "1"
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    guard = atomicfile.guard_name(dir_fd, "entry")
    assert guard is not None
    open(os.path.join(directory, "entry"), "w").close()
    if gone:
        os.rename(os.path.join(directory, "entry"), os.path.join(directory, "kept"))
    guard.release(gone)
    guard.release(gone)  # a second call does nothing
    print(sorted(os.listdir(directory)))
    """
)


@pytest.mark.parametrize(("gone", "left"), [(True, ["kept"]), (False, [])])
def test_release_settles_the_name(gone: bool, left: list[str], tmp_path: Path) -> None:
    """``release(gone=True)``: the writer settled the name, the guardian leaves the
    directory alone; ``release(gone=False)``: the writer could not remove it (EIO), the
    guardian does, before ``release`` returns."""
    proc = subprocess.run(
        [sys.executable, "-c", GUARDED, str(tmp_path), "1" if gone else "0"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"{left}\n"
    assert _entries(tmp_path) == left


def _dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_locked_temporary_of_another_namespace_is_kept(tmp_path: Path) -> None:
    """A temporary whose pid is not alive here but whose lock is held (a writer in
    another pid namespace) is left alone; once the lock is gone it is removed."""
    import fcntl

    target = tmp_path / "config.json"
    target.write_bytes(OLD)
    other = tmp_path / f".config.json.{_dead_pid()}.0123456789ab"
    other.write_bytes(b"half")
    fd = os.open(other, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        write_bytes_atomic(str(target), NEW)
        assert other.exists()
    finally:
        os.close(fd)
    write_bytes_atomic(str(target), NEW)
    assert _entries(tmp_path) == ["config.json"]


def test_own_and_foreign_names_are_kept(tmp_path: Path) -> None:
    """Only ``.<name>.<pid>.<12 hex>`` of the file being written, with a dead pid, is
    removed: not another file's temporary, not a live process's, not other dot files."""
    dead = _dead_pid()
    keep = [
        f".other.json.{dead}.0123456789ab",
        f".config.json.{os.getpid()}.0123456789ab",
        f".config.json.{dead}.0123456789",
        ".config.json.swp",
    ]
    for name in keep:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / f".config.json.{dead}.abcdefabcdef").write_bytes(b"x")
    write_bytes_atomic(str(tmp_path / "config.json"), NEW)
    assert _entries(tmp_path) == sorted([*keep, "config.json"])


def test_close_failing_after_rename_is_a_warning(tmp_path: Path) -> None:
    """The new file's descriptor fails to close after the rename (NFS can report that):
    a warning, the new content in place."""
    target = tmp_path / "f"
    target.write_bytes(OLD)
    real_close, real_rename, real_fchmod = os.close, os.rename, os.fchmod
    state: dict[str, Any] = {"renamed": False, "failed": False, "fd": None}

    def fchmod(fd: int, mode: int) -> None:
        state["fd"] = fd  # the new file's descriptor
        real_fchmod(fd, mode)

    def rename(*args: Any, **kwargs: Any) -> None:
        real_rename(*args, **kwargs)
        state["renamed"] = True

    def close(fd: int) -> None:
        real_close(fd)
        if state["renamed"] and fd == state["fd"] and not state["failed"]:
            state["failed"] = True
            raise OSError(5, "Input/output error")

    warnings: list[str] = []
    mp = pytest.MonkeyPatch()
    mp.setattr(os, "fchmod", fchmod)
    mp.setattr(os, "rename", rename)
    mp.setattr(os, "close", close)
    try:
        write_bytes_atomic(str(target), NEW, warnings=warnings)
    finally:
        mp.undo()
    assert state["failed"]
    assert warnings == ["f was replaced, but closing it failed: Input/output error"]
    assert target.read_bytes() == NEW
    assert _entries(tmp_path) == ["f"]


def test_write_file_in_root_cleans_stale_temporary(tmp_path: Path) -> None:
    """The container's ld.so.cache writer (pathsafe) shares the scheme."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / f".ld.so.cache.{_dead_pid()}.0123456789ab").write_bytes(b"half")
    root_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        pathsafe.write_file_in_root(root_fd, "/etc/ld.so.cache", b"cache", 0o644)
    finally:
        os.close(root_fd)
    assert _entries(etc) == ["ld.so.cache"]
    assert (etc / "ld.so.cache").read_bytes() == b"cache"


def _guardians(mp: pytest.MonkeyPatch) -> list[str]:
    """The names a guardian is forked for from now on (none is)."""
    forked: list[str] = []
    mp.setattr(atomicfile, "guard_name", lambda dir_fd, name: forked.append(name))
    return forked


def test_no_guardian_for_a_container_root_or_the_wrappers_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A container's ld.so.cache and a config.json written with durable=False fork no
    guardian for the instant before the rename (their owner discards them after a failed
    start); a durable write does, and a temporary named from the start always has one."""
    forked = _guardians(monkeypatch)
    (tmp_path / "etc").mkdir()
    root_fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        pathsafe.write_file_in_root(root_fd, "/etc/ld.so.cache", b"cache", 0o644)
    finally:
        os.close(root_fd)
    write_bytes_atomic(str(tmp_path / "config.json"), NEW, durable=False)
    assert forked == []
    assert (tmp_path / "etc" / "ld.so.cache").read_bytes() == b"cache"
    assert (tmp_path / "config.json").read_bytes() == NEW
    write_bytes_atomic(str(tmp_path / "config.json"), OLD)
    assert len(forked) == 1 and forked[0].startswith(".config.json.")
    monkeypatch.setattr(atomicfile, "_open_anonymous", lambda dir_fd: None)
    write_bytes_atomic(str(tmp_path / "config.json"), NEW, durable=False)
    assert len(forked) == 2 and forked[1].startswith(".config.json.")
    assert _entries(tmp_path) == ["config.json", "etc"]


def test_unguarded_temporary_of_a_killed_writer_goes_with_the_next_write(
    tmp_path: Path,
) -> None:
    """Killed between linkat and rename with no guardian, a writer leaves its temporary;
    the next write of the same file removes it."""
    r, w = os.pipe()
    code = textwrap.dedent(
        f"""
        import os, time
        from ocihook.linux import atomicfile
        real = os.rename
        def pause(*a, **k):
            os.write({w}, b"x")
            time.sleep(600)
        os.rename = pause
        d = os.open({str(tmp_path)!r}, os.O_RDONLY | os.O_DIRECTORY)
        atomicfile.replace_at(d, "ld.so.cache", b"new", 0o644, durable=False, guard=False)
        """
    )
    (tmp_path / "ld.so.cache").write_bytes(b"old")
    child = subprocess.Popen([sys.executable, "-c", code], pass_fds=(w,))
    os.close(w)
    try:
        assert os.read(r, 1) == b"x"
        child.send_signal(signal.SIGKILL)
        child.wait()
    finally:
        os.close(r)
    left = [n for n in _entries(tmp_path) if n != "ld.so.cache"]
    assert len(left) == 1 and left[0].startswith(".ld.so.cache."), left
    assert (tmp_path / "ld.so.cache").read_bytes() == b"old"
    d = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        atomicfile.replace_at(d, "ld.so.cache", b"newer", 0o644, durable=False, guard=False)
    finally:
        os.close(d)
    assert _entries(tmp_path) == ["ld.so.cache"]
    assert (tmp_path / "ld.so.cache").read_bytes() == b"newer"


_NAMES = st.text(
    alphabet=st.characters(blacklist_characters="/\0", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=40,
).filter(lambda n: n not in (".", ".."))


@given(name=_NAMES)
def test_temporary_names_round_trip(name: str) -> None:
    tmp = atomicfile.temporary_name(name)
    assert atomicfile.is_temporary_of(tmp, name) == os.getpid()
    assert tmp.startswith("." + name + ".") and "/" not in tmp


@given(name=_NAMES, entry=st.text(max_size=80))
def test_only_temporary_names_match(name: str, entry: str) -> None:
    """Whatever a directory holds, only ``.<name>.<decimal pid>.<12 hex>`` is taken for a
    temporary of ``name``."""
    pid = atomicfile.is_temporary_of(entry, name)
    if pid is not None:
        rest = entry[len(name) + 2 :]
        digits, _, mark = rest.partition(".")
        assert entry.startswith(f".{name}.") and int(digits) == pid
        assert len(mark) == 12 and set(mark) <= set("0123456789abcdef")
