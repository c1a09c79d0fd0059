"""End to end through the container engines: podman (hooks.d, as packaged) and containerd
(``ctr run`` of a full OCI spec with ocihook's prestart hook), on the simulated host.

The container's own view is the oracle, as in test_e2e_runc.py: ``/dev/nvidia0`` is
``c 195:0``, ``libcuda.so.1 -> libcuda.so.<version>``, the ELF magic read through it, ENXIO
(allowed by the cgroup, no driver) on ``cat /dev/nvidia0`` and EPERM (denied by the
cgroup) on a GPU node it did not ask for. A small logging hook records what each runtime
passes to its hooks: the state JSON on stdin, the working directory, the stage the hook
ended up in and whether the state's pid is in a mount namespace of its own.

Both engines are confined to temporary directories: podman gets a private store, network
config dir and ``--hooks-dir``; containerd a private config, root, state and socket (CRI
plugin disabled) and is stopped at the end. Containers go to a cgroup parent of their own,
removed at the end. What the engines insist on creating on the host (``/run/runc``,
``/run/containerd/s``: empty directories) is removed if the tests created it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, need_root_and

from ocihook.sim import host as simhost

pytestmark = pytest.mark.e2e

HOOKS_D = os.path.join(REPO, "packaging/hooks.d/ocihook-prestart.json.in")
HOOKS_D_CDI = os.path.join(REPO, "packaging/hooks.d/ocihook-prestart-cdi-annotations.json.in")
SNIPPET = os.path.join(REPO, "packaging/config.json-hooks-snippet.json.in")

#: What the container prints: its NVIDIA nodes, the soname link, the ELF magic read through
#: it, what opening GPU 0 gives, and (with CAP_MKNOD, when $OTHER is set) what opening a
#: node it made itself for a GPU it did not ask for gives.
SCRIPT = r"""
for n in /dev/nvidia*; do [ -e "$n" ] && echo "NODE $n $(stat -c '%F %t:%T' $n)"; done
echo "LINK $(readlink /usr/lib64/libcuda.so.1)"
echo "MAGIC $(hexdump -n 4 -e '4/1 "%02x"' /usr/lib64/libcuda.so.1 2>/dev/null)"
echo "OPEN0 $(cat /dev/nvidia0 2>&1 | head -n 1)"
if [ -n "$OTHER" ] && busybox mknod /dev/nvidia$OTHER c 195 $OTHER; then
  echo "OPENOTHER $(cat /dev/nvidia$OTHER 2>&1 | head -n 1)"
fi
echo DONE
"""

#: A hook that appends one JSON line per call to LOG: its argv, cwd, the state from stdin,
#: the stages of the bundle's config.json that register it, and the mount namespaces of
#: itself and of the state's pid. With REAL set it then runs REAL with its own arguments
#: (argv[1:]) and the same state on stdin — a logging stand-in for a hook's ``path``.
LOGGER = """\
import json, os, sys
LOG = {log!r}
REAL = {real!r}
data = sys.stdin.buffer.read()
entry = {{"argv": sys.argv, "cwd": os.getcwd(), "raw": data.decode(errors="replace")}}
try:
    state = json.loads(data)
    entry["state"] = state
    with open(os.path.join(state["bundle"], "config.json")) as f:
        hooks = json.load(f).get("hooks") or {{}}
    entry["stages"] = sorted(k for k, v in hooks.items() if any(h.get("path") == sys.argv[0] for h in v))
    entry["mntns_self"] = os.readlink("/proc/self/ns/mnt")
    entry["mntns_pid"] = os.readlink(f"/proc/{{state['pid']}}/ns/mnt")
except Exception as e:
    entry["error"] = repr(e)
with open(LOG, "a") as f:
    f.write(json.dumps(entry) + "\\n")
if REAL:
    r, w = os.pipe()
    os.write(w, data)
    os.close(w)
    os.dup2(r, 0)
    os.execv(REAL, [REAL, *sys.argv[1:]])
