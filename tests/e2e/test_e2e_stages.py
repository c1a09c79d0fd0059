"""Hook mode on every stage and runtime here: runc (prestart, createRuntime,
createContainer) and crun (the same three; crun refuses the hybrid cgroup layout, so it
runs in a private mount namespace without the cgroup2 mount, as testbed.md describes).
Also: environment hygiene, 16 concurrent containers, bad input."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support import edit_cli, need_root_and
from support import register_stage_hook as _register
from support import run_runtime as _run
from support import stage_hook as _hook

from ocihook.sim import host as simhost

SCRIPT = (
    "for n in /dev/nvidia*; do echo NODE $n $(stat -c '%t:%T' $n); done; "
    "echo LINK $(readlink /usr/lib64/libcuda.so.1); "
    "echo OPEN $(cat /dev/nvidia0 2>&1 | head -n 1)"
)


def _view(out: str) -> dict[str, list[str]]:
    view: dict[str, list[str]] = {}
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        view.setdefault(tag, []).append(rest)
    return view


STAGES = ["prestart", "createRuntime", "createContainer"]


@pytest.mark.parametrize("runtime", ["runc", "crun"])
@pytest.mark.parametrize("stage", STAGES)
def test_every_stage(
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
    runtime: str,
    stage: str,
) -> None:
    need_root_and(runtime, "unshare")
    bundle = bundle_factory(["sh", "-c", SCRIPT], ["NVIDIA_VISIBLE_DEVICES=3"])
    _register(bundle, stage, _hook(stage, sim.root))
    proc = _run(runtime, bundle, str(tmp_path / "state"), f"st-{runtime}-{stage}")
    assert proc.returncode == 0, proc.stderr
    view = _view(proc.stdout)
    minor = sim.gpus[3].minor
    assert sorted(view["NODE"]) == sorted(
        [
            f"/dev/nvidia{minor} c3:{minor:x}",
            "/dev/nvidia-uvm ed:0",
            "/dev/nvidia-uvm-tools ed:1",
            "/dev/nvidiactl c3:ff",
        ]
    )
    assert view["LINK"] == [f"libcuda.so.{sim.driver_version}"]
    assert view["OPEN"] == ["cat: can't open '/dev/nvidia0': No such file or directory"]
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()


RO_SCRIPT = SCRIPT + (
    '; while read -r a b c d mp opts rest; do [ "$mp" = / ] && echo ROOT ${opts%%,*}; '
    "done < /proc/self/mountinfo; echo WRITE $( (echo x > /new) 2>&1)"
)


@pytest.mark.parametrize(
    "mode", ["hook-createContainer", "hook-prestart", "hook-createRuntime", "spec"]
)
def test_crun_readonly_rootfs_in_create_container(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any, mode: str
) -> None:
    """crun makes a read-only rootfs read-only before the createContainer hooks (runc
    after them): ocihook's createContainer hook (hook mode) and the hooks spec mode
    registers make the rootfs mount writable for their edits and read-only again, so the
    container gets its GPU and still has a read-only root."""
    need_root_and("crun", "unshare")
    bundle = bundle_factory(["sh", "-c", RO_SCRIPT], ["NVIDIA_VISIBLE_DEVICES=0"])
    if mode.startswith("hook-"):
        stage = mode.partition("-")[2]
        _register(bundle, stage, _hook(stage, sim.root), readonly=True)
    else:
        cfg = Path(bundle, "config.json")
        doc = json.loads(cfg.read_text())
        doc["root"]["readonly"] = True
        cfg.write_text(json.dumps(doc))
        proc = edit_cli(bundle, sim.root)
        assert proc.returncode == 0, proc.stderr
    proc = _run("crun", bundle, str(tmp_path / "state"), f"ro-crun-{mode}")
    assert proc.returncode == 0, proc.stderr
    view = _view(proc.stdout)
    want = ["/dev/nvidia0 c3:0", "/dev/nvidiactl c3:ff"]
    assert sorted(view["NODE"]) == sorted(
        [*want, "/dev/nvidia-uvm ed:0", "/dev/nvidia-uvm-tools ed:1"]
    )
    assert view["LINK"] == [f"libcuda.so.{sim.driver_version}"]
    assert view["OPEN"] == ["cat: can't open '/dev/nvidia0': No such device or address"]
    assert view["ROOT"] == ["ro"]
    assert "Read-only file system" in view["WRITE"][0]
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()


def test_runc_readonly_rootfs_works_in_every_stage(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    need_root_and("runc")
    for stage in STAGES:
        bundle = bundle_factory(["sh", "-c", SCRIPT], ["NVIDIA_VISIBLE_DEVICES=0"])
        _register(bundle, stage, _hook(stage, sim.root), readonly=True)
        proc = _run("runc", bundle, str(tmp_path / f"state-{stage}"), f"ro-{stage}")
        assert proc.returncode == 0, (stage, proc.stderr)
        assert "No such device or address" in proc.stdout


def test_image_environment_does_not_reach_the_hook(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """An image whose env sets LD_PRELOAD and PYTHONPATH to its own files: registered as
    ocihook registers itself (explicit env, -I), the createContainer hook — which inherits
    the container's environment when env is omitted — is unaffected."""
    need_root_and("runc", "gcc")
    bundle = bundle_factory(
        ["sh", "-c", SCRIPT],
        ["NVIDIA_VISIBLE_DEVICES=0", "LD_PRELOAD=/evil.so", "PYTHONPATH=/evilpy"],
    )
    rootfs = Path(bundle, "rootfs")
    marker = tmp_path / "owned"
    (rootfs / "evilpy").mkdir()
    (rootfs / "evilpy/ocihook.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    src = tmp_path / "evil.c"
    src.write_text(
        "#include <stdio.h>\n__attribute__((constructor)) static void f(void)"
        f'{{ FILE *p = fopen("{marker}", "w"); if (p) fclose(p); }}\n'
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(rootfs / "evil.so"), str(src)], check=True)
    # the image's files are at the same absolute paths on the "host" side too, as an
    # attacker would arrange when the hook runs before pivot_root
    shutil.copy(rootfs / "evil.so", "/evil.so")
    try:
        _register(bundle, "createContainer", _hook("createContainer", sim.root))
        proc = _run("runc", bundle, str(tmp_path / "state"), "envpoison")
        assert proc.returncode == 0, proc.stderr
        assert not marker.exists()
    finally:
        os.unlink("/evil.so")


