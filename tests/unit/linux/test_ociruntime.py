"""The OCI runtime's version (``runc --version``), cached by the binary's identity, and the
warning for a runc older than 1.1.14 (CVE-2024-45310)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.linux.ociruntime import (
    RUNC_SAFE_MOUNT_TARGETS,
    mount_race_warning,
    parse_version_output,
    runtime_version,
)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("runc version 1.1.5+ds1\ncommit: x\n", ("runc", "1.1.5+ds1", (1, 1, 5))),
        ("runc version 1.2.0-rc.3\n", ("runc", "1.2.0-rc.3", (1, 2, 0))),
        ("crun version 1.8.1\ncommit: f8a0\n", ("crun", "1.8.1", (1, 8, 1))),
        ("youki version 0.3\n", ("youki", "0.3", (0, 3, 0))),
        ("runc version 1\n", None),
        ("runc 1.1.5\n", None),
        ("", None),
        ("runc version v1.1.5\n", None),
        ("runc version 1.1.99999999999\n", ("runc", "1.1.99999999999", (1, 1, 0))),
    ],
)
def test_parse(text: str, want: object) -> None:
    assert parse_version_output(text) == want


@given(
    name=st.sampled_from(["runc", "crun", "youki"]),
    parts=st.tuples(*(st.integers(0, 10**6),) * 3),
    suffix=st.sampled_from(["", "+ds1", "-rc.1", "~git"]),
)
def test_parse_round_trip(name: str, parts: tuple[int, int, int], suffix: str) -> None:
    shown = ".".join(map(str, parts)) + suffix
    assert parse_version_output(f"{name} version {shown}\nspec: 1.0.2\n") == (name, shown, parts)


@given(st.text(max_size=80))
def test_parse_never_raises(text: str) -> None:
    found = parse_version_output(text)
    assert found is None or len(found[2]) == 3


@pytest.mark.skipif(shutil.which("runc") is None, reason="runc is not installed")
def test_real_runc_matches_its_output(tmp_path: Path) -> None:
    """The oracle: the installed runc's own first line."""
    runc = shutil.which("runc")
    assert runc is not None
    first = subprocess.run([runc, "--version"], capture_output=True, text=True).stdout
    found = runtime_version(runc, cache_dir=str(tmp_path / "none"))
    assert found is not None
    assert f"{found[0]} version {found[1]}" == first.splitlines()[0]
    warning = mount_race_warning(runc, cache_dir=str(tmp_path / "none"))
    assert (warning is not None) == (found[2] < RUNC_SAFE_MOUNT_TARGETS)


def _fake(tmp_path: Path, line: str) -> tuple[str, Path]:
    count = tmp_path / "count"
    path = tmp_path / "runc"
    path.write_text(
        f"#!{sys.executable} -I\nopen({str(count)!r}, 'a').write('x')\nprint({line!r})\n"
    )
    path.chmod(0o755)
    return str(path), count