"""


def _lines(out: str, tag: str) -> list[str]:
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


def _check_gpu0(out: str, sim: simhost.SimulatedHost) -> None:
    """The container sees exactly GPU 0 of the simulated host."""
    assert "DONE" in out.splitlines(), out
    nodes = dict(line.split(" ", 1) for line in _lines(out, "NODE"))
    assert nodes == {
        "/dev/nvidia0": "character special file c3:0",
        "/dev/nvidiactl": "character special file c3:ff",
        "/dev/nvidia-uvm": f"character special file {simhost.UVM_MAJOR:x}:0",
        "/dev/nvidia-uvm-tools": f"character special file {simhost.UVM_MAJOR:x}:1",
    }, out
    assert _lines(out, "LINK") == [f"libcuda.so.{sim.driver_version}"], out
    assert _lines(out, "MAGIC") == ["7f454c46"], out
    assert _lines(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such device or address"]
    other = _lines(out, "OPENOTHER")
    assert len(other) == 1 and "Operation not permitted" in other[0], out


def _check_no_gpu(out: str) -> None:
    assert "DONE" in out.splitlines(), out
    assert _lines(out, "NODE") == [], out
    assert _lines(out, "LINK") == [""], out
    assert _lines(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such file or directory"]


def _read_log(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def _check_state(entry: dict[str, Any], cid: str | None = None) -> dict[str, Any]:
    """What every runtime here passes a prestart hook; returns the state."""
    assert "error" not in entry, entry
    state: dict[str, Any] = entry["state"]
    assert state["status"] == "creating", state
    assert isinstance(state["pid"], int) and state["pid"] > 0, state
    assert cid is None or state["id"] == cid, state
    assert entry["cwd"] == state["bundle"], entry
    assert entry["mntns_pid"] != entry["mntns_self"], entry
    # the logger runs where ocihook runs: wherever the runtime put the prestart hooks
    assert entry["stages"] in (["prestart"], ["createRuntime"]), entry
    return state


def _write_logger(path: Path, log: Path, real: str = "") -> str:
    path.write_text(f"#!{sys.executable} -I\n" + LOGGER.format(log=str(log), real=real))
    path.chmod(0o755)
    return str(path)


def _render(template: str, root: str, *, path: str | None = None) -> dict[str, Any]:
    """A packaged hooks.d file as its README says: ``@PYTHON@`` replaced by this interpreter
    (in ``path`` and ``args[0]``), and the simulated host's roots appended to ``args``."""
    with open(template) as f:
        doc: dict[str, Any] = json.loads(f.read().replace("@PYTHON@", sys.executable))
    assert doc["hook"]["path"] == doc["hook"]["args"][0] == sys.executable
    doc["hook"]["args"] += ["--driver-root", root, "--dev-root", root]
    if path is not None:
        doc["hook"]["path"] = path
    return doc


def _mounts_under(*paths: str) -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [ln for ln in f if any(p in ln for p in paths)]


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


