"""A message that cannot be written to stderr fails no command: every entry
point (``ocihook``, ``python -m ocihook``, ``ocihook-runtime``,
``nvidia-container-runtime-hook``) runs with :func:`ocihook.core.stdio.tolerant_stderr`, so a
full disk under the log (ENOSPC: ``/dev/full``), EIO or a closed pipe drops the message;
the exit status is the one documented for what happened and there is no traceback.
The fault campaign (tests/fuzz/test_fuzz_faults.py) injects the same into each write of
``edit``, ``cdi generate`` and ``runtime configure``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from support import WRAPPER, make_bundle

from ocihook.core.stdio import TolerantStderr, tolerant_stderr
from ocihook.sim import host as simhost

OCIHOOK = [sys.executable, "-m", "ocihook"]


def _run(
    argv: list[str], tmp_path: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``argv`` with stderr on ``/dev/full`` (every write: ENOSPC), an empty
    configuration file and ``env`` on top of this environment."""
    cfg = tmp_path / "empty.toml"
    cfg.write_bytes(b"")
    with open("/dev/full", "wb") as full:
        return subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=full,
            env={**os.environ, "OCIHOOK_CONFIG": str(cfg), **(env or {})},
            timeout=120,
            check=False,
        )


def test_edit_with_a_full_stderr_writes_and_exits_0(
    sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    """The closing line (``...; written``) cannot be written: config.json is the new
    one, exit 0 (before: a traceback and exit 1)."""
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    proc = _run([*OCIHOOK, "edit", "-b", str(bundle), *roots], tmp_path)
    assert proc.returncode == 0
    doc = json.loads((bundle / "config.json").read_text())
    assert "NVIDIA_VISIBLE_DEVICES=void" in doc["process"]["env"]
    assert any(d["path"] == f"/dev/nvidia{sim.gpus[0].minor}" for d in doc["linux"]["devices"])
    assert sorted(os.listdir(bundle)) == ["config.json", "rootfs"]


def test_an_error_with_a_full_stderr_keeps_its_exit_code(tmp_path: Path) -> None:
    """The error line cannot be written: the exit status still says which error (3: no
    config.json)."""
    proc = _run([*OCIHOOK, "edit", "-b", str(tmp_path / "missing")], tmp_path)
    assert proc.returncode == 3


def test_runtime_configure_with_a_full_stderr_writes_and_exits_0(tmp_path: Path) -> None:
    """``runtime configure`` (a click command, ``click.echo(err=True)``): the file is
    written, exit 0."""
    path = tmp_path / "daemon.json"
    argv = [*OCIHOOK, "runtime", "configure", "--runtime", "docker", "--config", str(path)]
    proc = _run([*argv, "--runtime-path", WRAPPER], tmp_path)
    assert proc.returncode == 0
    assert json.loads(path.read_text()) == {"runtimes": {"ocihook": {"path": WRAPPER}}}


def test_click_usage_error_with_a_full_stderr_is_exit_2(tmp_path: Path) -> None:
    proc = _run([*OCIHOOK, "runtime", "configure", "--runtime", "nosuch"], tmp_path)
    assert proc.returncode == 2


def test_wrapper_runtime_with_a_full_stderr_keeps_its_exit_code(tmp_path: Path) -> None:
    """``ocihook-runtime`` finding no real runtime: exit 12, no traceback (a traceback would
    be exit 1)."""
    code = "import sys; from ocihook.runtime import main; sys.exit(main())"
    env = {"PATH": str(tmp_path / "empty-path")}  # no runc, no crun
    proc = _run([sys.executable, "-I", "-c", code, "state", "cid"], tmp_path, env)
    assert proc.returncode == 12
    proc = subprocess.run(  # what it would have said
        [sys.executable, "-I", "-c", code, "state", "cid"],
        capture_output=True,
        env={**os.environ, **env, "OCIHOOK_CONFIG": str(tmp_path / "empty.toml")},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 12 and b"error[no-runtime]" in proc.stderr, proc.stderr


def test_docker_hook_with_a_full_stderr_keeps_its_exit_code(tmp_path: Path) -> None:
    code = "import sys; from ocihook._main import nvidia_hook_main; sys.exit(nvidia_hook_main())"
    proc = _run([sys.executable, "-I", "-c", code, "nosuch-stage"], tmp_path)
    assert proc.returncode == 2


def test_closed_stderr_pipe_is_no_error(sim: simhost.SimulatedHost, tmp_path: Path) -> None:
    """stderr a pipe whose reader is gone (EPIPE): the edit is written, exit 0."""
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    cfg = tmp_path / "empty.toml"
    cfg.write_bytes(b"")
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run(
            [*OCIHOOK, "edit", "-b", str(bundle), *roots],
            stdout=subprocess.PIPE,
            stderr=w,
            env={**os.environ, "OCIHOOK_CONFIG": str(cfg)},
            timeout=120,
            check=False,
        )
    finally:
        os.close(w)
    assert proc.returncode == 0
    assert "NVIDIA_VISIBLE_DEVICES=void" in (bundle / "config.json").read_text()


# --- the stream itself ---------------------------------------------------------------------


def _pipe_stream() -> tuple[TolerantStderr, int]:
    r, w = os.pipe()
    return TolerantStderr(w, "utf-8", "backslashreplace"), r


def test_stream_writes_whole_lines_and_flushes_the_rest() -> None:
    stream, r = _pipe_stream()
    try:
        assert stream.write("one ") == 4
        assert stream.write("line\ntwo") == 8
        assert os.read(r, 100) == b"one line\n"  # one write per line; "two" waits
        stream.flush()
        assert os.read(r, 100) == b"two"
        stream.write("\ud800 lone surrogate\n")
        assert os.read(r, 100) == b"\\ud800 lone surrogate\n"
        assert stream.dropped == 0
    finally:
        os.close(r)
        os.close(stream.fd)


def test_stream_drops_what_it_cannot_write() -> None:
    """A write error drops the message (counted) and the next one goes out whole."""
    full = os.open("/dev/full", os.O_WRONLY)
    stream = TolerantStderr(full, "utf-8", "backslashreplace")
    try:
        stream.write("lost\n")
        stream.write("partial")
        stream.flush()
        assert stream.dropped == 2
        r, stream.fd = os.pipe()
        stream.write("next\n")
        assert os.read(r, 100) == b"next\n"
        os.close(r)
        os.close(stream.fd)
    finally:
        os.close(full)


def test_stream_is_text_only_and_click_writes_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """click.echo(err=True) takes the stream as it is (it has ``encoding`` and ``errors``
    and refuses bytes, so click finds no binary stream behind it) and flushes it."""
    stream, r = _pipe_stream()
    try:
        with pytest.raises(TypeError):
            stream.write(b"x")  # type: ignore[arg-type]
        monkeypatch.setattr(sys, "stderr", stream)
        click.echo("from click", err=True)
        assert os.read(r, 100) == b"from click\n"
    finally:
        os.close(r)
        os.close(stream.fd)


def test_a_replaced_stderr_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under pytest's capture (or when embedded) sys.stderr is not the interpreter's:
    nothing is swapped, so captured output stays captured."""
    import io

    captured = io.StringIO()
    monkeypatch.setattr(sys, "stderr", captured)
    restore = tolerant_stderr()
    assert sys.stderr is captured
    restore()
    assert sys.stderr is captured


def test_the_real_stderr_is_swapped_and_put_back() -> None:
    code = (
        "import sys\n"
        "from ocihook.core.stdio import tolerant_stderr\n"
        "real = sys.stderr\n"
        "restore = tolerant_stderr()\n"
        "print(type(sys.stderr).__name__, sys.stderr.fileno(), end='')\n"
        "print(' via stderr', file=sys.stderr, end='')\n"
        "restore()\n"
        "print('', sys.stderr is real)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "TolerantStderr 2 True\n"
    assert proc.stderr == " via stderr"  # the partial line flushed by restore()
