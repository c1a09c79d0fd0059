"""``ocihook-runtime`` end to end: run by hand in front of the real runc or crun, and as
``ctr run --runc-binary`` for containerd's runc shim (containerd started privately, the
``containerd`` fixture). The container's own view is the oracle (``support.RUNC_SCRIPT``,
``support.ENGINE_SCRIPT``). The wrapper's other tests are in
tests/unit/commands/test_runtime_wrapper.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from support import (
    ENGINE_SCRIPT,
    RUNC_SCRIPT,
    WRAPPER,
    check_gpu0,
    check_no_gpu,
    check_runc_view,
    config_bytes,
    fake_proc_hook,
    make_executable,
    need_root_and,
    with_mknod_cap,
)

from ocihook.linux.ociruntime import mount_race_warning
from ocihook.sim import host as simhost


def _runc_script_env(sim: simhost.SimulatedHost) -> list[str]:
    return ["NVIDIA_VISIBLE_DEVICES=0", "LIBDIR=/usr/lib64", f"OTHER={sim.gpus[1].minor}"]


@pytest.mark.parametrize(
    ("runtime", "mode"),
    [("runc", "auto"), ("runc", "legacy"), ("crun", "auto"), ("crun", "legacy")],
)
def test_e2e_run_through_the_wrapper(
    runtime: str,
    mode: str,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    """``ocihook-runtime --root R run -b B id`` with the real runc, or crun chosen by
    ``runtimes``: the container sees GPU 0 of the simulated host (spec edits in auto mode,
    the prestart hook in legacy mode). crun refuses this machine's hybrid cgroup layout,
    so it runs in a mount namespace without the cgroup2 mount, as test_e2e_stages does."""
    need_root_and(runtime, "unshare")
    config = tmp_path / "ocihook.toml"
    config.write_text(
        f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\nmode = "{mode}"\n'
        f'runtimes = ["{runtime}"]\n'
    )
    bundle = bundle_factory(["sh", "-c", RUNC_SCRIPT], _runc_script_env(sim))
    with_mknod_cap(bundle)
    cid = f"ocihook-rt-{uuid.uuid4().hex[:8]}"
    # first on PATH: a logging stand-in that runs the real runtime, to see which one ran
    real = shutil.which(runtime)
    calls = tmp_path / "calls.log"
    make_executable(
        tmp_path / "bin" / runtime,
        f'#!/bin/sh\necho "$0 $*" >> {calls}\nexec {real} "$@"\n',
    )
    env = {
        "PATH": f"{tmp_path / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin",
        "OCIHOOK_CONFIG": str(config),
    }
    args = ["--root", str(tmp_path / "state"), "run", "-b", bundle, cid]
    cmd = [WRAPPER, *args]
    if runtime == "crun":
        script = "umount /sys/fs/cgroup/unified 2>/dev/null; exec " + shlex.join(cmd)
        cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL
    )
    assert proc.returncode == 0, proc.stderr
    # the runtime's version is asked first (spec mode's runc check), then the run
    ran = [line for line in calls.read_text().splitlines() if not line.endswith(" --version")]
    assert ran == [f"{tmp_path / 'bin' / runtime} {' '.join(args)}"]
    # spec mode's edit warns for a runc older than 1.1.14; legacy mode and crun never
    old_runc = (
        mount_race_warning(str(tmp_path / "bin" / runtime), cache_dir=str(tmp_path)) is not None
    )
    assert ("CVE-2024-45310" in proc.stderr) == (old_runc and mode == "auto")
    check_runc_view(
        proc.stdout,
        version=sim.driver_version,
        libdir="/usr/lib64",
        minors=[sim.gpus[0].minor],
        uvm_major=simhost.UVM_MAJOR,
    )
    hooks = json.loads(config_bytes(bundle)).get("hooks", {})
    assert ("prestart" in hooks) == (mode == "legacy")


def test_e2e_containerd_runc_binary(
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """``ctr run --runc-binary <wrapper>``: containerd's runc shim runs the wrapper with
    its usual command line (``--root``, ``--log``, ``--log-format json``, ``create
    --bundle``), the wrapper edits the shim's config.json, and the busybox container sees
    GPU 0 of the simulated host; a container asking for nothing starts as usual."""
    need_root_and("containerd", "ctr", "runc")
    engine = request.getfixturevalue("containerd")
    config = tmp_path / "ocihook.toml"
    config.write_text(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
    calls = tmp_path / "calls.log"
    # the shim's environment is containerd's: a small script names the configuration
    binary = make_executable(
        tmp_path / "ocihook-runtime-sim",
        f'#!/bin/sh\necho "$*" >> {calls}\nOCIHOOK_CONFIG={config} exec {WRAPPER} "$@"\n',
    )
    for env, check in (
        (
            ["NVIDIA_VISIBLE_DEVICES=0", f"OTHER={sim.gpus[1].minor}"],
            lambda out: check_gpu0(out, sim),
        ),
        ([], check_no_gpu),
    ):
        bundle = bundle_factory(["sh", "-c", ENGINE_SCRIPT], env)
        cid = f"ocihook-rt-{uuid.uuid4().hex[:8]}"
        with open(os.path.join(bundle, "config.json")) as f:
            spec = json.load(f)
        spec["root"]["path"] = os.path.join(bundle, "rootfs")
        for key in ("bounding", "effective", "permitted"):
            spec["process"]["capabilities"][key].append("CAP_MKNOD")
        spec["linux"]["cgroupsPath"] = f"{engine.cgroup_parent}/{cid}"
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        args = ["run", "--rm", "--fifo-dir", str(tmp_path / "fifo")]
        args += ["--runc-root", str(tmp_path / "runc"), "--runc-binary", binary]
        proc = engine.ctr(*args, "--config", str(tmp_path / "spec.json"), cid)
        assert proc.returncode == 0, (
            proc.stderr + (engine.dir / "containerd.log").read_text()[-3000:]
        )
        check(proc.stdout)
        assert engine.ctr("containers", "ls", "-q").stdout.split() == []
    creates = [line for line in calls.read_text().splitlines() if " create " in f" {line} "]
    assert len(creates) == 2, calls.read_text()
    assert all("--log-format json" in line and "--bundle" in line for line in creates), creates


def test_e2e_containerd_error_reaches_ctr(
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    """A request that cannot be met stops the start, and ctr shows the wrapper's one-line
    error (through the ``--log`` file the shim reads)."""
    need_root_and("containerd", "ctr", "runc")
    engine = request.getfixturevalue("containerd")
    config = tmp_path / "ocihook.toml"
    config.write_text(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
    binary = make_executable(
        tmp_path / "ocihook-runtime-sim",
        f'#!/bin/sh\nOCIHOOK_CONFIG={config} exec {WRAPPER} "$@"\n',
    )
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=42"])
    cid = f"ocihook-rt-{uuid.uuid4().hex[:8]}"
    with open(os.path.join(bundle, "config.json")) as f:
        spec = json.load(f)
    spec["root"]["path"] = os.path.join(bundle, "rootfs")
    spec["linux"]["cgroupsPath"] = f"{engine.cgroup_parent}/{cid}"
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    args = ["run", "--rm", "--fifo-dir", str(tmp_path / "fifo")]
    args += ["--runc-root", str(tmp_path / "runc"), "--runc-binary", binary]
    proc = engine.ctr(*args, "--config", str(tmp_path / "spec.json"), cid)
    assert proc.returncode != 0
    assert "ocihook-runtime: error[bad-request]" in proc.stderr, proc.stderr
    assert "42" in proc.stderr
    engine.ctr("containers", "rm", cid)
    assert engine.ctr("containers", "ls", "-q").stdout.split() == []


MASK_SCRIPT = (
    "ls /proc/driver/nvidia/gpus; cat /proc/driver/nvidia/params; "
    "touch /proc/driver/nvidia/x 2>/dev/null && echo WRITABLE; echo DONE"
)


def test_e2e_create_masks_proc_without_a_hook(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    """``ocihook-runtime create --pid-file F`` (how containerd, podman and Docker call a
    runtime): the edit makes the links and the cache in the rootfs and registers no hook;
    the wrapper runs runc's create itself and mounts the /proc/driver/nvidia mask in the
    created container (a prestart hook of the test stands in for the kernel driver's
    directory). The container sees its own GPU's directory only, the driver's params, and
    a read-only mask; no second ocihook process ran."""
    need_root_and("runc")

    config = tmp_path / "ocihook.toml"
    config.write_text(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
    bundle = bundle_factory(["sh", "-c", MASK_SCRIPT], ["NVIDIA_VISIBLE_DEVICES=0"])
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["hooks"] = {"prestart": [fake_proc_hook(bundle, tmp_path)]}
    cfg.write_text(json.dumps(doc))
    cid = f"ocihook-mask-{uuid.uuid4().hex[:8]}"
    state = str(tmp_path / "state")
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "OCIHOOK_CONFIG": str(config)}
    out = tmp_path / "out"
    pid_file = tmp_path / "pid"
    err = tmp_path / "err"
    # files, not pipes: the created container keeps its stdio open until it is started
    with open(out, "wb") as f, open(err, "wb") as e:
        proc = subprocess.run(
            [WRAPPER, "--root", state, "create", "--pid-file", str(pid_file), "-b", bundle, cid],
            stdout=f,
            stderr=e,
            env=env,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    try:
        assert proc.returncode == 0, err.read_text()
        hooks = json.loads(config_bytes(bundle))["hooks"]
        assert list(hooks) == ["prestart"]  # ocihook registered none
        assert os.path.islink(Path(bundle, "rootfs/usr/lib64/libcuda.so.1"))
        subprocess.run(["runc", "--root", state, "start", cid], check=True, timeout=30)
        for _ in range(200):
            st = subprocess.run(
                ["runc", "--root", state, "state", cid], capture_output=True, text=True
            )
            if '"stopped"' in st.stdout:
                break
            time.sleep(0.05)
    finally:
        subprocess.run(["runc", "--root", state, "delete", "--force", cid], capture_output=True)
    lines = out.read_text().splitlines()
    from ocihook.core.hostroot import HostRoot
    from ocihook.discovery.nvidia import discover

    host = discover(HostRoot.single(sim.root))
    names = {os.path.basename(g.proc_dir) for g in host.gpus}
    params = Path(sim.root, "proc/driver/nvidia/params").read_text().splitlines()
    assert lines[-1] == "DONE", lines
    assert "stale" not in lines and "WRITABLE" not in lines, lines
    assert [ln for ln in lines if ln in names] == [os.path.basename(host.gpus[0].proc_dir)]
    assert params and params[0] in lines, (params, lines)
