"""Shared helpers of the test suite: plain functions, classes and constants.

Test modules import these (``from support import ...``) and never import one another;
fixtures live in ``conftest.py``, which builds the engine fixtures from the generators here
(:func:`guard_host`, :func:`start_podman`, :func:`start_containerd`). ``tests/`` is on
``sys.path`` through ``pythonpath`` in pyproject.toml's ``[tool.pytest.ini_options]``.

Contents:

- paths: :data:`REPO`, :data:`TESTS`, :data:`DOUBLES`, :func:`realistic_dir`;
- the ``pynvml`` double: :func:`load_pynvml_double`, :func:`sim_nvml` (the simulated host
  as the double's description);
- skipping: :func:`need_root_and`;
- the packaged hook and ``ocihook edit``: :func:`packaged_hook`, :func:`register_hook`,
  :func:`edit_cli`, :func:`edit_with_cdi`, :func:`modules_after`;
- the wrapper runtime: :data:`WRAPPER`, :func:`make_executable`, :func:`config_bytes`;
- what a container shows: :data:`RUNC_SCRIPT` / :func:`check_runc_view` (runc, simulated
  or realistic host), :data:`ENGINE_SCRIPT` / :func:`check_gpu0` / :func:`check_no_gpu`
  (through podman and containerd), :func:`tagged`, :func:`with_mknod_cap`;
- hooks on every stage: :func:`stage_hook`, :func:`register_stage_hook`,
  :func:`run_runtime`; the stand-in driver procfs: :func:`fake_proc_hook`;
- container engines confined to temporary directories: :class:`Podman`,
  :class:`Containerd`, :func:`busybox_rootfs`, :data:`PRIVATE_RUN`;
- CDI specs: :data:`CDI_GPU_SPEC` (two GPUs), :data:`GOOD_CDI_YAML` (one device);
- rootless: :class:`RootlessUser`, :func:`start_rootless_user` (an unprivileged user with
  subuid/subgid ranges and a simulated host it can read, removed at the end).


- the fuzz campaign (tests/fuzz/): :func:`fuzz_settings`, :func:`fuzz_record`,
  :func:`time_limit`, :data:`FUZZ_COUNTS`, :data:`FUZZ_CORPUS`, the input strategies
  :func:`fuzz_mutated`, :func:`fuzz_grafted`, :func:`fuzz_json_bytes`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
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
from hypothesis import strategies as st

from ocihook.sim import host as simhost

# --- paths ------------------------------------------------------------------------------

#: The tests directory (this file's).
TESTS = os.path.dirname(os.path.abspath(__file__))
#: The repository's root directory.
REPO = os.path.dirname(TESTS)
#: Stand-ins for third-party modules (a ``pynvml`` double).
DOUBLES = os.path.join(TESTS, "doubles")


def load_pynvml_double() -> Any:
    """A fresh instance of the ``pynvml`` double (tests/doubles/pynvml.py), not installed;
    ``monkeypatch.setitem(sys.modules, "pynvml", module)`` makes ocihook use it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pynvml", os.path.join(DOUBLES, "pynvml.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sim_nvml(sim: simhost.SimulatedHost, cuda_version: int = 12040) -> dict[str, Any]:
    """The simulated host as the ``pynvml`` double's description: every GPU (brand tesla,
    compute capability 8.0, :attr:`~ocihook.sim.host.SimulatedGpu.memory_mib`), MIG
    enabled on the GPUs that have MIG devices (their slots, UUIDs and profiles, and the
    profile tables of :data:`ocihook.sim.host.MIG_PROFILES`), disabled on the others."""
    gi_profiles = {
        p.gi_profile: {"id": p.gi_profile_id, "slices": p.slices, "memory_mib": p.memory_mib}
        for p in simhost.MIG_PROFILES.values()
    }
    ci_profiles = {
        p.ci_profile: {"id": p.ci_profile_id, "slices": p.slices}
        for p in simhost.MIG_PROFILES.values()
    }
    gpus = []
    for g in sim.gpus:
        devices = {
            m.slot: {
                "gi": m.gi,
                "ci": m.ci,
                "uuid": m.uuid,
                "gi_profile_id": m.profile.gi_profile_id,
                "ci_profile_id": m.profile.ci_profile_id,
                "memory_mib": m.profile.memory_mib,
            }
            for m in g.mig_devices
        }
        gpus.append({
            "uuid": g.uuid, "minor": g.minor, "bus_id": g.bus_id, "name": g.model,
            "brand": 2, "compute_capability": (8, 0), "memory_mib": g.memory_mib,
            "mig": {
                "current": int(bool(devices)), "pending": int(bool(devices)), "max_devices": 7,
                "devices": devices, "gi_profiles": gi_profiles, "ci_profiles": ci_profiles,
            },
        })  # fmt: skip
    return {"driver_version": sim.driver_version, "cuda_version": cuda_version, "gpus": gpus}


def realistic_dir() -> str:
    """Where fixtures/realistic/build.py puts the realistic 535.261.03 host tree."""
    cache = os.environ.get("OCIHOOK_CACHE") or os.path.expanduser("~/.cache/ocihook")
    return os.path.join(cache, "realistic-535.261.03", "root")


def need_root_and(*tools: str) -> None:
    """Skip unless root and every tool is installed; the reason is printed by -ra."""
    if os.geteuid() != 0:
        pytest.skip("end-to-end test needs root")
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"end-to-end test needs {tool} (apt-get install {tool})")


# --- the packaged hook and ocihook edit ----------------------------------------------------