def test_cached_by_identity(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    path, count = _fake(tmp_path, "runc version 1.1.12")
    want = ("runc", "1.1.12", (1, 1, 12))
    assert runtime_version(path, cache_dir=str(cache)) == want
    assert runtime_version(path, cache_dir=str(cache)) == want
    assert count.read_text() == "x"  # the second answer came from the cache
    # a new binary at the same path: asked again
    path, count = _fake(tmp_path, "runc version 1.1.14")
    os.utime(path, ns=(1, 1))
    assert runtime_version(path, cache_dir=str(cache)) == ("runc", "1.1.14", (1, 1, 14))
    assert count.read_text() == "xx"
    assert mount_race_warning(path, cache_dir=str(cache)) is None


def test_failing_or_silent_runtime_claims_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runc"
    path.write_text("#!/bin/sh\necho 'runc version 1.0.0'\nexit 1\n")
    path.chmod(0o755)
    assert runtime_version(str(path), cache_dir=str(tmp_path)) is None
    assert mount_race_warning(str(path), cache_dir=str(tmp_path)) is None
    assert runtime_version(str(tmp_path / "absent"), cache_dir=str(tmp_path)) is None
    (tmp_path / "noexec").write_text("")
    assert runtime_version(str(tmp_path / "noexec"), cache_dir=str(tmp_path)) is None


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_a_hung_runtime_is_killed_after_the_timeout(tmp_path: Path) -> None:
    """A runtime stuck on --version costs the timeout, not a container start's worth."""
    import time

    from ocihook.linux.ociruntime import _run_version

    hung = _script(tmp_path, "hung", "sleep 30\n")
    start = time.monotonic()
    assert _run_version(hung, 0.5) is None
    assert time.monotonic() - start < 3


def test_a_child_left_holding_the_pipe_does_not_keep_us(tmp_path: Path) -> None:
    import time

    from ocihook.linux.ociruntime import _run_version

    path = _script(tmp_path, "bg", "sleep 30 &\necho runc version 1.1.5\n")
    start = time.monotonic()
    assert _run_version(path, 5.0) == "runc version 1.1.5\n"
    assert time.monotonic() - start < 3


@pytest.mark.parametrize(
    ("shown", "racy"),
    [
        ("1.1.13", True),
        ("1.1.14", False),
        ("1.2.0-rc.1", True),
        ("1.2.0-rc.2", True),
        ("1.2.0-rc2", True),
        ("1.2.0-rc.3", False),
        ("1.2.0", False),
        ("1.2.1-rc.1", False),
    ],
)
def test_release_candidates_of_1_2_0(tmp_path: Path, shown: str, racy: bool) -> None:
    """The fix came in 1.1.14 and 1.2.0-rc.3: 1.2.0-rc.1 and rc.2 are warned about."""
    path = _script(tmp_path, "runc", f"echo runc version {shown}\n")
    assert (mount_race_warning(path, cache_dir=str(tmp_path / "none")) is not None) == racy


def test_the_wrapper_on_path_is_seen_through(tmp_path: Path) -> None:
    """ocihook-runtime --version prints its own version, then the real runtime's: the
    real one is what counts."""
    path = _script(
        tmp_path, "runc", "echo ocihook-runtime version 0.1.0\necho\necho runc version 1.1.5\n"
    )
    assert runtime_version(path, cache_dir=str(tmp_path / "none")) == ("runc", "1.1.5", (1, 1, 5))


def test_ignored_sigchld_claims_nothing(tmp_path: Path) -> None:
    """With SIGCHLD ignored the kernel reaps the child at once: no version, no crash."""
    code = (
        "import signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN)\n"
        "from ocihook.linux.ociruntime import mount_race_warning\n"
        f"print(mount_race_warning({_script(tmp_path, 'runc', 'echo runc version 1.1.5')!r}, "
        f"cache_dir={str(tmp_path / 'none')!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("None",) or "CVE-2024-45310" in out.stdout


def test_a_runtime_that_does_not_say_is_asked_once(tmp_path: Path) -> None:
    """A runtime whose output names no version (runsc, a wrapper): "unknown" is kept too,
    so the binary is not run on every container start (it cost ~12 ms each)."""
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    path, count = _fake(tmp_path, "runsc release-20240513.0")
    assert runtime_version(path, cache_dir=str(cache)) is None
    assert runtime_version(path, cache_dir=str(cache)) is None
    assert mount_race_warning(path, cache_dir=str(cache)) is None
    assert count.read_text() == "x"
    path, count = _fake(tmp_path, "runc version 1.1.5")  # replaced: asked again
    os.utime(path, ns=(2, 2))
    assert runtime_version(path, cache_dir=str(cache)) == ("runc", "1.1.5", (1, 1, 5))
    assert count.read_text() == "xx"


def test_a_runtime_killed_at_the_timeout_is_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A binary that hung this time (a loaded machine, a lock it waited on) leaves no
    "unknown" behind: the next start asks it again, and then its answer is kept."""
    from ocihook.linux import ociruntime

    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    count = tmp_path / "count"
    path = _script(
        tmp_path,
        "runc",
        f"echo x >> {count}\n[ $(wc -l < {count}) -gt 1 ] || sleep 30\necho runc version 1.1.15\n",
    )
    monkeypatch.setattr(ociruntime, "VERSION_TIMEOUT", 0.3)
    monkeypatch.setattr(ociruntime._ask_version, "__defaults__", (0.3,))
    assert runtime_version(path, cache_dir=str(cache)) is None
    want = ("runc", "1.1.15", (1, 1, 15))
    assert runtime_version(path, cache_dir=str(cache)) == want
    assert runtime_version(path, cache_dir=str(cache)) == want
    assert count.read_text().count("x") == 2
    # one that could not be started (no such interpreter) is not remembered either
    broken = tmp_path / "crun"
    broken.write_text("#!/nonexistent/sh\n")
    broken.chmod(0o755)
    assert runtime_version(str(broken), cache_dir=str(cache)) is None
    assert len(os.listdir(cache)) == 1


@pytest.mark.parametrize("pidfd", [True, False])
def test_the_exit_after_the_output_is_awaited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pidfd: bool
) -> None:
    """A runtime that closes its output and exits a little later: its answer and its own
    exit are both seen, whether the exit is awaited through a pidfd or, where the kernel
    has none, by polling; one that fails after closing its output claims nothing."""
    from ocihook.linux import ociruntime

    if not pidfd:

        def no_pidfd(pid: int) -> int:
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    late = _script(tmp_path, "late", "echo runc version 1.1.14\nexec >&-\nsleep 0.2\nexit 0\n")
    assert ociruntime._ask_version(late, 5.0) == ("runc version 1.1.14\n", True)
    failing = _script(
        tmp_path, "failing", "echo runc version 1.1.14\nexec >&-\nsleep 0.2\nexit 3\n"
    )
    assert ociruntime._ask_version(failing, 5.0) == (None, True)
