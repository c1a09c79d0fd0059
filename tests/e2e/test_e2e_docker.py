"""End to end with a real dockerd (Debian's docker.io, 20.10): ``docker run --gpus`` through
ocihook's ``nvidia-container-runtime-hook``, and ``docker run --runtime=ocihook`` after
``ocihook runtime configure --runtime docker``.

Each dockerd is private: its own data-root, exec-root, socket, pidfile and daemon.json
under the test's temporary directory, in a private mount namespace whose ``/run`` and
``/etc/docker`` are empty tmpfs mounts (dockerd writes ``/etc/docker/key.json`` and
``/run/docker/plugins``; a system containerd's socket in ``/run/containerd`` would be used
instead of dockerd's own). It is stopped by the pid in its pidfile, and the test checks
that none of its processes are left before removing its directories. The host driver is
the simulated NVIDIA host (real device nodes), named by a configuration file in
``$OCIHOOK_CONFIG`` of dockerd's environment, which dockerd passes to the hook and (via
containerd and its shim) to the wrapper runtime.

The container's view is the oracle: its ``/dev/nvidia*`` nodes (major:minor), the
libraries mounted into it, the ``NVIDIA_*`` variables dockerd set, and ENXIO (allowed by
the device cgroup, no driver) on a granted GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from support import need_root_and

from ocihook.sim import host as simhost

BIN = os.path.dirname(sys.executable)
HOOK_NAME = "nvidia-container-runtime-hook"
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
IMAGE = "ocihook-e2e-busybox:1"

SCRIPT = r"""
for n in /dev/nvidia*; do [ -e "$n" ] && echo "NODE $n $(stat -c '%t:%T' $n)"; done
grep " /usr/lib64/" /proc/self/mountinfo | while read -r a b c d mp opts rest; do echo "LIB ${mp#/usr/lib64/} $opts"; done
[ -e /usr/bin/nvidia-smi ] && echo "SMI yes"
echo "ENV devices=${NVIDIA_VISIBLE_DEVICES-unset} caps=${NVIDIA_DRIVER_CAPABILITIES-unset}"
for n in /dev/nvidia[0-9]*; do [ -e "$n" ] && echo "OPEN $n $(cat $n 2>&1 | head -n 1)"; done
exit 0
"""


def _docker_client() -> str | None:
    for c in ("/usr/bin/docker", shutil.which("docker")):
        if c and os.access(c, os.X_OK):
            return c
    return None


def _need_docker() -> str:
    need_root_and("dockerd", "unshare", "tar")
    client = _docker_client()
    if client is None:
        pytest.skip("end-to-end test needs the docker client (apt-get install docker.io)")
    return client


class Dockerd:
    """A private dockerd under ``work`` (see the module docstring)."""

    def __init__(self, work: str, client: str, env: dict[str, str]) -> None:
        self.work = work
        self.client = client
        self.env = env
        self.sock = os.path.join(work, "docker.sock")
        self.pidfile = os.path.join(work, "docker.pid")
        self.daemon_json = os.path.join(work, "daemon.json")
        self.log_path = os.path.join(work, "dockerd.log")
        self.proc: subprocess.Popen[bytes] | None = None
        if not os.path.exists(self.daemon_json):
            with open(self.daemon_json, "w") as f:
                f.write("{}\n")

    def start(self) -> None:
        """Start dockerd and wait (at most 60 s) until it answers."""
        args = [
            "dockerd",
            "--iptables=false",
            "--ip6tables=false",
            "--bridge=none",
            "--data-root",
            os.path.join(self.work, "data"),
            "--exec-root",
            os.path.join(self.work, "exec"),
            "-H",
            "unix://" + self.sock,
            "--pidfile",
            self.pidfile,
            "--config-file",
            self.daemon_json,
        ]
        inner = (
            "mount -t tmpfs ocihook-e2e /run && "
            "{ [ ! -d /etc/docker ] || mount -t tmpfs ocihook-e2e /etc/docker; } && "
            'exec "$@"'
        )
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh", *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"dockerd exited ({self.proc.returncode}):\n{self.log()}")
            if os.path.exists(self.sock) and self.docker("version").returncode == 0:
                return
            time.sleep(0.2)
        raise AssertionError(f"dockerd did not answer within 60 s:\n{self.log()}")

    def log(self) -> str:
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]

    def docker(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = {"PATH": BASE_PATH, "DOCKER_CONFIG": os.path.join(self.work, "client")}
        return subprocess.run(
            [self.client, "-H", "unix://" + self.sock, *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )

    def run(self, *args: str, cmd: str = SCRIPT) -> subprocess.CompletedProcess[str]:
        """``docker run --rm --network none ARGS IMAGE sh -c CMD``."""
        return self.docker("run", "--rm", "--network", "none", *args, IMAGE, "sh", "-c", cmd)

    def stop(self) -> None:
        """Stop dockerd (SIGTERM by its pidfile, SIGKILL after 30 s) and wait until none of
        the processes it started (containerd, shims) is left."""
        if self.proc is None:
            return
        pid = None
        try:
            with open(self.pidfile) as f:
                pid = int(f.read().strip())
        except (OSError, ValueError):
            pass
        if pid is not None and self.proc.poll() is None:
            os.kill(pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)
        self.proc = None
        deadline = time.monotonic() + 30
        while self.leftover_processes() and time.monotonic() < deadline:
            time.sleep(0.2)

    def restart(self) -> None:
        self.stop()
        self.start()

    def leftover_processes(self) -> list[str]:
        """Command lines of processes that mention the work directory (dockerd,
        containerd, shims, containers' runc)."""
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if self.work in cmdline:
                found.append(f"{pid}: {cmdline}")
        return found


@pytest.fixture(scope="module")
def docker_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The simulated host, an image, ocihook's hook installed by ``ocihook install
    docker-hook`` into a private bin directory, and a configuration naming the host."""
    client = _need_docker()
    from ocihook.sim.demo import find_busybox, make_busybox_bundle

    if find_busybox() is None:
        pytest.skip("needs busybox (apt-get install busybox-static)")
    work = str(tmp_path_factory.mktemp("docker"))
    sim = simhost.build(os.path.join(work, "host"))
    if not sim.dev_nodes:
        pytest.skip("the simulated host has no device nodes (not root)")
    bundle = make_busybox_bundle(os.path.join(work, "image"), ["sh"], [])
    bindir = os.path.join(work, "bin")
    r = subprocess.run(
        [os.path.join(BIN, "ocihook"), "install", "docker-hook", "--bin-dir", bindir],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    config = os.path.join(work, "config.toml")
    with open(config, "w") as f:
        f.write(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
    yield {
        "client": client,
        "work": work,
        "sim": sim,
        "rootfs": os.path.join(bundle, "rootfs"),
        "bindir": bindir,
        "config": config,
    }
    shutil.rmtree(work, ignore_errors=True)


def _start(
    docker_host: dict[str, Any],
    name: str,
    *,
    hook: bool = True,
    extra: dict[str, str] | None = None,
) -> Dockerd:
    work = os.path.join(docker_host["work"], name)
    os.makedirs(work)
    path = (docker_host["bindir"] + ":" if hook else "") + BASE_PATH
    env = {"PATH": path, "OCIHOOK_CONFIG": docker_host["config"], **(extra or {})}
    d = Dockerd(work, docker_host["client"], env)
    d.start()
    tar = subprocess.Popen(["tar", "-C", docker_host["rootfs"], "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    imp = subprocess.run(
        [d.client, "-H", "unix://" + d.sock, "import", "-", IMAGE],
        stdin=tar.stdout,
        capture_output=True,
        text=True,
        env={"PATH": BASE_PATH, "DOCKER_CONFIG": os.path.join(work, "client")},
        check=False,
    )
    tar.stdout.close()
    assert tar.wait() == 0 and imp.returncode == 0, imp.stderr
    return d


def _finish(d: Dockerd) -> None:
    d.stop()
    left = d.leftover_processes()
    with open("/proc/self/mountinfo") as f:
        mounted = [ln for ln in f if d.work in ln]
    shutil.rmtree(d.work, ignore_errors=True)
    assert not left, left
    assert not mounted, mounted


@pytest.fixture(scope="module")
def gpus_daemon(docker_host: dict[str, Any]) -> Iterator[Dockerd]:
    """dockerd with ocihook's hook on its PATH and the environment of a developer's shell
    besides: PYTHONPATH set is harmless to the -I script ``install docker-hook`` wrote."""
    extra = {"LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": "/nonexistent"}
    d = _start(docker_host, "gpus", extra=extra)
    yield d
    _finish(d)


def _view(out: str) -> dict[str, Any]:
    """What the container printed: ``nodes`` {path: "major:minor" hex}, ``libs`` {name:
    mount options}, ``smi``, ``env``, ``open`` {path: first line of cat}."""
    view: dict[str, Any] = {"nodes": {}, "libs": {}, "smi": False, "env": "", "open": {}}
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        if tag == "NODE":
            path, num = rest.split(" ")
            view["nodes"][path] = num
        elif tag == "LIB":
            name, opts = rest.split(" ")
            view["libs"][name] = opts
        elif tag == "SMI":
            view["smi"] = True
        elif tag == "ENV":
            view["env"] = rest
        elif tag == "OPEN":
            path, _, msg = rest.partition(" ")
            view["open"][path] = msg
    return view


def _gpu_nodes(view: dict[str, Any]) -> dict[str, str]:
    return {p: n for p, n in view["nodes"].items() if p[len("/dev/nvidia") :].isdigit()}


def _expect_gpus(view: dict[str, Any], sim: simhost.SimulatedHost, indices: list[int]) -> None:
    """The container has exactly the GPU nodes of ``indices`` (plus the control nodes),
    each allowed by its device cgroup (ENXIO: no driver behind the node), and the driver's
    libraries mounted read-only, nosuid, nodev."""
    minors = sorted(sim.gpus[i].minor for i in indices)
    assert _gpu_nodes(view) == {f"/dev/nvidia{m}": f"c3:{m:x}" for m in minors}, view
    assert view["nodes"]["/dev/nvidiactl"] == "c3:ff", view
    for path in _gpu_nodes(view):
        assert "No such device or address" in view["open"][path], view
    v = sim.driver_version
    assert f"libnvidia-ml.so.{v}" in view["libs"], view
    for name, opts in view["libs"].items():
        assert {"ro", "nosuid", "nodev"} <= set(opts.split(",")), (name, opts)


def _ok(r: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert r.returncode == 0, r.stdout + r.stderr
    return _view(r.stdout)


def test_installed_hook_is_isolated(docker_host: dict[str, Any]) -> None:
    """``ocihook install docker-hook`` wrote an executable script running this interpreter
    with -I; dockerd's --gpus needs nothing else."""
    path = os.path.join(docker_host["bindir"], HOOK_NAME)
    with open(path) as f:
        first = f.readline()
    # the interpreter of the ocihook command that wrote it: the installed commands exec the
    # python3 beside them (packaging/bin), this test runs as the venv's python
    beside = os.path.join(os.path.dirname(sys.executable), "python3")
    assert first in (f"#!{sys.executable} -I\n", f"#!{beside} -I\n")
    assert os.stat(path).st_mode & 0o777 == 0o755


def test_gpus_all(gpus_daemon: Dockerd, docker_host: dict[str, Any]) -> None:
    sim = docker_host["sim"]
    view = _ok(gpus_daemon.run("--gpus", "all"))
    assert view["env"] == "devices=all caps=unset"
    _expect_gpus(view, sim, list(range(len(sim.gpus))))


def test_gpus_count(gpus_daemon: Dockerd, docker_host: dict[str, Any]) -> None:
    view = _ok(gpus_daemon.run("--gpus", "2"))
    assert view["env"] == "devices=0,1 caps=unset"
    _expect_gpus(view, docker_host["sim"], [0, 1])


def test_gpus_device_indices(gpus_daemon: Dockerd, docker_host: dict[str, Any]) -> None:
    # GPU 3 has minor 2: the container gets /dev/nvidia0 and /dev/nvidia2
    view = _ok(gpus_daemon.run("--gpus", '"device=0,3"'))
    assert view["env"] == "devices=0,3 caps=unset"
    _expect_gpus(view, docker_host["sim"], [0, 3])
    assert set(_gpu_nodes(view)) == {"/dev/nvidia0", "/dev/nvidia2"}


def test_gpus_device_uuid(gpus_daemon: Dockerd, docker_host: dict[str, Any]) -> None:
    sim = docker_host["sim"]
    uuid = sim.gpus[6].uuid
    view = _ok(gpus_daemon.run("--gpus", f"device={uuid}"))
    assert view["env"] == f"devices={uuid} caps=unset"
    _expect_gpus(view, sim, [6])


def test_gpus_capabilities(gpus_daemon: Dockerd, docker_host: dict[str, Any]) -> None:
    sim = docker_host["sim"]
    view = _ok(gpus_daemon.run("--gpus", 'all,"capabilities=compute,utility"'))
    assert view["env"] == "devices=all caps=compute,utility"
    _expect_gpus(view, sim, list(range(len(sim.gpus))))
    v = sim.driver_version
    assert f"libcuda.so.{v}" in view["libs"], view
    graphics = [n for n in view["libs"] if "GL" in n or "EGL" in n or "vulkan" in n]
    assert graphics == [], view


def test_gpus_unknown_device_fails(gpus_daemon: Dockerd) -> None:
    """A GPU the host does not have: the hook fails, so does docker run, saying why."""
    r = gpus_daemon.run("--gpus", '"device=12"')
    assert r.returncode != 0
    assert "bad-request" in r.stderr, r.stderr


def test_no_gpus_unchanged(gpus_daemon: Dockerd) -> None:
    view = _ok(gpus_daemon.run())
    assert view["nodes"] == {} and view["libs"] == {} and not view["smi"], view
    assert view["env"] == "devices=unset caps=unset"


def test_without_the_hook_docker_refuses_gpus(docker_host: dict[str, Any]) -> None:
    """Without nvidia-container-runtime-hook on dockerd's PATH, --gpus is refused by
    dockerd itself (the entry point is what enables it)."""
    d = _start(docker_host, "nohook", hook=False)
    try:
        r = d.run("--gpus", "all")
        assert r.returncode != 0
        assert "could not select device driver" in r.stderr, r.stderr
    finally:
        _finish(d)


def test_poisoned_dockerd_environment_is_refused(docker_host: dict[str, Any]) -> None:
    """dockerd passes its whole environment to the hook: a loader variable there is
    refused (exit 9), with a message naming dockerd; the container does not start."""
    d = _start(docker_host, "poisoned", extra={"LD_LIBRARY_PATH": "/nonexistent-ocihook-e2e"})
    try:
        r = d.run("--gpus", "all")
        assert r.returncode != 0
        assert "poisoned-environment" in r.stderr and "LD_LIBRARY_PATH" in r.stderr, r.stderr
        assert "start dockerd without" in r.stderr, r.stderr
        assert _ok(d.run())["nodes"] == {}
    finally:
        _finish(d)


def _configure(d: Dockerd, *flags: str) -> dict[str, Any]:
    r = subprocess.run(
        [
            os.path.join(BIN, "ocihook"),
            "runtime",
            "configure",
            "--runtime",
            "docker",
            "--config",
            d.daemon_json,
            "--runtime-path",
            os.path.join(BIN, "ocihook-runtime"),
            *flags,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "restart dockerd" in r.stderr, r.stderr
    with open(d.daemon_json) as f:
        doc: dict[str, Any] = json.load(f)
    assert doc["runtimes"]["ocihook"]["path"] == os.path.join(BIN, "ocihook-runtime")
    return doc


def test_runtime_ocihook(docker_host: dict[str, Any]) -> None:
    """``ocihook runtime configure --runtime docker``, dockerd restarted: ``--runtime
    ocihook`` gives the GPUs of NVIDIA_VISIBLE_DEVICES; runc (the default) does not, and a
    container asking for nothing is unchanged under either."""
    sim = docker_host["sim"]
    d = _start(docker_host, "runtime", hook=False)
    try:
        doc = _configure(d)
        assert "default-runtime" not in doc
        d.restart()
        view = _ok(d.run("--runtime", "ocihook", "-e", "NVIDIA_VISIBLE_DEVICES=1,3"))
        _expect_gpus(view, sim, [1, 3])
        plain = _ok(d.run("-e", "NVIDIA_VISIBLE_DEVICES=1,3"))
        assert plain["nodes"] == {} and plain["libs"] == {}, plain
        nothing = _ok(d.run("--runtime", "ocihook"))
        assert nothing["nodes"] == {} and nothing["libs"] == {} and not nothing["smi"]
    finally:
        _finish(d)


def test_runtime_ocihook_as_default(docker_host: dict[str, Any]) -> None:
    """With ``--set-as-default`` every container goes through ocihook-runtime: one that
    asks gets its GPUs, one that asks for nothing is unchanged, and ``--gpus`` on top (the
    hook too) gives the GPUs once."""
    sim = docker_host["sim"]
    d = _start(docker_host, "default")
    try:
        doc = _configure(d, "--set-as-default")
        assert doc["default-runtime"] == "ocihook"
        d.restart()
        view = _ok(d.run("-e", "NVIDIA_VISIBLE_DEVICES=2"))
        _expect_gpus(view, sim, [2])
        nothing = _ok(d.run())
        assert nothing["nodes"] == {} and nothing["libs"] == {} and not nothing["smi"]
        both = _ok(d.run("--gpus", "device=5"))
        _expect_gpus(both, sim, [5])
        info = d.docker("info", "--format", "{{.DefaultRuntime}}")
        assert info.stdout.strip() == "ocihook", info.stderr
    finally:
        _finish(d)


DEBIAN_SCRIPT = r"""
L=/usr/lib/x86_64-linux-gnu
for n in /dev/nvidia*; do [ -e "$n" ] && echo "NODE $n $(stat -c '%t:%T' $n)"; done
echo "LINK $(readlink $L/libcuda.so.1)"
echo "MAGIC $(hexdump -n 4 -e '4/1 "%02x"' $L/libcuda.so.1)"
grep " $L/libcuda.so" /proc/self/mountinfo | while read -r a b c d mp opts rest; do echo "MOUNT $mp $opts"; done
[ -e /usr/bin/nvidia-smi ] && echo "SMI $(hexdump -n 4 -e '4/1 "%02x"' /usr/bin/nvidia-smi)"
for n in /dev/nvidia[0-9]*; do [ -e "$n" ] && echo "OPEN $n $(cat $n 2>&1 | head -n 1)"; done
exit 0
"""


@pytest.mark.realistic
def test_gpus_on_the_realistic_host(
    docker_host: dict[str, Any], realistic: dict[str, Any], tmp_path: Any
) -> None:
    """NVIDIA's 535.261.03 driver tree from Debian's packages as the host, a Debian-like
    image: ``--gpus '"device=1"',capabilities=compute,utility`` gives GPU 1 only, the real
    libcuda behind its soname link, and nvidia-smi."""
    from ocihook.sim.demo import make_busybox_bundle

    if not realistic.get("device_nodes", {}).get("created"):
        pytest.skip("the realistic host was built without /dev nodes (not root)")
    root, version = realistic["root"], realistic["driver_version"]
    config = os.path.join(str(tmp_path), "realistic.toml")
    with open(config, "w") as f:
        f.write(f'driver-root = "{root}"\ndev-root = "{root}"\n')
    image = make_busybox_bundle(str(tmp_path / "debian"), ["sh"], [], debian=True)
    host = {**docker_host, "config": config, "rootfs": os.path.join(image, "rootfs")}
    d = _start(host, "realistic")
    try:
        r = d.run("--gpus", '"device=1","capabilities=compute,utility"', cmd=DEBIAN_SCRIPT)
        assert r.returncode == 0, r.stdout + r.stderr
        lines = r.stdout.splitlines()

        def tagged(tag: str) -> list[str]:
            return [ln[len(tag) + 1 :] for ln in lines if ln.startswith(tag + " ")]

        gpu1 = next(g for g in realistic["gpus"] if g["index"] == 1)
        nodes = dict(n.split(" ") for n in tagged("NODE"))
        gpu_nodes = {p: v for p, v in nodes.items() if p[len("/dev/nvidia") :].isdigit()}
        assert gpu_nodes == {f"/dev/nvidia{gpu1['minor']}": f"c3:{gpu1['minor']:x}"}, r.stdout
        assert nodes["/dev/nvidiactl"] == "c3:ff"
        uvm = realistic["majors"]["nvidia-uvm"]
        assert nodes["/dev/nvidia-uvm"] == f"{uvm:x}:0"
        assert tagged("LINK") == [f"libcuda.so.{version}"]
        assert tagged("MAGIC") == ["7f454c46"]
        mounts = dict(m.split(" ") for m in tagged("MOUNT"))
        opts = mounts[f"/usr/lib/x86_64-linux-gnu/libcuda.so.{version}"]
        assert {"ro", "nosuid", "nodev"} <= set(opts.split(","))
        assert tagged("SMI") == ["7f454c46"]
        (opened,) = tagged("OPEN")
        assert "No such device or address" in opened
    finally:
        _finish(d)