def test_hook_with_inherited_poison_refuses(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """Registered without env, a createContainer hook inherits the image's PYTHONPATH: it
    refuses (exit 9) instead of doing host-side work."""
    need_root_and("runc")
    bundle = bundle_factory(
        ["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0", "PYTHONPATH=/nonexistent"]
    )
    hook = _hook("createContainer", sim.root)
    del hook["env"]
    _register(bundle, "createContainer", hook)
    proc = _run("runc", bundle, str(tmp_path / "state"), "inherit")
    assert proc.returncode != 0
    assert "error[poisoned-environment]" in proc.stderr and "PYTHONPATH" in proc.stderr
    assert not Path(bundle, "rootfs/dev/nvidia0").exists()


def test_sixteen_concurrent_containers_get_their_own_gpus(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    need_root_and("runc")
    script = "ls /dev | grep -E '^nvidia[0-9]+$'"
    jobs = []
    for i in range(16):
        gpu = sim.gpus[i % 8]
        mode = "hook" if i % 2 else "spec"
        bundle = bundle_factory(["sh", "-c", script], [f"NVIDIA_VISIBLE_DEVICES={gpu.uuid}"])
        if mode == "hook":
            _register(bundle, "prestart", _hook("prestart", sim.root))
        else:
            edit_cli(bundle, sim.root, check=True)
        jobs.append((bundle, gpu.minor, i))

    def run(job: tuple[str, int, int]) -> tuple[int, str, str]:
        bundle, minor, i = job
        p = _run("runc", bundle, str(tmp_path / "state"), f"conc{i}")
        return minor, p.stdout, p.stderr

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(run, jobs))
    for minor, out, err in results:
        assert out.split() == [f"nvidia{minor}"], err


@pytest.mark.parametrize(
    ("state", "code", "needle"),
    [
        ({"id": "x", "pid": 999999, "bundle": "@B"}, 4, "cannot inspect the container process"),
        ({"id": "x", "pid": 5, "bundle": "/nonexistent-bundle"}, 3, "config.json not found"),
        # a runtime that gives no pid (not runc-compatible for this stage)
        ({"id": "x", "bundle": "@B", "status": "created"}, 4, "no host pid"),
    ],
)
def test_bad_state_leaves_nothing(
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    state: dict[str, Any],
    code: int,
    needle: str,
) -> None:
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    state = {k: (bundle if v == "@B" else v) for k, v in state.items()}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ocihook",
            "hook",
            "prestart",
            "--driver-root",
            sim.root,
            "--dev-root",
            sim.root,
        ],
        input=json.dumps(state).encode(),
        capture_output=True,
        timeout=60,
    )
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr.decode()
    assert not Path(bundle, "rootfs/dev/nvidia0").exists()


def test_rootfs_not_a_directory(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    need_root_and("runc")
    b = tmp_path / "b"
    b.mkdir()
    (b / "rootfs").write_text("not a dir")
    (b / "config.json").write_text(
        json.dumps({"root": {"path": "rootfs"}, "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}})
    )
    sleeper = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "30"])
    try:
        import time

        time.sleep(0.3)
        pid = int(
            subprocess.run(
                ["pgrep", "-P", str(sleeper.pid)], capture_output=True, text=True
            ).stdout.split()[0]
            or sleeper.pid
        )
    except (IndexError, ValueError):
        pid = sleeper.pid
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ocihook",
                "hook",
                "prestart",
                "--driver-root",
                sim.root,
                "--dev-root",
                sim.root,
            ],
            input=json.dumps({"id": "x", "pid": pid, "bundle": str(b)}).encode(),
            capture_output=True,
            timeout=60,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 7, proc.stderr
    assert b"the container rootfs is not a directory" in proc.stderr


