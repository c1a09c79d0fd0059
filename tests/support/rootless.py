"""An unprivileged user of the tests' own: :class:`RootlessUser` and
:func:`start_rootless_user` (subuid/subgid ranges and a simulated host it can read,
removed at the end)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ocihook.sim import host as simhost
from support.paths import REPO, need_root_and
from support.processes import mounts_under, wait_gone


@dataclass
class RootlessUser:
    """An unprivileged user made for a test (:func:`start_rootless_user`): its name, ids,
    a world-readable workspace ``top`` (0755, in /tmp) holding ``python`` — an interpreter
    of a venv that imports this checkout's ocihook from a copy in ``top`` — and a
    simulated host ``sim`` built there (real device nodes)."""

    name: str
    uid: int
    gid: int
    top: str
    python: str
    sim: simhost.SimulatedHost

    def env(self) -> dict[str, str]:
        """A minimal environment for the user's commands (HOME, XDG_RUNTIME_DIR in top)."""
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": os.path.join(self.top, "home"),
            "XDG_RUNTIME_DIR": os.path.join(self.top, "xdg"),
        }

    def run(
        self, *cmd: str, timeout: float = 90, cwd: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` as the user (``setpriv``: its uid, gid, no other groups, no
        capabilities), with :meth:`env` only."""
        return subprocess.run(
            self.user_command(*cmd),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=self.env(),
            cwd=cwd or self.top,
            stdin=subprocess.DEVNULL,
        )

    def user_command(self, *cmd: str) -> list[str]:
        """``cmd`` prefixed with the ``setpriv`` line :meth:`run` uses."""
        full = ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups"]
        return [*full, "--inh-caps=-all", "--", *cmd]

    def kill_processes(self) -> None:
        """Kill what runs as the user (rootless podman's pause process keeps the user
        namespace and mount namespace of the first podman call; a later call that needs a
        different mount namespace must not join it)."""
        for pid in _user_pids(self.uid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        wait_gone(lambda: _user_pids(self.uid), 5)

    def chown(self, path: str) -> None:
        """Give ``path`` (recursively, links not followed) to the user."""
        subprocess.run(["chown", "-R", "-h", f"{self.uid}:{self.gid}", path], check=True)


def _world_readable(path: str) -> bool:
    """Whether every directory above ``path`` lets others search it and ``path`` is
    readable and executable by others (an unprivileged user can run it)."""
    real = os.path.realpath(path)
    parts = real.split("/")
    for i in range(2, len(parts)):
        if not os.stat("/".join(parts[:i])).st_mode & 0o001:
            return False
    return os.stat(real).st_mode & 0o005 == 0o005


def _readable_python() -> str | None:
    """A Python >= 3.11 an unprivileged user can run: this interpreter's base if its path
    is readable by others, else the system's ``/usr/bin/python3``."""
    for cand in (getattr(sys, "_base_executable", sys.executable), "/usr/bin/python3"):
        if not os.path.exists(cand) or not _world_readable(cand):
            continue
        out = subprocess.run(
            [cand, "-c", "import sys; print(sys.version_info >= (3, 11))"],
            capture_output=True,
            text=True,
        ).stdout
        if out.strip() == "True":
            return cand
    return None


def _user_pids(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                st = os.stat(f"/proc/{entry}")
                if st.st_uid == uid:
                    pids.append(int(entry))
    return pids


def start_rootless_user(*tools: str) -> Iterator[RootlessUser]:
    """Create an unprivileged user with subordinate uid and gid ranges (``useradd``,
    ``usermod --add-subuids/--add-subgids``), a workspace for it and a simulated host
    there; at the end kill what still runs as that user (rootless podman's pause
    process), check no mount under the workspace is left, remove the workspace and the
    user (``userdel`` also drops its /etc/subuid and /etc/subgid lines). Skips unless
    root with useradd, setpriv and ``tools``."""
    need_root_and("useradd", "userdel", "usermod", "setpriv", *tools)
    python = _readable_python()
    if python is None:
        pytest.skip("no Python >= 3.11 an unprivileged user can run (install python3)")
    tag = uuid.uuid4().hex[:8]
    name = f"ocihookrl{tag}"
    base = 1_000_000 + (int(tag, 16) % 4000) * 65536  # a range of its own
    top = f"/tmp/ocihook-rl-{tag}"  # short: podman refuses a runroot over 50 characters
    os.mkdir(top, 0o755)
    os.chmod(top, 0o755)
    made = False
    try:
        subprocess.run(
            ["useradd", "--no-create-home", "--home-dir", os.path.join(top, "home"), name],
            check=True,
            capture_output=True,
        )
        made = True
        ids = f"{base}-{base + 65535}"
        subprocess.run(
            ["usermod", "--add-subuids", ids, "--add-subgids", ids, name],
            check=True,
            capture_output=True,
        )
        import pwd

        pw = pwd.getpwnam(name)
        subprocess.run(
            [python, "-m", "venv", "--without-pip", os.path.join(top, "venv")],
            check=True,
            capture_output=True,
        )
        shutil.copytree(
            os.path.join(REPO, "ocihook"),
            os.path.join(top, "src", "ocihook"),
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        venv_python = os.path.join(top, "venv", "bin", "python3")
        site = subprocess.run(
            [venv_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        with open(os.path.join(site, "ocihook-src.pth"), "w") as f:
            f.write(os.path.join(top, "src") + "\n")
        for d in ("home", "xdg", "work"):
            os.makedirs(os.path.join(top, d), mode=0o700)
            os.chown(os.path.join(top, d), pw.pw_uid, pw.pw_gid)
        sim = simhost.build(os.path.join(top, "host"), gpus=4)
        yield RootlessUser(name, pw.pw_uid, pw.pw_gid, top, venv_python, sim)
    finally:
        if made:
            import pwd

            uid = pwd.getpwnam(name).pw_uid
            left = wait_gone(lambda: _user_pids(uid), 5)
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            still = wait_gone(lambda: _user_pids(uid), 5)
            subprocess.run(["userdel", name], check=False, capture_output=True)
        mounts = mounts_under(top)
        for line in mounts:
            subprocess.run(["umount", "-l", line.split()[4]], check=False)
        shutil.rmtree(top, ignore_errors=True)
        if made:
            assert not still, f"processes of {name} still running: {still}"
        assert not mounts, f"mounts left under {top}: {mounts}"
