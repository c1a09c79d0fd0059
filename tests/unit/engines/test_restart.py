"""``ocihook k8s install`` / ``uninstall --restart-mode`` (:mod:`ocihook.engines.restart`)
on a fake host root: ``signal`` sends SIGHUP to a real process named ``crio`` found in the
host root's ``proc/`` (refused for containerd, which does not reload on SIGHUP, and when
the host's processes are not this pid namespace's or the engine cannot be told apart);
``systemd`` runs a fake ``systemctl`` on PATH, behind a fake ``nsenter`` when the host's
pid 1 is in another mount namespace; refusals come before anything is written."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import run_cli

from ocihook.core.errors import EngineConfigError
from ocihook.engines import restart
from ocihook.engines.hostinstall import PREFIX

#: containerd 1.7's file as a node has it (version 2, runc under the CRI plugin).
CONTAINERD_TOML = b"""\
version = 2

[plugins]
  [plugins."io.containerd.grpc.v1.cri"]
    [plugins."io.containerd.grpc.v1.cri".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
"""


def _payload(tmp_path: Path) -> Path:
    """The smallest payload list the installer takes."""
    src = tmp_path / "image"
    lines = []
    for dest in (
        "libexec/python3",
        "lib/ld.so",
        "bin/ocihook",
        "bin/ocihook-runtime",
        "bin/nvidia-container-runtime-hook",
    ):
        path = src / dest
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"#!/bin/sh\n")
        path.chmod(0o755)
        lines.append(f"{dest}\t{path}")
    listing = tmp_path / "payload.list"
    listing.write_text("\n".join(lines) + "\n")
    return listing


def _proc(host: Path, *, self_pid: int | None = None, same_mnt: bool = False) -> Path:
    """The host's procfs stand-in: ``self`` naming ``self_pid`` (default: this process,
    as with hostPID), pid 1's and self's mount namespace links."""
    proc = host / "proc"
    pid = os.getpid() if self_pid is None else self_pid
    (proc / str(pid) / "ns").mkdir(parents=True, exist_ok=True)
    (proc / "1" / "ns").mkdir(parents=True, exist_ok=True)
    (proc / "1" / "comm").write_text("systemd\n")
    (proc / "self").symlink_to(str(pid))
    (proc / "1" / "ns" / "mnt").symlink_to("mnt:[4026531841]")
    (proc / str(pid) / "ns" / "mnt").symlink_to(
        "mnt:[4026531841]" if same_mnt else "mnt:[4026532700]"
    )
    return proc


def _containerd_host(tmp_path: Path, **proc: object) -> Path:
    host = tmp_path / "host"
    (host / "etc/containerd").mkdir(parents=True)
    (host / "run/containerd").mkdir(parents=True)
    (host / "run/containerd/containerd.sock").touch()
    (host / "etc/containerd/config.toml").write_bytes(CONTAINERD_TOML)
    _proc(host, **proc)  # type: ignore[arg-type]
    return host


def _crio_host(tmp_path: Path, **proc: object) -> Path:
    host = tmp_path / "host"
    (host / "etc/crio/crio.conf.d").mkdir(parents=True)
    _proc(host, **proc)  # type: ignore[arg-type]
    return host


@pytest.fixture
def crio_process(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A real process standing in for CRI-O: it writes ``hup`` to a file on each SIGHUP.
    Yields its pid and that file."""
    marker = tmp_path / "sighup"
    code = (
        "import signal, sys, time\n"
        f"def hup(*_):\n    open({str(marker)!r}, 'a').write('hup\\n')\n"
        "signal.signal(signal.SIGHUP, hup)\n"
        "print('ready', flush=True)\n"
        "while True:\n    time.sleep(0.05)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        yield child.pid, marker
    finally:
        child.kill()
        child.wait()


def _add_process(host: Path, pid: int, comm: str) -> None:
    (host / "proc" / str(pid)).mkdir(parents=True, exist_ok=True)
    (host / "proc" / str(pid) / "comm").write_text(comm + "\n")


def _wait_for(path: Path, text: str) -> str:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if path.exists() and path.read_text() == text:
            break
        time.sleep(0.02)
    return path.read_text() if path.exists() else ""


def _fake_tools(tmp_path: Path, *, systemctl_rc: int = 0) -> tuple[dict[str, str], Path]:
    """``nsenter`` and ``systemctl`` stand-ins on a PATH of their own: each appends its
    argv to a log; nsenter then runs what follows ``--``. Returns the environment and
    the log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    log = tmp_path / "tools.log"
    (bin_dir / "nsenter").write_text(
        f'#!/bin/sh\necho "nsenter $*" >> {log}\nwhile [ "$1" != "--" ]; do shift; done\n'
        'shift\nexec "$@"\n'
    )
    fail = 'echo "Failed to restart containerd.service: Unit not found." >&2\n'
    (bin_dir / "systemctl").write_text(
        f'#!/bin/sh\necho "systemctl $*" >> {log}\n'
        + (fail if systemctl_rc else "")
        + f"exit {systemctl_rc}\n"
    )
    for tool in ("nsenter", "systemctl"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    return env, log


def _install(host: Path, listing: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return run_cli(
        "k8s", "install", "--host-root", str(host), "--payload", str(listing), *args, env=env
    )


def test_check_mode() -> None:
    """containerd does not reload on SIGHUP: signal refused in one line, naming what
    works; none needs no engine; a restart with no engine is refused."""
    restart.check_mode(None, "none")
    restart.check_mode("containerd", "systemd")
    restart.check_mode("crio", "signal")
    with pytest.raises(EngineConfigError) as e:
        restart.check_mode("containerd", "signal")
    assert str(e.value) == (
        "containerd does not reload its configuration on SIGHUP: --restart-mode signal cannot "
        "apply it (value 'containerd'); hint: --restart-mode systemd (restarts it; running "
        "containers keep running) or none"
    )
    with pytest.raises(EngineConfigError, match="with no engine to restart"):
        restart.check_mode(None, "systemd")
    with pytest.raises(EngineConfigError, match="unknown restart mode 'reboot'"):
        restart.check_mode("crio", "reboot")


def test_signal_reloads_crio(tmp_path: Path, crio_process: tuple[int, Path]) -> None:
    """CRI-O's process (found by its comm among the host's processes) gets one SIGHUP
    after its drop-in is written; a second install changes nothing and signals nothing."""
    pid, marker = crio_process
    host = _crio_host(tmp_path)
    _add_process(host, pid, "crio")
    _add_process(host, 4242, "containerd")
    _add_process(host, 4243, "crio-wrapper")
    listing = _payload(tmp_path)
    proc = _install(host, listing, "--restart-mode", "signal")
    assert proc.returncode == 0, proc.stderr
    assert (host / "etc/crio/crio.conf.d/99-ocihook.conf").exists()
    assert _wait_for(marker, "hup\n") == "hup\n"
    assert proc.stderr.splitlines()[-1] == (
        f"ocihook: crio: SIGHUP sent (pid {pid}) to reload its configuration"
    )
    again = _install(host, listing, "--restart-mode", "signal")
    assert again.returncode == 0 and "SIGHUP" not in again.stderr
    time.sleep(0.2)
    assert marker.read_text() == "hup\n"
    # uninstall restores the file and signals again
    gone = run_cli("k8s", "uninstall", "--host-root", str(host), "--restart-mode", "signal")
    assert gone.returncode == 0, gone.stderr
    assert not (host / "etc/crio/crio.conf.d/99-ocihook.conf").exists()
    assert _wait_for(marker, "hup\nhup\n") == "hup\nhup\n"


def test_signal_refusals_write_nothing(tmp_path: Path, crio_process: tuple[int, Path]) -> None:
    """Refused before anything is written, exit 13, one line: containerd; the host's
    processes seen from another pid namespace (no hostPID); no crio process; two."""
    pid, marker = crio_process
    listing = _payload(tmp_path)
    host = _containerd_host(tmp_path / "c")
    proc = _install(host, listing, "--restart-mode", "signal")
    assert proc.returncode == 13
    assert proc.stderr.splitlines() == [
        "ocihook: error[bad-engine-config]: containerd does not reload its configuration on "
        "SIGHUP: --restart-mode signal cannot apply it (value 'containerd'); hint: "
        "--restart-mode systemd (restarts it; running containers keep running) or none"
    ]
    assert (host / "etc/containerd/config.toml").read_bytes() == CONTAINERD_TOML
    assert not (host / PREFIX.lstrip("/")).exists()

    host = _crio_host(tmp_path / "ns", self_pid=2)  # proc/self is not this process
    _add_process(host, pid, "crio")
    proc = _install(host, listing, "--restart-mode", "signal")
    assert proc.returncode == 13
    assert proc.stderr.splitlines() == [
        "ocihook: error[bad-engine-config]: the host's processes are not in this process's "
        f"pid namespace: cannot signal crio (file {host}/proc); hint: run the installer pod "
        "with hostPID: true"
    ]
    assert not (host / "etc/crio/crio.conf.d/99-ocihook.conf").exists()

    host = _crio_host(tmp_path / "none")
    proc = _install(host, listing, "--restart-mode", "signal")
    assert proc.returncode == 13
    assert "error[bad-engine-config]: no crio process on the host" in proc.stderr
    _add_process(host, pid, "crio")
    _add_process(host, 77, "crio")
    proc = _install(host, listing, "--restart-mode", "signal")
    assert proc.returncode == 13
    assert f"2 crio processes on the host (77, {pid}): cannot tell which to signal" in (proc.stderr)
    assert not (host / "etc/crio/crio.conf.d/99-ocihook.conf").exists()
    assert not marker.exists()


def test_systemd_through_nsenter(tmp_path: Path) -> None:
    """In a pod (pid 1 in another mount namespace): nsenter into the host's, then
    systemctl restart containerd.service; not again when nothing changed; uninstall
    restarts it after restoring the file; --dry-run runs nothing."""
    env, log = _fake_tools(tmp_path)
    host, listing = _containerd_host(tmp_path), _payload(tmp_path)
    dry = _install(host, listing, "--restart-mode", "systemd", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert dry.stderr.splitlines()[-1] == (
        "ocihook: containerd: would be restarted: nsenter --target 1 --mount -- systemctl "
        "restart containerd.service"
    )
    assert not log.exists()
    proc = _install(host, listing, "--restart-mode", "systemd", env=env)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == [
        "nsenter --target 1 --mount -- systemctl restart containerd.service",
        "systemctl restart containerd.service",
    ]
    assert proc.stderr.splitlines()[-1] == (
        "ocihook: containerd: restarted (nsenter --target 1 --mount -- systemctl restart "
        "containerd.service)"
    )
    again = _install(host, listing, "--restart-mode", "systemd", env=env)
    assert again.returncode == 0, again.stderr
    assert len(log.read_text().splitlines()) == 2, again.stderr  # unchanged: no restart
    gone = run_cli(
        "k8s", "uninstall", "--host-root", str(host), "--restart-mode", "systemd", env=env
    )
    assert gone.returncode == 0, gone.stderr
    assert (host / "etc/containerd/config.toml").read_bytes() == CONTAINERD_TOML
    assert log.read_text().splitlines()[2:] == [
        "nsenter --target 1 --mount -- systemctl restart containerd.service",
        "systemctl restart containerd.service",
    ]


def test_systemd_on_the_host_and_its_failures(tmp_path: Path) -> None:
    """Already in pid 1's mount namespace: systemctl directly. A failing systemctl is
    exit 13 with its last line (the file is written by then: the restart is what
    failed); a missing one is refused before anything is written."""
    env, log = _fake_tools(tmp_path)
    host, listing = _containerd_host(tmp_path / "a", same_mnt=True), _payload(tmp_path)
    proc = _install(host, listing, "--restart-mode", "systemd", env=env)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == ["systemctl restart containerd.service"]

    env, log = _fake_tools(tmp_path / "failing", systemctl_rc=1)
    host = _containerd_host(tmp_path / "b", same_mnt=True)
    proc = _install(host, listing, "--restart-mode", "systemd", env=env)
    assert proc.returncode == 13
    assert proc.stderr.splitlines()[-1] == (
        "ocihook: error[bad-engine-config]: systemctl restart containerd.service failed "
        "(exit 1): Failed to restart containerd.service: Unit not found."
    )

    host = _containerd_host(tmp_path / "c")
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _install(
        host, listing, "--restart-mode", "systemd", env={**os.environ, "PATH": str(empty)}
    )
    assert proc.returncode == 13
    assert proc.stderr.splitlines() == [
        "ocihook: error[bad-engine-config]: nsenter not found: cannot restart containerd "
        "with systemd; hint: --restart-mode none, then restart it by hand"
    ]
    assert (host / "etc/containerd/config.toml").read_bytes() == CONTAINERD_TOML


def test_none_says_a_restart_is_needed(tmp_path: Path) -> None:
    host, listing = _containerd_host(tmp_path), _payload(tmp_path)
    proc = _install(host, listing)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "ocihook: restart containerd on the node to use ocihook-runtime and CDI"
    )
    gone = run_cli("k8s", "uninstall", "--host-root", str(host))
    assert gone.stderr.splitlines()[-1] == (
        "ocihook: restart containerd on the node to apply its restored file"
    )
