"""Container engines confined to temporary directories: :func:`guard_host` (a cgroup
parent of the tests' own, host paths restored), :class:`Podman` / :func:`start_podman`,
:class:`Containerd` / :func:`start_containerd` / :func:`stop_containerd`,
:func:`busybox_rootfs`, :data:`PRIVATE_RUN`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.containers import ENGINE_SCRIPT
from support.paths import need_root_and
from support.processes import mounts_under, pids_with_arg, wait_gone


def _cgroup_mounts() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        fields = [ln.split() for ln in f]
    return [
        ln[4] for ln in fields if ln[ln.index("-") + 1] in ("cgroup", "cgroup2") and ln[4] != "/"
    ]


def _cgroup_pids(name: str) -> set[int]:
    pids: set[int] = set()
    for mp in _cgroup_mounts():
        for dirpath, _dirs, files in os.walk(os.path.join(mp, name)):
            if "cgroup.procs" in files:
                with contextlib.suppress(FileNotFoundError), open(dirpath + "/cgroup.procs") as f:
                    pids.update(int(p) for p in f.read().split())
    return pids


def stop_containerd(proc: subprocess.Popen[bytes], address: str, wait: float) -> list[int]:
    """Stop the containerd ``proc`` serving ``address`` (SIGTERM, SIGKILL after ``wait``
    seconds), then kill its shims, which outlive a containerd that stops (ours name our
    socket on their command line). Returns the shims that had to be killed."""
    proc.terminate()
    try:
        proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    shims = wait_gone(lambda: pids_with_arg(address), 5)
    for pid in shims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_gone(lambda: pids_with_arg(address), 5)
    return shims


#: Host paths the engines create when missing. Those in SCRATCH (runc's default root,
#: containerd's shim socket dir) are removed again if the tests made them and they are
#: empty (not empty: another engine on the host is using them); any other one appearing
#: is a failure.
SCRATCH = ("/run/containerd/s", "/run/containerd", "/run/runc")


WATCHED = (
    *SCRATCH,
    "/run/containerd/fifo",
    "/run/containerd/runc",
    "/run/containers",
    "/run/libpod",
    "/etc/containers/networks",
    "/etc/cni/net.d/cni.lock",
    "/var/lib/containers",
    "/var/lib/containerd",
    "/opt/containerd",
)


def guard_host() -> Iterator[str]:
    """A cgroup parent of our own for every container (its name is yielded), removed at the
    end once the processes in it are gone; host paths restored (see WATCHED). The body of
    the ``host_guard`` fixture."""
    existed = {p for p in WATCHED if os.path.lexists(p)}
    name = f"ocihook-e2e-{uuid.uuid4().hex[:12]}"
    yield name
    left = wait_gone(lambda: _cgroup_pids(name), 15)
    for pid in left:  # conmon and its cleanup process, which we started
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_gone(lambda: _cgroup_pids(name), 5)
    for mp in _cgroup_mounts():
        top = os.path.join(mp, name)
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            os.rmdir(dirpath)
    for path in SCRATCH:
        if path not in existed and os.path.isdir(path) and not os.listdir(path):
            os.rmdir(path)
    created = sorted(
        p for p in WATCHED if p not in SCRATCH and p not in existed and os.path.lexists(p)
    )
    assert not left, f"processes still in cgroup {name} after 15 s: {left}"
    assert not created, f"the engines left files on the host: {created}"


@dataclass
class Podman:
    """podman's command line confined to a private store (``base``), the store's
    directory and the cgroup parent of :func:`guard_host`."""

    base: list[str]
    store: str
    cgroup_parent: str

    def run(
        self, hooks_dir: Path, rootfs: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``podman run --rm`` of :data:`ENGINE_SCRIPT` in ``rootfs`` with ``hooks_dir``."""
        cmd = [*self.base, "--hooks-dir", str(hooks_dir), "run", "--rm", "--network=none"]
        cmd += ["--cgroup-parent", self.cgroup_parent]
        cmd += ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
        for key, value in (env or {}).items():
            cmd += ["--env", f"{key}={value}"]
        cmd += [*args, "--rootfs", rootfs, "sh", "-c", ENGINE_SCRIPT]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert not mounts_under(rootfs, self.store)
        return proc


def start_podman(d: Path, host_guard: str) -> Iterator[Podman]:
    """podman 4 with a private store in ``d``, cgroupfs, the file events backend and the
    CNI backend with a private config dir (nothing written to /etc/containers or
    /run/containers). The body of the ``podman`` fixture."""
    need_root_and("podman", "runc")
    base = ["podman", "--root", str(d / "root"), "--runroot", str(d / "runroot")]
    base += ["--tmpdir", str(d / "tmp"), "--network-config-dir", str(d / "net")]
    base += ["--network-backend", "cni", "--cgroup-manager=cgroupfs"]
    base += ["--events-backend=file", "--runtime", "runc"]
    yield Podman(base, str(d), f"/{host_guard}")
    # podman's storage would unmount its own mounts on `system reset`; there should be none
    # but the overlay driver's home, which it bind-mounts onto itself (made private) on
    # first use and sometimes keeps after its last command
    left = mounts_under(str(d))
    for line in left:
        subprocess.run(["umount", "-l", line.split()[4]], check=False)
    home = str(d / "root" / "overlay")
    left = [ln for ln in left if not (ln.split()[3] == home and ln.split()[4] == home)]
    assert not left, left


def busybox_rootfs(bundle_factory: Callable[..., str]) -> str:
    """The rootfs of a new busybox bundle (for ``--rootfs``)."""
    return os.path.join(bundle_factory(["true"], []), "rootfs")


@dataclass
class Containerd:
    """A containerd of :func:`start_containerd`: its socket, directory and cgroup parent."""

    address: str
    dir: Path
    cgroup_parent: str

    def ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """``ctr --address <this containerd> args...``."""
        cmd = ["ctr", "--address", self.address, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


CONTAINERD_CONFIG = """\
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{d}/containerd.sock"
"""


def start_containerd(d: Path, host_guard: str) -> Iterator[Containerd]:
    """containerd started by hand with a private config, root, state and socket in ``d``
    (CRI disabled); stopped at the end, with any shim of its own. The body of the
    ``containerd`` fixture."""
    need_root_and("containerd", "ctr", "runc")
    (d / "config.toml").write_text(CONTAINERD_CONFIG.format(d=d))
    address = str(d / "containerd.sock")
    with open(d / "containerd.log", "wb") as log:
        proc = subprocess.Popen(
            ["containerd", "--config", str(d / "config.toml")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    engine = Containerd(address, d, f"/{host_guard}")
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                pytest.fail(f"containerd exited: {(d / 'containerd.log').read_text()[-3000:]}")
            if os.path.exists(address) and engine.ctr("version", timeout=10).returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"containerd did not start: {(d / 'containerd.log').read_text()}")
            time.sleep(0.05)
        yield engine
    finally:
        shims = stop_containerd(proc, address, 10)
        assert not mounts_under(str(d))
        assert not shims, f"containerd shims still running after containerd stopped: {shims}"


#: Runs its arguments in a private mount namespace where /run is a fresh tmpfs holding
#: the spec at /run/cdi (= /var/run/cdi): podman 4.3 has no spec-dir setting.
PRIVATE_RUN = """
set -eu
mount --make-rprivate /
mount -t tmpfs -o mode=0755 ocihook-cdi-test /run
mkdir /run/cdi
cp "$SPEC" /run/cdi/
exec "$@"
"""