def _pids_with_arg(arg: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if arg.encode() in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def _wait_gone(pids: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    left = pids()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = pids()
    return left


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


@pytest.fixture(scope="module")
def host_guard() -> Iterator[str]:
    """A cgroup parent of our own for every container (its name is yielded), removed at the
    end once the processes in it are gone; host paths restored (see WATCHED)."""
    existed = {p for p in WATCHED if os.path.lexists(p)}
    name = f"ocihook-e2e-{uuid.uuid4().hex[:12]}"
    yield name
    left = _wait_gone(lambda: _cgroup_pids(name), 15)
    for pid in left:  # conmon and its cleanup process, which we started
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(lambda: _cgroup_pids(name), 5)
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


# -- podman ------------------------------------------------------------------------------------


@dataclass
class Podman:
    base: list[str]
    store: str
    cgroup_parent: str

    def run(
        self, hooks_dir: Path, rootfs: str, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [*self.base, "--hooks-dir", str(hooks_dir), "run", "--rm", "--network=none"]
        cmd += ["--cgroup-parent", self.cgroup_parent]
        cmd += ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
        for key, value in (env or {}).items():
            cmd += ["--env", f"{key}={value}"]
        cmd += [*args, "--rootfs", rootfs, "sh", "-c", SCRIPT]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert not _mounts_under(rootfs, self.store)
        return proc


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory, host_guard: str) -> Iterator[Podman]:
    """podman 4 with a private store, cgroupfs, the file events backend and the CNI
    backend with a private config dir (nothing written to /etc/containers or /run/containers)."""
    need_root_and("podman", "runc")
    d = tmp_path_factory.mktemp("podman")
    base = ["podman", "--root", str(d / "root"), "--runroot", str(d / "runroot")]
    base += ["--tmpdir", str(d / "tmp"), "--network-config-dir", str(d / "net")]
    base += ["--network-backend", "cni", "--cgroup-manager=cgroupfs"]
    base += ["--events-backend=file", "--runtime", "runc"]
    yield Podman(base, str(d), f"/{host_guard}")
    # podman's storage would unmount its own mounts on `system reset`; there should be none
    left = _mounts_under(str(d))
    for line in left:
        subprocess.run(["umount", "-l", line.split()[4]], check=False)
    assert not left, left


def _rootfs(bundle_factory: Callable[..., str]) -> str:
    return os.path.join(bundle_factory(["true"], []), "rootfs")


def test_podman_hooks_d_gives_gpu0(
    podman: Podman,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The packaged hooks.d file (``when.always``): a container with
    NVIDIA_VISIBLE_DEVICES=0 sees GPU 0; one without the variable starts as usual and has
    no NVIDIA node (the hook's fast exit)."""
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    doc = _render(HOOKS_D, sim.root)
    assert doc["when"] == {"always": True}
    (hooks / "ocihook-prestart.json").write_text(json.dumps(doc))
    log = tmp_path / "state.log"
    logger = {
        "version": "1.0.0",
        "hook": {"path": _write_logger(tmp_path / "logger", log), "args": ["logger"]},
        "when": {"always": True},
        "stages": ["prestart"],
    }
    (hooks / "00-state-logger.json").write_text(json.dumps(logger))

    other = str(sim.gpus[1].minor)
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "OTHER": other}
    proc = podman.run(hooks, _rootfs(bundle_factory), "--cap-add", "MKNOD", env=env)
    assert proc.returncode == 0, proc.stderr
    _check_gpu0(proc.stdout, sim)

    proc = podman.run(hooks, _rootfs(bundle_factory))
    assert proc.returncode == 0, proc.stderr
    _check_no_gpu(proc.stdout)

    entries = _read_log(log)
    assert len(entries) == 2, entries
    for entry in entries:
        state = _check_state(entry)
        # podman's annotations come with the state; the bundle is podman's userdata dir
        assert state["annotations"]["io.container.manager"] == "libpod", state
        assert state["bundle"].startswith(podman.store), state


def test_podman_cdi_annotation_variant(
    podman: Podman,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """The annotation-conditioned hooks.d file runs ocihook only for a container with a
    ``cdi.k8s.io/*`` annotation. Its ``path`` is a wrapper that logs each call and then
    runs the packaged command line: every container here asks for GPU 0 by environment,
    so the node appears exactly where the hook ran."""
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    log = tmp_path / "calls.log"
    wrapper = _write_logger(tmp_path / "wrapper", log, real=sys.executable)
    doc = _render(HOOKS_D_CDI, sim.root, path=wrapper)
    assert doc["when"] == {"annotations": {r"^cdi\.k8s\.io/.*": ".*"}}
    (hooks / "ocihook-prestart-cdi-annotations.json").write_text(json.dumps(doc))
    gpu = {"NVIDIA_VISIBLE_DEVICES": "0"}
    cdi = ["--annotation", "cdi.k8s.io/gpu=nvidia.com/gpu=0"]

    # no annotation, or one of another domain: the hook does not run at all
    for args in ([], ["--annotation", "example.com/gpu=nvidia.com/gpu=0"]):
        proc = podman.run(hooks, _rootfs(bundle_factory), *args, env=gpu)
        assert proc.returncode == 0, proc.stderr
        _check_no_gpu(proc.stdout)
    assert _read_log(log) == []

    # the annotation: it runs and gives GPU 0
    env = {**gpu, "OTHER": str(sim.gpus[1].minor)}
    proc = podman.run(hooks, _rootfs(bundle_factory), *cdi, "--cap-add", "MKNOD", env=env)
    assert proc.returncode == 0, proc.stderr
    _check_gpu0(proc.stdout, sim)
    (entry,) = _read_log(log)
    state = _check_state(entry)
    assert state["annotations"]["cdi.k8s.io/gpu"] == "nvidia.com/gpu=0", state
    assert entry["argv"][1:] == doc["hook"]["args"][1:], entry

    # the annotation without NVIDIA_VISIBLE_DEVICES: it runs, and injects nothing
    proc = podman.run(hooks, _rootfs(bundle_factory), *cdi)
    assert proc.returncode == 0, proc.stderr
    _check_no_gpu(proc.stdout)
    assert len(_read_log(log)) == 2


# -- containerd --------------------------------------------------------------------------------


@dataclass
class Containerd:
    address: str
    dir: Path
    cgroup_parent: str

    def ctr(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
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


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory, host_guard: str) -> Iterator[Containerd]:
    """containerd started by hand with a private config, root, state and socket (CRI
    disabled); stopped at the end, with any shim of its own."""
    need_root_and("containerd", "ctr", "runc")
    d = tmp_path_factory.mktemp("containerd")
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
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        # shims outlive a containerd that stops; ours name our socket on their command line
        shims = _wait_gone(lambda: _pids_with_arg(address), 5)
        for pid in shims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _wait_gone(lambda: _pids_with_arg(address), 5)
        assert not _mounts_under(str(d))
        assert not shims, f"containerd shims still running after containerd stopped: {shims}"


def _ctr_spec(bundle: str, root: str, logger: str, cgroups_path: str) -> dict[str, Any]:
    """A full OCI spec for ``ctr run --config``: absolute root.path (ctr makes no
    snapshot; a relative one is taken inside containerd's own bundle dir), process.cwd
    (runc: "Cwd property must not be empty"), terminal false (no -t), a mount namespace;
    hooks.prestart = the logger, then ocihook's hook as the packaging snippet gives it."""
    with open(os.path.join(bundle, "config.json")) as f:
        spec: dict[str, Any] = json.load(f)
    spec["root"]["path"] = os.path.join(bundle, "rootfs")
    spec["process"]["capabilities"]["bounding"].append("CAP_MKNOD")
    spec["process"]["capabilities"]["effective"].append("CAP_MKNOD")
    spec["process"]["capabilities"]["permitted"].append("CAP_MKNOD")
    spec["linux"]["cgroupsPath"] = cgroups_path
    assert spec["process"]["cwd"] == "/" and spec["process"]["terminal"] is False
    assert {"type": "mount"} in spec["linux"]["namespaces"]
    with open(SNIPPET) as f:
        hook = json.loads(f.read().replace("@PYTHON@", sys.executable))["hooks"]["prestart"][0]
    hook["args"] += ["--driver-root", root, "--dev-root", root]
    spec["hooks"] = {"prestart": [{"path": logger, "args": ["logger"]}, hook]}
    return spec


def test_containerd_ctr_gives_gpu0(
    containerd: Containerd,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """``ctr run --rm --config spec.json``: the runc shim runs the prestart hooks with the
    state on stdin, and the container sees exactly GPU 0."""
    other = str(sim.gpus[1].minor)
    bundle = bundle_factory(["sh", "-c", SCRIPT], ["NVIDIA_VISIBLE_DEVICES=0", f"OTHER={other}"])
    log = tmp_path / "state.log"
    logger = _write_logger(tmp_path / "logger", log)
    cid = f"ocihook-e2e-{uuid.uuid4().hex[:8]}"
    spec = _ctr_spec(bundle, sim.root, logger, f"{containerd.cgroup_parent}/{cid}")
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    fifos = tmp_path / "fifo"
    runc_root = tmp_path / "runc"
    args = ["run", "--rm", "--fifo-dir", str(fifos), "--runc-root", str(runc_root)]
    proc = containerd.ctr(*args, "--config", str(tmp_path / "spec.json"), cid)
    assert proc.returncode == 0, proc.stderr + (containerd.dir / "containerd.log").read_text()
    _check_gpu0(proc.stdout, sim)

    (entry,) = _read_log(log)
    state = _check_state(entry, cid)
    # the shim's bundle: containerd's state dir, namespace "default"; no annotations
    want = containerd.dir / "state/io.containerd.runtime.v2.task/default" / cid
    assert state["bundle"] == str(want), state
    assert "annotations" not in state or not state["annotations"], state

    assert containerd.ctr("containers", "ls", "-q").stdout.split() == []
    assert not _mounts_under(bundle)