def test_process_in_the_root_devices_cgroup_is_refused(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """A state pid in a mount namespace of its own but in the root devices cgroup (not a
    container the runtime made): nothing may be written to the root cgroup, which would
    change every process's device access."""
    need_root_and("runc", "unshare")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    sleeper = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "30"])
    probe = "/sys/fs/cgroup/devices/ocihook-probe-root"
    try:
        import time

        time.sleep(0.3)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "ocihook",
                "hook",
                "prestart",
                "--driver-root",
                sim.root,
                "--dev-root",
                sim.root,
            ],
            input=json.dumps({"id": "x", "pid": sleeper.pid, "bundle": bundle}).encode(),
            capture_output=True,
            timeout=60,
        )
    finally:
        sleeper.kill()
        sleeper.wait()
    assert proc.returncode == 7, proc.stderr
    assert b"root devices cgroup" in proc.stderr
    # the root still lets a child cgroup allow the GPU nodes (no deny was written there)
    os.makedirs(probe, exist_ok=True)
    try:
        with open(os.path.join(probe, "devices.allow"), "w") as f:
            f.write("c 195:0 rw")
    finally:
        os.rmdir(probe)


def test_pure_cgroup2_host_through_runcs_own_device_program(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """A pure cgroup v2 host, made in a private mount namespace by binding a child of the
    cgroup2 mount over /sys/fs/cgroup: runc attaches its own eBPF device program, and the
    hook extends it. The requested GPU opens with ENXIO (allowed, no driver); an
    unrequested GPU node the container makes itself stays EPERM."""
    need_root_and("runc", "unshare")
    unified = "/sys/fs/cgroup/unified"
    if not os.path.isfile(os.path.join(unified, "cgroup.controllers")):
        pytest.skip("no cgroup2 mount at /sys/fs/cgroup/unified")
    script = (
        "echo OPEN0 $(cat /dev/nvidia0 2>&1 | head -n 1); "
        "busybox mknod /dev/nvidia5 c 195 5; echo OPEN5 $(cat /dev/nvidia5 2>&1 | head -n 1)"
    )
    bundle = bundle_factory(["sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=0"])
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    for key in ("bounding", "effective", "permitted"):
        doc["process"]["capabilities"][key].append("CAP_MKNOD")
    doc["hooks"] = {"prestart": [_hook("prestart", sim.root)]}
    cfg.write_text(json.dumps(doc))
    child = os.path.join(unified, f"ocihook-v2-{os.getpid()}")
    os.makedirs(child, exist_ok=True)
    state = tmp_path / "state"
    try:
        proc = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                f"mount --bind {child} /sys/fs/cgroup && "
                f"exec runc --root {state} run -b {bundle} v2-{os.getpid()}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    finally:
        for d in sorted(Path(child).glob("**/"), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
    assert proc.returncode == 0, proc.stderr
    view = _view(proc.stdout)
    assert view["OPEN0"] == ["cat: can't open '/dev/nvidia0': No such device or address"]
    assert "Operation not permitted" in view["OPEN5"][0]


def test_user_namespace_container(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """A container with a user namespace (root mapped to host uid 100000): its /dev does
    not allow mknod, so the hook bind-mounts the host's nodes and creates files as the
    container's root. The requested GPU opens with ENXIO, its libraries resolve, and the
    soname link belongs to the container's root."""
    need_root_and("runc")
    if not sim.dev_nodes:
        pytest.skip("the simulated host has no /dev nodes (not root)")
    script = (
        "echo OPEN $(cat /dev/nvidia0 2>&1 | head -n 1); "
        "echo LINK $(readlink /usr/lib64/libcuda.so.1); "
        "echo OWNER $(stat -c '%u' /usr/lib64/libcuda.so.1)"
    )
    import tempfile

    from ocihook.sim.demo import make_busybox_bundle

    # the mapped root must be able to reach the rootfs: not below pytest's 0700 tmp dir
    top = tempfile.mkdtemp(prefix="ocihook-userns-", dir="/tmp")
    os.chmod(top, 0o755)
    request_cleanup = top
    bundle = make_busybox_bundle(
        os.path.join(top, "bundle"), ["sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=0"]
    )
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["linux"]["namespaces"].append({"type": "user"})
    doc["linux"]["uidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
    doc["linux"]["gidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
    doc["hooks"] = {"prestart": [_hook("prestart", sim.root)]}
    cfg.write_text(json.dumps(doc))
    subprocess.run(
        ["chown", "-R", "-h", "100000:100000", os.path.join(bundle, "rootfs")], check=True
    )
    try:
        proc = _run("runc", bundle, str(tmp_path / "state"), f"userns-{os.getpid()}")
    finally:
        shutil.rmtree(request_cleanup, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr
    view = _view(proc.stdout)
    assert view["OPEN"] == ["cat: can't open '/dev/nvidia0': No such device or address"]
    assert view["LINK"] == [f"libcuda.so.{sim.driver_version}"]
    assert view["OWNER"] == ["0"]  # the container's root, host uid 100000
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()