def packaged_hook(stage: str, root: str) -> dict[str, Any]:
    """ocihook's hook entry as packaging/config.json-hooks-snippet.json.in gives it, with
    ``@PYTHON@`` replaced by this interpreter, for ``stage``, reading the simulated host
    at ``root`` (the README's registration, so the tests exercise the documented one)."""
    with open(os.path.join(REPO, "packaging/config.json-hooks-snippet.json.in")) as f:
        snippet = json.loads(f.read().replace("@PYTHON@", sys.executable))
    hook: dict[str, Any] = snippet["hooks"]["prestart"][0]
    hook["args"] = [*hook["args"][:-1], stage, "--driver-root", root, "--dev-root", root]
    return hook


def edit_cli(bundle: str, root: str, *, check: bool = False) -> Any:
    """Run ``ocihook edit -b bundle`` against the host tree ``root`` (driver root and dev
    root); returns the ``subprocess.CompletedProcess`` (text)."""
    args = ["edit", "-b", bundle, "--driver-root", root, "--dev-root", root]
    return subprocess.run(
        [sys.executable, "-m", "ocihook", *args],
        capture_output=True,
        text=True,
        check=check,
    )


def edit_with_cdi(bundle: str, spec_dir: Any, work: Any) -> str:
    """``ocihook edit -b bundle`` with a configuration file (written in ``work``) whose
    ``cdi-spec-dirs`` is ``spec_dir``; asserts it wrote ``config.json`` and returns its
    stderr."""
    cfg = os.path.join(str(work), "config.toml")
    with open(cfg, "w") as f:
        f.write(f'cdi-spec-dirs = ["{spec_dir}"]\n')
    r = subprocess.run(
        [sys.executable, "-m", "ocihook", "edit", "--config", cfg, "-b", str(bundle)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0 and "written" in r.stderr, r.stderr
    return r.stderr


def register_hook(bundle: str, root: str, stage: str = "prestart") -> None:
    """Add :func:`packaged_hook` to the bundle's ``config.json`` under ``stage``."""
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    doc.setdefault("hooks", {}).setdefault(stage, []).append(packaged_hook(stage, root))
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


def modules_after(code: str) -> set[str]:
    """The modules a fresh ``python -I`` has loaded after running ``code`` (for the
    import-cost tests: the start path must not load heavy modules)."""
    out = subprocess.run(
        [sys.executable, "-I", "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


# --- the wrapper runtime -------------------------------------------------------------------

#: The ``ocihook-runtime`` console script of this environment.
WRAPPER = os.path.join(os.path.dirname(sys.executable), "ocihook-runtime")


def make_executable(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> str:
    """Write ``text`` to ``path`` (parents made), mode 0755; returns the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def config_bytes(bundle: str) -> bytes:
    """The bytes of the bundle's ``config.json``."""
    with open(os.path.join(bundle, "config.json"), "rb") as f:
        return f.read()


# --- what a container shows ----------------------------------------------------------------


def tagged(out: str, tag: str) -> list[str]:
    """The rest of each line of ``out`` that starts with ``tag`` and a space."""
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


def with_mknod_cap(bundle: str) -> None:
    """Give the bundle's process CAP_MKNOD (bounding, effective, permitted)."""
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    for key in ("bounding", "effective", "permitted"):
        doc["process"]["capabilities"][key].append("CAP_MKNOD")
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


#: What a runc container prints (environment: LIBDIR, OTHER; needs CAP_MKNOD): its NVIDIA
#: nodes, the soname links, the ELF magic read through libcuda.so.1, the mount options of
#: the driver files, what opening GPU 0 and a node it made for another GPU give, and what
#: writing a driver file gives. Read by :func:`check_runc_view`.
RUNC_SCRIPT = r"""
for n in /dev/nvidia*; do echo "NODE $n $(stat -c '%F %t:%T' $n)"; done
echo "LINK $(readlink $LIBDIR/libcuda.so.1)"
echo "LINKDEV $(readlink $LIBDIR/libcuda.so)"
echo "MAGIC $(hexdump -n 4 -e '4/1 "%02x"' $LIBDIR/libcuda.so.1)"
grep " $LIBDIR/" /proc/self/mountinfo | while read -r a b c d mp opts rest; do echo "MOUNT $mp $opts"; done
echo "OPEN0 $(cat /dev/nvidia0 2>&1 | head -n 1)"
busybox mknod /dev/nvidia$OTHER c 195 $OTHER && echo "OPENOTHER $(cat /dev/nvidia$OTHER 2>&1 | head -n 1)"
echo "WRITE $(echo x 2>&1 > $LIBDIR/libcuda.so.1)"
"""


def check_runc_view(
    out: str, *, version: str, libdir: str, minors: list[int], uvm_major: int
) -> None:
    """Assert :data:`RUNC_SCRIPT`'s output: exactly the GPUs ``minors`` and the control
    nodes, libcuda linked and readable, driver files ro,nosuid,nodev, ENXIO on GPU 0,
    EPERM on the other GPU's node, writes refused."""
    nodes = dict(line.split(" ", 1) for line in tagged(out, "NODE"))
    want = {f"/dev/nvidia{m}": f"character special file c3:{m:x}" for m in minors}
    want["/dev/nvidiactl"] = "character special file c3:ff"
    want["/dev/nvidia-uvm"] = f"character special file {uvm_major:x}:0"
    want["/dev/nvidia-uvm-tools"] = f"character special file {uvm_major:x}:1"
    assert nodes == want, out
    assert tagged(out, "LINK") == [f"libcuda.so.{version}"]
    assert tagged(out, "LINKDEV") == ["libcuda.so.1"]
    assert tagged(out, "MAGIC") == ["7f454c46"]
    mounts = dict(line.split(" ", 1) for line in tagged(out, "MOUNT"))
    assert f"{libdir}/libcuda.so.{version}" in mounts, out
    for mp, opts in mounts.items():
        flags = opts.split(",")
        assert {"ro", "nosuid", "nodev"} <= set(flags), (mp, opts)
    assert tagged(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such device or address"]
    other = tagged(out, "OPENOTHER")
    assert len(other) == 1 and "Operation not permitted" in other[0], out
    assert "Read-only file system" in tagged(out, "WRITE")[0]


#: What a container started by podman or containerd prints: its NVIDIA nodes, the soname
#: link, the ELF magic read through it, what opening GPU 0 gives, and (with CAP_MKNOD, when
#: $OTHER is set) what opening a node it made itself for a GPU it did not ask for gives.
ENGINE_SCRIPT = r"""
for n in /dev/nvidia*; do [ -e "$n" ] && echo "NODE $n $(stat -c '%F %t:%T' $n)"; done
echo "LINK $(readlink /usr/lib64/libcuda.so.1)"
echo "MAGIC $(hexdump -n 4 -e '4/1 "%02x"' /usr/lib64/libcuda.so.1 2>/dev/null)"
echo "OPEN0 $(cat /dev/nvidia0 2>&1 | head -n 1)"
if [ -n "$OTHER" ] && busybox mknod /dev/nvidia$OTHER c 195 $OTHER; then
  echo "OPENOTHER $(cat /dev/nvidia$OTHER 2>&1 | head -n 1)"
fi
echo DONE
"""


def check_gpu0(out: str, sim: simhost.SimulatedHost) -> None:
    """The container (:data:`ENGINE_SCRIPT`) sees exactly GPU 0 of the simulated host."""
    assert "DONE" in out.splitlines(), out
    nodes = dict(line.split(" ", 1) for line in tagged(out, "NODE"))
    assert nodes == {
        "/dev/nvidia0": "character special file c3:0",
        "/dev/nvidiactl": "character special file c3:ff",
        "/dev/nvidia-uvm": f"character special file {simhost.UVM_MAJOR:x}:0",
        "/dev/nvidia-uvm-tools": f"character special file {simhost.UVM_MAJOR:x}:1",
    }, out
    assert tagged(out, "LINK") == [f"libcuda.so.{sim.driver_version}"], out
    assert tagged(out, "MAGIC") == ["7f454c46"], out
    assert tagged(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such device or address"]
    other = tagged(out, "OPENOTHER")
    assert len(other) == 1 and "Operation not permitted" in other[0], out


def check_no_gpu(out: str) -> None:
    """The container (:data:`ENGINE_SCRIPT`) has no NVIDIA node and no driver library."""
    assert "DONE" in out.splitlines(), out
    assert tagged(out, "NODE") == [], out
    assert tagged(out, "LINK") == [""], out
    assert tagged(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such file or directory"]


# --- hooks on every stage ------------------------------------------------------------------


def stage_hook(stage: str, root: str, env: list[str] | None = None) -> dict[str, Any]:
    """:func:`packaged_hook` for ``stage``, with the hook's ``env`` set when given."""
    hook = packaged_hook(stage, root)
    if env is not None:
        hook["env"] = env
    return hook


def register_stage_hook(
    bundle: str, stage: str, hook: dict[str, Any], readonly: bool = False
) -> None:
    """Make ``hook`` the bundle's only hook (at ``stage``); ``root.readonly`` set."""
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["hooks"] = {stage: [hook]}
    doc["root"]["readonly"] = readonly
    cfg.write_text(json.dumps(doc))


def run_runtime(
    runtime: str, bundle: str, state: str, cid: str
) -> subprocess.CompletedProcess[str]:
    """``runc run`` the bundle, or ``crun run`` in a private mount namespace without the
    cgroup2 mount (crun refuses the hybrid layout here; testbed.md)."""
    if runtime == "runc":
        cmd = ["runc", "--root", state, "run", "-b", bundle, cid]
    else:
        cmd = [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"umount /sys/fs/cgroup/unified 2>/dev/null; "
            f"exec crun --root {state} run -b {bundle} {cid}",
        ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


FAKE_DRIVER_PROC = """
import json, subprocess, sys
state = json.load(sys.stdin)
d = state["bundle"] + "/rootfs/proc/driver"
subprocess.run(["nsenter", "-t", str(state["pid"]), "-m", "sh", "-c",
    f"mount -t tmpfs tmpfs {d} && mkdir -p {d}/nvidia/gpus/stale && "
    f"echo 'ModifyDeviceFiles: 1' > {d}/nvidia/params"], check=True)
"""


def fake_proc_hook(bundle: str, tmp_path: Any) -> dict[str, Any]:
    """A prestart hook of the test's, run before ocihook's, that stands in for the kernel
    driver: it puts a /proc/driver/nvidia (with a GPU directory the container must not
    see) into the container's procfs, as the real driver would show."""
    script = tmp_path / "fake_driver_proc.py"
    script.write_text(FAKE_DRIVER_PROC)
    return {"path": sys.executable, "args": [sys.executable, "-I", str(script)]}


# --- container engines in temporary directories --------------------------------------------


def mounts_under(*paths: str) -> list[str]:
    """The lines of this process's mountinfo that name any of ``paths``."""
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
    shims = _wait_gone(lambda: _pids_with_arg(address), 5)
    for pid in shims:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    _wait_gone(lambda: _pids_with_arg(address), 5)
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
    left = mounts_under(str(d))
    for line in left:
        subprocess.run(["umount", "-l", line.split()[4]], check=False)
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


# --- CDI -----------------------------------------------------------------------------------

#: A valid CDI spec in YAML (cdiVersion 0.3.0, kind example.com/gpu): one device
#: ``gpu0`` whose edits set ``A=1``; tests edit the text into the case they need.
GOOD_CDI_YAML = """\
cdiVersion: 0.3.0
kind: example.com/gpu
devices:
- name: gpu0
  containerEdits:
    env: [A=1]
"""

#: A CDI spec (kind nvidia.com/gpu) for GPUs "0" and "1": their nodes, the control node,
#: libcuda and ``NVIDIA_CDI=1`` for every device. Explicit type/major/minor: injection
#: never needs a host device node for these.
CDI_GPU_SPEC = {
    "cdiVersion": "0.5.0",
    "kind": "nvidia.com/gpu",
    "containerEdits": {
        "env": ["NVIDIA_CDI=1"],
        "deviceNodes": [{"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}],
        "mounts": [
            {
                "hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03",
                "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.535.261.03",
                "options": ["ro", "nosuid", "nodev", "bind"],
            }
        ],
    },
    "devices": [
        {
            "name": str(i),
            "containerEdits": {
                "deviceNodes": [{"path": f"/dev/nvidia{i}", "type": "c", "major": 195, "minor": i}]
            },
        }
        for i in range(2)
    ],
}


# --- rootless: an unprivileged user of the test's own --------------------------------------


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
        _wait_gone(lambda: _user_pids(self.uid), 5)

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
            left = _wait_gone(lambda: _user_pids(uid), 5)
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            still = _wait_gone(lambda: _user_pids(uid), 5)
            subprocess.run(["userdel", name], check=False, capture_output=True)
        mounts = mounts_under(top)
        for line in mounts:
            subprocess.run(["umount", "-l", line.split()[4]], check=False)
        shutil.rmtree(top, ignore_errors=True)
        if made:
            assert not still, f"processes of {name} still running: {still}"
        assert not mounts, f"mounts left under {top}: {mounts}"


# --- Kubernetes: the kubelet's side of the device plugin API --------------------------------


class FakeKubelet:
    """What kubelet's device manager does with a device plugin, in a test: it serves
    ``v1beta1.Registration`` on ``<plugin_dir>/kubelet.sock``, and for every plugin that
    registers it connects to the plugin's endpoint, reads ``GetDevicePluginOptions`` and
    keeps one ``ListAndWatch`` stream open (the latest list per resource in
    :attr:`devices`). :meth:`allocate` / :meth:`preferred` call the plugin as the device
    manager does at pod admission. :meth:`restart` re-creates ``kubelet.sock`` and removes
    the plugins' sockets, as a restarted kubelet does. Needs grpcio (``ocihook[k8s]``)."""

    def __init__(self, plugin_dir: str) -> None:
        import threading

        self.plugin_dir = plugin_dir
        self.registrations: list[Any] = []
        self.devices: dict[str, dict[str, str]] = {}
        self.updates: dict[str, int] = {}
        self.numa: dict[str, dict[str, list[int]]] = {}
        self.endpoints: dict[str, str] = {}
        self._cond = threading.Condition()
        self._channels: list[Any] = []
        self._server: Any = None
        self.start()

    def start(self) -> None:
        from ocihook.k8s import rpc

        self._server = rpc.unix_server(os.path.join(self.plugin_dir, "kubelet.sock"))
        rpc.add_service(self._server, rpc.REGISTRATION, self)

    def Register(self, request: Any, context: Any) -> Any:
        import threading

        from ocihook.k8s import rpc
        from ocihook.k8s.api import deviceplugin_pb2 as dp

        if request.version != "v1beta1":
            context.abort(__import__("grpc").StatusCode.INVALID_ARGUMENT, "bad version")
        with self._cond:
            self.registrations.append(request)
            self.endpoints[request.resource_name] = request.endpoint
        channel = rpc.unix_channel(os.path.join(self.plugin_dir, request.endpoint))
        self._channels.append(channel)
        plugin = rpc.client(channel, rpc.DEVICE_PLUGIN)
        threading.Thread(
            target=self._watch, args=(request.resource_name, plugin), daemon=True
        ).start()
        return dp.Empty()

    def _watch(self, resource: str, plugin: Any) -> None:
        from ocihook.k8s.api import deviceplugin_pb2 as dp

        try:
            for response in plugin.ListAndWatch(dp.Empty(), wait_for_ready=True, timeout=600):
                with self._cond:
                    self.devices[resource] = {d.ID: d.health for d in response.devices}
                    self.numa[resource] = {
                        d.ID: [n.ID for n in d.topology.nodes] for d in response.devices
                    }
                    self.updates[resource] = self.updates.get(resource, 0) + 1
                    self._cond.notify_all()
        except Exception:  # the stream ends when the plugin or this kubelet stops
            return

    def wait(self, predicate: Callable[[], bool], timeout: float = 20) -> None:
        """Wait until ``predicate()`` holds (evaluated under the lock); fail otherwise."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"kubelet harness: condition not met; devices {self.devices}")
                self._cond.wait(left)

    def plugin(self, resource: str) -> Any:
        """A client of the plugin registered for ``resource``."""
        from ocihook.k8s import rpc

        channel = rpc.unix_channel(os.path.join(self.plugin_dir, self.endpoints[resource]))
        self._channels.append(channel)
        return rpc.client(channel, rpc.DEVICE_PLUGIN)

    def healthy(self, resource: str) -> list[str]:
        with self._cond:
            return [i for i, h in self.devices.get(resource, {}).items() if h == "Healthy"]

    def allocate(self, resource: str, *containers: list[str]) -> Any:
        """``Allocate`` for containers asking for the device ids given (one list each)."""
        from ocihook.k8s.api import deviceplugin_pb2 as dp

        request = dp.AllocateRequest()
        for ids in containers:
            request.container_requests.add(devices_ids=ids)
        return self.plugin(resource).Allocate(request, timeout=10)

    def preferred(
        self, resource: str, available: list[str], must: list[str], size: int
    ) -> list[str]:
        from ocihook.k8s.api import deviceplugin_pb2 as dp

        request = dp.PreferredAllocationRequest()
        request.container_requests.add(
            available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
        )
        response = self.plugin(resource).GetPreferredAllocation(request, timeout=10)
        return list(response.container_responses[0].deviceIDs)

    def restart(self) -> None:
        """Stop, remove every socket in the plugin directory (as kubelet does on start) and
        serve a new ``kubelet.sock``."""
        self.stop()
        for name in os.listdir(self.plugin_dir):
            if name.endswith(".sock"):
                os.unlink(os.path.join(self.plugin_dir, name))
        with self._cond:
            self.devices.clear()
        self.start()

    def stop(self) -> None:
        for channel in self._channels:
            channel.close()
        self._channels.clear()
        if self._server is not None:
            self._server.stop(grace=0).wait()
            self._server = None


# --- Kubernetes: containerd with CRI and CDI from Debian's .debs --------------------------

#: containerd versions the CRI tests run, by Debian suite (issue 16): trixie's 1.7 and
#: sid's 2.x (bookworm's 1.6.20 ignores CDI devices in a CRI request).
CONTAINERD_SUITES = {"trixie": "1.7", "sid": "2."}


def _debian_uri() -> tuple[str, str | None]:
    """(URI, Signed-By) of the machine's own Debian archive entry (deb822 or one-line)."""
    import re

    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.is_file():
        for stanza in re.split(r"\n\s*\n", deb822.read_text()):
            fields = {}
            for line in stanza.splitlines():
                if line.strip() and not line.startswith("#") and ":" in line:
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.strip()
            suites = fields.get("suites", "").split()
            if "deb" in fields.get("types", "").split() and not any(
                "security" in s for s in suites
            ):
                uris = fields.get("uris", "").split()
                if uris:
                    return uris[0], fields.get("signed-by")
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            m = re.match(r"\s*deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s", line)
            if m and "security" not in m.group(3):
                return m.group(2), None
    raise FileNotFoundError("no Debian archive entry in /etc/apt")


def containerd_from_deb(suite: str) -> str:
    """The ``usr/bin`` directory of Debian ``suite``'s containerd, downloaded once with a
    private apt state (a sources file with the machine's own archive URI and ``suite``)
    and unpacked with ``dpkg -x`` under ``~/.cache/ocihook/containerd-<suite>``; skips the
    test, saying why, when it cannot be had."""
    cache = Path(os.path.expanduser("~/.cache/ocihook")) / f"containerd-{suite}"
    bindir = cache / "root" / "usr" / "bin"
    if (bindir / "containerd").is_file():
        return str(bindir)
    for tool in ("apt-get", "dpkg"):
        if shutil.which(tool) is None:
            pytest.skip(f"containerd {suite}: needs {tool} (a Debian-like machine)")
    try:
        uri, signed_by = _debian_uri()
    except FileNotFoundError as e:
        pytest.skip(f"containerd {suite}: {e}")
    apt = cache / "apt"
    for d in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial", cache / "debs"):
        d.mkdir(parents=True, exist_ok=True)
    opt = f"[signed-by={signed_by}] " if signed_by else ""
    (apt / "sources.list").write_text(f"deb {opt}{uri} {suite} main\n")
    options = [
        "-o", f"Dir::Etc::SourceList={apt / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", "Dir::Etc::Preferences=/dev/null",
        "-o", "Dir::Etc::PreferencesParts=/dev/null",
        "-o", f"Dir::State::Lists={apt / 'lists'}",
        "-o", f"Dir::Cache={apt / 'cache'}",
        "-o", "Dir::State::status=/dev/null",
        "-o", "APT::Sandbox::User=root",
        "-o", "Acquire::Retries=2",
    ]  # fmt: skip
    for cmd, cwd in ((["update"], None), (["download", "containerd"], cache / "debs")):
        try:
            r = subprocess.run(
                ["apt-get", "-q", *options, *cmd], cwd=cwd, capture_output=True, text=True,
                timeout=900,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.skip(f"containerd {suite}: apt-get {cmd[0]} timed out")
        if r.returncode != 0:
            pytest.skip(f"containerd {suite}: apt-get {cmd[0]} failed: {r.stderr.strip()[-300:]}")
    debs = sorted((cache / "debs").glob("containerd_*.deb"))
    if not debs:
        pytest.skip(f"containerd {suite}: apt-get download gave no containerd .deb")
    tmp = cache / "root.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["dpkg", "-x", str(debs[-1]), str(tmp)], check=True, timeout=300)
    shutil.rmtree(cache / "root", ignore_errors=True)
    tmp.rename(cache / "root")
    return str(bindir)


#: The parts of the CRI API (runtime.v1, kubelet <-> container runtime) the CRI tests use:
#: our own declaration, with kubelet's package, service and message names and field numbers
#: (k8s.io/cri-api runtime/v1 api.proto); fields the tests do not use are left out (a
#: protobuf reader skips them). Compiled at test time with grpcio-tools.
CRI_PROTO = """\
syntax = "proto3";
package runtime.v1;

service RuntimeService {
  rpc Version(VersionRequest) returns (VersionResponse) {}
  rpc RunPodSandbox(RunPodSandboxRequest) returns (RunPodSandboxResponse) {}
  rpc StopPodSandbox(StopPodSandboxRequest) returns (StopPodSandboxResponse) {}
  rpc RemovePodSandbox(RemovePodSandboxRequest) returns (RemovePodSandboxResponse) {}
  rpc CreateContainer(CreateContainerRequest) returns (CreateContainerResponse) {}
  rpc StartContainer(StartContainerRequest) returns (StartContainerResponse) {}
  rpc RemoveContainer(RemoveContainerRequest) returns (RemoveContainerResponse) {}
  rpc ContainerStatus(ContainerStatusRequest) returns (ContainerStatusResponse) {}
}

message VersionRequest { string version = 1; }
message VersionResponse {
  string version = 1; string runtime_name = 2; string runtime_version = 3;
  string runtime_api_version = 4;
}
enum NamespaceMode { POD = 0; CONTAINER = 1; NODE = 2; TARGET = 3; }
message NamespaceOption { NamespaceMode network = 1; NamespaceMode pid = 2; NamespaceMode ipc = 3; }
message LinuxSandboxSecurityContext { NamespaceOption namespace_options = 1; }
message LinuxPodSandboxConfig {
  string cgroup_parent = 1; LinuxSandboxSecurityContext security_context = 2;
}
message PodSandboxMetadata { string name = 1; string uid = 2; string namespace = 3; uint32 attempt = 4; }
message PodSandboxConfig {
  PodSandboxMetadata metadata = 1; string hostname = 2; string log_directory = 3;
  map<string, string> labels = 6; map<string, string> annotations = 7;
  LinuxPodSandboxConfig linux = 8;
}
message RunPodSandboxRequest { PodSandboxConfig config = 1; string runtime_handler = 2; }
message RunPodSandboxResponse { string pod_sandbox_id = 1; }
message StopPodSandboxRequest { string pod_sandbox_id = 1; }
message StopPodSandboxResponse {}
message RemovePodSandboxRequest { string pod_sandbox_id = 1; }
message RemovePodSandboxResponse {}
message ImageSpec { string image = 1; }
message KeyValue { string key = 1; string value = 2; }
message Mount { string container_path = 1; string host_path = 2; bool readonly = 3; }
message Device { string container_path = 1; string host_path = 2; string permissions = 3; }
message CDIDevice { string name = 1; }
message ContainerMetadata { string name = 1; uint32 attempt = 2; }
message LinuxContainerSecurityContext { NamespaceOption namespace_options = 3; }
message LinuxContainerConfig { LinuxContainerSecurityContext security_context = 2; }
message ContainerConfig {
  ContainerMetadata metadata = 1; ImageSpec image = 2; repeated string command = 3;
  repeated string args = 4; repeated KeyValue envs = 6; repeated Mount mounts = 7;
  repeated Device devices = 8; map<string, string> annotations = 10; string log_path = 11;
  LinuxContainerConfig linux = 15; repeated CDIDevice CDI_devices = 17;
}
message CreateContainerRequest {
  string pod_sandbox_id = 1; ContainerConfig config = 2; PodSandboxConfig sandbox_config = 3;
}
message CreateContainerResponse { string container_id = 1; }
message StartContainerRequest { string container_id = 1; }
message StartContainerResponse {}
message RemoveContainerRequest { string container_id = 1; }
message RemoveContainerResponse {}
enum ContainerState {
  CONTAINER_CREATED = 0; CONTAINER_RUNNING = 1; CONTAINER_EXITED = 2; CONTAINER_UNKNOWN = 3;
}
message ContainerStatusRequest { string container_id = 1; bool verbose = 2; }
message ContainerStatus {
  string id = 1; ContainerState state = 3; int32 exit_code = 7; string reason = 10;
  string message = 11;
}
message ContainerStatusResponse { ContainerStatus status = 1; }
"""


def cri_messages(work: Path) -> Any:
    """The CRI message module compiled from :data:`CRI_PROTO` into ``work`` (skips without
    grpcio-tools)."""
    import importlib.util

    try:
        from grpc_tools import protoc
    except ImportError:
        pytest.skip(
            "the CRI tests compile their CRI proto with grpcio-tools: pip install grpcio-tools"
        )
    work.mkdir(parents=True, exist_ok=True)
    (work / "ocihook_test_cri.proto").write_text(CRI_PROTO)
    if (
        protoc.main(
            ["protoc", f"-I{work}", f"--python_out={work}", str(work / "ocihook_test_cri.proto")]
        )
        != 0
    ):
        pytest.fail("protoc could not compile the CRI proto")
    spec = importlib.util.spec_from_file_location(
        "ocihook_test_cri_pb2", work / "ocihook_test_cri_pb2.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cri_client(address: str, messages: Any) -> Any:
    """A ``runtime.v1.RuntimeService`` client on the unix socket ``address``."""
    from ocihook.k8s import rpc

    m = messages
    names = {
        "Version": (m.VersionRequest, m.VersionResponse),
        "RunPodSandbox": (m.RunPodSandboxRequest, m.RunPodSandboxResponse),
        "StopPodSandbox": (m.StopPodSandboxRequest, m.StopPodSandboxResponse),
        "RemovePodSandbox": (m.RemovePodSandboxRequest, m.RemovePodSandboxResponse),
        "CreateContainer": (m.CreateContainerRequest, m.CreateContainerResponse),
        "StartContainer": (m.StartContainerRequest, m.StartContainerResponse),
        "RemoveContainer": (m.RemoveContainerRequest, m.RemoveContainerResponse),
        "ContainerStatus": (m.ContainerStatusRequest, m.ContainerStatusResponse),
    }
    service = rpc.Service(
        "runtime.v1.RuntimeService", {k: rpc.Method(a, b) for k, (a, b) in names.items()}
    )
    return rpc.client(rpc.unix_channel(address), service)


def busybox_oci_archive(path: Path, name: str, entrypoint: list[str]) -> None:
    """Write an OCI image archive (``ctr images import`` reads it) named ``name``: one layer
    with the host's static busybox as ``/bin/busybox`` and its applets ``sh``, ``ls``,
    ``cat``, ``env``, ``sleep``, ``readlink``, ``head``; ``entrypoint`` as its Entrypoint."""
    import gzip
    import hashlib
    import io
    import tarfile

    from ocihook.sim.demo import find_busybox

    busybox = find_busybox()
    if busybox is None:
        pytest.skip("needs busybox (apt-get install busybox-static)")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for d in ("bin", "dev", "proc", "sys", "etc", "tmp", "out"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(busybox, "bin/busybox")
        for applet in ("sh", "ls", "cat", "env", "sleep", "readlink", "head", "grep"):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    layer_tar = raw.getvalue()
    layer = gzip.compress(layer_tar, mtime=0)
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }).encode()  # fmt: skip
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(layer)}],
    }).encode()  # fmt: skip
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", **blob(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
        }],
    }  # fmt: skip
    with tarfile.open(path, "w") as tar:

        def add(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add(f"blobs/sha256/{digest.split(':')[1]}", data)


CRI_CONTAINERD_CONFIG = """\
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["{cdi}"]
  restrict_oom_score_adj = true
  stream_server_port = "0"
  sandbox_image = "{pause}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      # runc's state here, not in /run/containerd/runc/k8s.io (left behind on the host)
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"

# containerd 2.x imports through its transfer service, which unpacks only for the
# platforms and snapshotters listed here
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/amd64"
  snapshotter = "native"
"""

#: The images the CRI tests import: the pod sandbox ("pause") and the workload.
PAUSE_IMAGE = "docker.io/ocihook/pause:1"
BUSYBOX_IMAGE = "docker.io/ocihook/busybox:1"


@dataclass
class CriContainerd:
    """A containerd with CRI and CDI of :func:`start_cri_containerd`."""

    address: str
    dir: Path
    cdi_dir: Path
    cgroup_parent: str
    version: str
    client: Any
    messages: Any


def start_cri_containerd(d: Path, suite: str, host_guard: str) -> Iterator[CriContainerd]:
    """containerd of Debian ``suite`` (:func:`containerd_from_deb`) with the CRI plugin and
    CDI (:data:`CRI_CONTAINERD_CONFIG`: private root, state, sockets and CDI spec dir,
    native snapshotter, no CNI: pods use the host network) and the two images of
    :func:`busybox_oci_archive` imported; stopped at the end with its shims."""
    need_root_and("runc")
    bindir = containerd_from_deb(suite)
    cdi = d / "cdi"
    cdi.mkdir(parents=True)
    (d / "config.toml").write_text(CRI_CONTAINERD_CONFIG.format(d=d, cdi=cdi, pause=PAUSE_IMAGE))
    address = str(d / "containerd.sock")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    with open(d / "containerd.log", "wb") as log:
        proc = subprocess.Popen(
            [os.path.join(bindir, "containerd"), "--config", str(d / "config.toml")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )  # fmt: skip
    ctr = [os.path.join(bindir, "ctr"), "--address", address, "-n", "k8s.io"]
    try:
        messages = cri_messages(d / "cri")
        client = cri_client(address, messages)
        deadline = time.monotonic() + 30
        version = None
        while version is None:
            if proc.poll() is not None:
                pytest.fail(f"containerd exited: {(d / 'containerd.log').read_text()[-3000:]}")
            try:
                version = client.Version(messages.VersionRequest(version="v1"), timeout=2)
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"containerd CRI did not start: {(d / 'containerd.log').read_text()[-3000:]}"
                    )
                time.sleep(0.2)
        for image, entry in (
            (PAUSE_IMAGE, ["/bin/sleep", "2147483647"]),
            (BUSYBOX_IMAGE, ["/bin/sh"]),
        ):
            archive = d / (image.rsplit("/", 1)[1].replace(":", "_") + ".tar")
            busybox_oci_archive(archive, image, entry)
            r = subprocess.run(
                [*ctr, "images", "import", "--snapshotter", "native", str(archive)],
                capture_output=True, text=True, timeout=120, env=env,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
        yield CriContainerd(
            address, d, cdi, f"/{host_guard}", version.runtime_version, client, messages
        )
    finally:
        stop_containerd(proc, address, 15)
        for line in mounts_under(str(d)):
            subprocess.run(["umount", "-l", line.split()[4]], check=False)


# --- the fuzz campaign (tests/fuzz/) ----------------------------------------------------------

#: ``OCIHOOK_FUZZ_DEEP=1``: the deep campaign (example counts times
#: ``OCIHOOK_FUZZ_FACTOR``, default 20; seed ``OCIHOOK_FUZZ_SEED`` instead of derandomised).
FUZZ_DEEP = os.environ.get("OCIHOOK_FUZZ_DEEP") == "1"
#: Where each target's kept inputs (crash regressions and seeds) are: ``<target>/<name>``.
FUZZ_CORPUS = os.path.join(TESTS, "fuzz", "corpus")
#: Target -> executions in this session (printed at the end, see conftest.py).
FUZZ_COUNTS: dict[str, int] = {}


def fuzz_settings(examples: int) -> Callable[[Any], Any]:
    """Hypothesis settings for a fuzz target: ``examples`` inputs (the CI budget), no
    deadline (no timed tests; hangs are caught by :func:`time_limit`), no example
    database (a run depends on the seed only), derandomised unless deep."""
    from hypothesis import HealthCheck, seed, settings

    factor = int(os.environ.get("OCIHOOK_FUZZ_FACTOR", "20")) if FUZZ_DEEP else 1
    conf = settings(
        max_examples=examples * factor,
        deadline=None,
        database=None,
        derandomize=not FUZZ_DEEP,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )

    def apply(test: Any) -> Any:
        test = conf(test)
        if FUZZ_DEEP:
            test = seed(int(os.environ.get("OCIHOOK_FUZZ_SEED", "0")))(test)
        return test

    return apply


def fuzz_record(target: str, data: bytes, error: BaseException | None = None) -> None:
    """Count one execution of ``target``; on an ``error`` (a crash or hang) keep the input
    under ``$OCIHOOK_FUZZ_CRASHES/<target>/`` when that is set, for the corpus."""
    FUZZ_COUNTS[target] = FUZZ_COUNTS.get(target, 0) + 1
    where = os.environ.get("OCIHOOK_FUZZ_CRASHES")
    if error is not None and where:
        import hashlib

        folder = os.path.join(where, target)
        os.makedirs(folder, exist_ok=True)
        name = f"{type(error).__name__}-{hashlib.sha256(data).hexdigest()[:16]}"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def _fuzz_mutate(seed: bytes, edits: list[tuple[int, int, int, int]]) -> bytes:
    """Apply byte edits to ``seed``: (kind, position, value, length)."""
    data = bytearray(seed)
    for kind, pos, value, length in edits:
        at = pos % (len(data) + 1)
        if kind == 0 and data:  # set a byte
            data[min(at, len(data) - 1)] = value
        elif kind == 1:  # insert bytes
            data[at:at] = bytes([value]) * length
        elif kind == 2:  # delete a run
            del data[at : at + length]
        elif kind == 3:  # truncate
            del data[at:]
        elif kind == 4 and data:  # duplicate a run (splice the file into itself)
            data[at:at] = data[at : at + length * 8]
        elif kind == 5 and len(data) >= 4:  # an interesting 32-bit value
            word = (0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(seed), value)[length % 6]
            at = min(at, len(data) - 4)
            data[at : at + 4] = word.to_bytes(4, "little" if value & 1 else "big")
    return bytes(data)


_FUZZ_EDITS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.integers(0, 1 << 20),
        st.integers(0, 255),
        st.integers(1, 64),
    ),
    max_size=8,
)


def fuzz_mutated(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    """A seed with byte edits applied, or random bytes now and then."""
    return st.one_of(
        st.builds(_fuzz_mutate, st.sampled_from(seeds), _FUZZ_EDITS),
        st.binary(max_size=512),
    )


_FUZZ_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(
        ["", "all", "none", "void", "0", "-1", "0:0", "a" * 300, "\x00", "\ud800", "../..", "/"]
    ),
)
_FUZZ_JSON = st.recursive(
    _FUZZ_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def _fuzz_paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _fuzz_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _fuzz_paths(v, (*prefix, i))
    return out


def _fuzz_graft(doc: Any, pick: int, value: Any, drop: bool) -> Any:
    """``doc`` with the value at path number ``pick`` replaced by ``value`` (or, with
    ``drop``, removed)."""
    doc = json.loads(json.dumps(doc))
    paths = _fuzz_paths(doc)
    path = paths[pick % len(paths)]
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def fuzz_grafted(doc: Any) -> st.SearchStrategy[Any]:
    """``doc`` with one to three random values grafted in."""
    step = st.tuples(st.integers(0, 10**6), _FUZZ_JSON, st.booleans())

    def apply(steps: list[tuple[int, Any, bool]]) -> Any:
        out = doc
        for pick, value, drop in steps:
            out = _fuzz_graft(out, pick, value, drop)
        return out

    return st.lists(step, min_size=1, max_size=3).map(apply)


def fuzz_json_bytes(doc: Any) -> st.SearchStrategy[bytes]:
    """Grafted documents as JSON (unicode escapes and non-ASCII kept), and byte mutations of
    the valid document."""

    def enc(d: Any, ascii_: bool) -> bytes:
        return json.dumps(d, ensure_ascii=ascii_).encode("utf-8", "surrogatepass")

    return st.one_of(
        st.builds(enc, fuzz_grafted(doc), st.booleans()),
        fuzz_mutated([json.dumps(doc).encode()]),
    )


class Hang(Exception):
    """An input took longer than :func:`time_limit` allows."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the body when it runs longer than ``seconds`` (SIGALRM; the
    main thread only)."""

    def expired(signum: int, frame: Any) -> None:
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
