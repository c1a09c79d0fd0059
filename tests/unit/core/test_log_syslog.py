"""The system log: ``log-syslog`` (on by default) sends each record from ``log-level`` up
as one RFC 3164 datagram to ``/dev/log``, tagged ``ocihook[PID]``, facility daemon, naming
the container and the bundle; nothing blocks or fails where no one listens."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import make_bundle

from ocihook.config.validate import Config
from ocihook.core import log


@pytest.fixture
def syslog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A datagram socket standing in for /dev/log, where ocihook.core.log sends."""
    address = str(tmp_path / "log")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(address)
    server.settimeout(2)
    monkeypatch.setattr(log, "SYSLOG_ADDRESS", address)
    yield server
    server.close()
    log.configure(None)


def _received(server: socket.socket) -> list[str]:
    server.settimeout(0.2)
    out = []
    try:
        while True:
            out.append(server.recv(65536).decode())
    except (TimeoutError, BlockingIOError):
        return out


def test_records_from_the_level_up_go_to_the_system_log(syslog: socket.socket) -> None:
    log.configure(None, "info", syslog=True, container="c1", bundle="/run/b 1")
    log.debug("not sent")
    log.info("gpus given", gpus="GPU-1", mounts=11)
    log.error("hook failed", error="EIO")
    pid = os.getpid()
    assert _received(syslog) == [
        f'<30>ocihook[{pid}]: info pid={pid} container=c1 bundle="/run/b 1" gpus given '
        "gpus=GPU-1 mounts=11",
        f'<27>ocihook[{pid}]: error pid={pid} container=c1 bundle="/run/b 1" hook failed error=EIO',
    ]


def test_syslog_off_sends_nothing(syslog: socket.socket) -> None:
    log.configure(None, "debug", syslog=False)
    log.error("x")
    assert _received(syslog) == []


def test_no_listener_and_no_socket_are_silent(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(log, "SYSLOG_ADDRESS", str(tmp_path / "none"))
    log.configure(None, "debug", syslog=True)
    log.error("dropped")  # no exception, nothing written
    (tmp_path / "file").write_text("")
    monkeypatch.setattr(log, "SYSLOG_ADDRESS", str(tmp_path / "file"))
    log.error("dropped too")
    log.configure(None)


def test_the_setting_is_on_by_default() -> None:
    assert Config().log_syslog is True


def test_edit_logs_its_decision_with_the_bundle(sim: Any, tmp_path: Path) -> None:
    """A real ``ocihook edit`` (its own process) sends one info line naming the bundle and
    the GPU it gave."""
    address = tmp_path / "log"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    server.bind(str(address))
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=2"])
    code = (
        "import sys; from ocihook.core import log; log.SYSLOG_ADDRESS = sys.argv[1]; "
        "from ocihook._main import main; sys.exit(main(sys.argv[2:]))"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            str(address),
            "edit",
            "-q",
            "-b",
            str(bundle),
            "--driver-root",
            sim.root,
            "--dev-root",
            sim.root,
        ],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ["PATH"]},
    )
    assert r.returncode == 0, r.stderr
    lines = _received(server)
    server.close()
    gpu2 = next(g for g in sim.gpus if g.index == 2)
    edited = [ln for ln in lines if " config.json edited " in ln]
    assert len(edited) == 1, lines
    assert edited[0].startswith("<30>ocihook[")
    assert f"bundle={bundle} config.json edited gpus={gpu2.uuid} device_nodes=4" in edited[0]
    assert json.loads((bundle / "config.json").read_text())["linux"]["devices"]
