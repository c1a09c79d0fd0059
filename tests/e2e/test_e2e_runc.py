"""End to end with real runc: spec mode and hook mode, on the simulated and realistic hosts.

The container's own view is the oracle: its device nodes, the soname links, the ELF magic
read through libcuda.so.1, the ``ro`` flag in /proc/self/mountinfo, ENXIO (allowed by the
cgroup, no driver) on a requested GPU and EPERM (denied by the cgroup) on a GPU it did not
ask for, and its /etc/ld.so.cache read by the host's ``ldconfig -p -C``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import (
    RUNC_SCRIPT,
    check_runc_view,
    edit_cli,
    need_root_and,
    run_cli_process,
    tagged,
    with_mknod_cap,
)
from support import register_hook as _register_hook

from ocihook.appliers.spec import edit_bundle
from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost
from ocihook.sim.demo import run_container


def _check_ldcache(bundle: str, libdir: str) -> None:
    cache = os.path.join(bundle, "rootfs/etc/ld.so.cache")
    out = subprocess.run(
        ["ldconfig", "-p", "-C", cache], capture_output=True, text=True, check=True
    ).stdout
    assert f"libcuda.so.1 (libc6,x86-64) => {libdir}/libcuda.so.1" in out
    assert f"libnvidia-ml.so.1 (libc6,x86-64) => {libdir}/libnvidia-ml.so.1" in out


def _host_mounts_clean(bundle: str) -> None:
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()


CASES = [("spec", False), ("hook", False), ("spec", True), ("hook", True)]


@pytest.mark.parametrize(
    ("mode", "realistic_host"),
    CASES,
    ids=[f"{m}-{'realistic' if r else 'simulated'}" for m, r in CASES],
)
def test_runc(
    mode: str,
    realistic_host: bool,
    request: pytest.FixtureRequest,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
) -> None:
    need_root_and("runc", "ldconfig")
    if realistic_host:
        facts = request.getfixturevalue("realistic")
        root, version = facts["root"], facts["driver_version"]
        gpus = sorted(facts["gpus"], key=lambda g: g["index"])
        uvm_major = facts["majors"]["nvidia-uvm"]
        if not facts.get("device_nodes", {}).get("created"):
            pytest.skip("the realistic host was built without /dev nodes (not root)")
        debian, libdir = True, "/usr/lib/x86_64-linux-gnu"
    else:
        sim = request.getfixturevalue("sim")
        root, version = sim.root, sim.driver_version
        gpus = [{"index": g.index, "minor": g.minor, "uuid": g.uuid} for g in sim.gpus]
        from ocihook.sim.host import UVM_MAJOR

        uvm_major = UVM_MAJOR
        debian, libdir = False, "/usr/lib64"
    # GPU 0 by index and GPU 3 by UUID; an unrequested GPU is tried from inside
    wanted = [gpus[0], gpus[3]]
    other = next(g for g in gpus if g not in wanted)
    env = [
        f"NVIDIA_VISIBLE_DEVICES=0,{gpus[3]['uuid']}",
        f"LIBDIR={libdir}",
        f"OTHER={other['minor']}",
    ]
    bundle = bundle_factory(["sh", "-c", RUNC_SCRIPT], env, debian=debian)
    with_mknod_cap(bundle)
    if mode == "spec":
        result = edit_bundle(bundle, HostRoot.single(root))
        assert result.written
    else:
        _register_hook(bundle, root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    check_runc_view(
        proc.stdout,
        version=version,
        libdir=libdir,
        minors=sorted(g["minor"] for g in wanted),
        uvm_major=uvm_major,
    )
    _check_ldcache(bundle, libdir)
    _host_mounts_clean(bundle)


def test_hook_failure_leaves_nothing_behind(
    sim: Any, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """A hook that fails half-way undoes its work: runc aborts, and the rootfs and the host
    mount table are as before."""
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    rootfs = os.path.join(bundle, "rootfs")
    # a directory where a library must be mounted: the mount step fails after the device
    # nodes and earlier mounts were made
    v = sim.driver_version
    os.makedirs(os.path.join(rootfs, f"usr/lib64/libnvidia-ptxjitcompiler.so.{v}"))
    before = sorted(
        os.path.relpath(os.path.join(d, n), rootfs)
        for d, ds, fs in os.walk(rootfs)
        for n in ds + fs
    )
    _register_hook(bundle, sim.root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode != 0
    assert "libnvidia-ptxjitcompiler" in proc.stderr and "error[apply-failed]" in proc.stderr
    after = sorted(
        os.path.relpath(os.path.join(d, n), rootfs)
        for d, ds, fs in os.walk(rootfs)
        for n in ds + fs
    )
    assert after == before
    _host_mounts_clean(bundle)


def test_demo_command_runs() -> None:
    need_root_and("runc")
    proc = subprocess.run(
        [sys.executable, "-m", "ocihook", "demo"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No such device or address" in proc.stdout
    assert "libcuda.so.1 -> libcuda.so.550.127.05" in proc.stdout


def test_demo_without_runc_prints_the_diff() -> None:
    """Without runc (or root) the demo shows the config.json spec mode would write."""
    env = {**os.environ, "PATH": "/nonexistent"}
    proc = subprocess.run(
        [sys.executable, "-m", "ocihook", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "runc is not installed" in proc.stdout
    assert '+\t\t\t\t"path": "/dev/nvidia0",' in proc.stdout
    assert (
        '+\t\t\t"NVIDIA_VISIBLE_DEVICES=void"' in proc.stdout
        or "NVIDIA_VISIBLE_DEVICES=void" in proc.stdout
    )
    assert "and in the rootfs, made by the edit itself:" in proc.stdout
    assert "  /usr/lib64/libcuda.so.1 -> libcuda.so.550.127.05\n" in proc.stdout


def test_hook_mode_bad_request_stops_the_start(
    sim: Any, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0,12"])
    _register_hook(bundle, sim.root)
    cfg = os.path.join(bundle, "config.json")
    with open(cfg, "rb") as f:
        before = f.read()
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode != 0
    assert "error[bad-request]: no such GPU" in proc.stderr
    assert "value '12'" in proc.stderr and cfg in proc.stderr
    with open(cfg, "rb") as f:
        assert f.read() == before
    assert not os.path.exists(os.path.join(bundle, "rootfs/usr/lib64"))
    _host_mounts_clean(bundle)


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_mig_device(sim: Any, bundle_factory: Callable[..., str], tmp_path: Any, mode: str) -> None:
    """MIG device 1:0: the container gets GPU 1's node and that instance's capability
    nodes (c <nvidia-caps>:<minor>), and no other instance's."""
    need_root_and("runc")
    from ocihook.sim.host import CAPS_MAJOR, MIG_INSTANCES

    script = (
        "for n in /dev/nvidia*  /dev/nvidia-caps/*; do echo NODE $n $(stat -c '%t:%T' $n); done"
    )
    bundle = bundle_factory(
        ["sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=1:0", "NVIDIA_DRIVER_CAPABILITIES=utility"]
    )
    if mode == "spec":
        assert edit_bundle(bundle, HostRoot.single(sim.root)).written
    else:
        _register_hook(bundle, sim.root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    minor1 = sim.gpus[1].minor
    gi = 3 + minor1 * 135 + MIG_INSTANCES[0] * 9
    nodes = {
        line.split()[1]: line.split()[2]
        for line in tagged(proc.stdout, "NODE") and proc.stdout.splitlines()
    }
    assert nodes == {
        "/dev/nvidia-caps": "0:0" if False else nodes.get("/dev/nvidia-caps", ""),
        "/dev/nvidiactl": "c3:ff",
        f"/dev/nvidia{minor1}": f"c3:{minor1:x}",
        f"/dev/nvidia-caps/nvidia-cap{gi}": f"{CAPS_MAJOR:x}:{gi:x}",
        f"/dev/nvidia-caps/nvidia-cap{gi + 1}": f"{CAPS_MAJOR:x}:{gi + 1:x}",
    }


@pytest.mark.parametrize("mode", ["spec", "hook"])
@pytest.mark.parametrize(
    ("compat_version", "note_drivers", "used"),
    [
        ("560.35.03", None, True),
        ("545.23.08", None, False),
        # with a .note.cuda.fwd_compatibility, its driver branches decide
        ("550.200.01", [535, 550], True),
        ("560.35.03", [560, 565], False),
    ],
)
def test_cuda_forward_compat(
    sim: Any,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
    mode: str,
    compat_version: str,
    note_drivers: list[int] | None,
    used: bool,
) -> None:
    """An image with /usr/local/cuda/compat: its libcuda takes precedence in the
    container's ld.so.cache only when it is newer than the host's 550.127.05 — by its
    ``.note.cuda.fwd_compatibility`` (host branch listed, newer version) when it has one,
    else by a newer driver branch in its file name; nothing of the image is mounted or run."""
    need_root_and("runc", "ldconfig")

    from ocihook.sim.elfwrite import make_shared_object, pack_note

    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    compat = os.path.join(bundle, "rootfs/usr/local/cuda/compat")
    os.makedirs(compat)
    notes = []
    if note_drivers is not None:
        desc = json.dumps({"Format": 1, "CUDA Version": "12.6", "Driver": note_drivers})
        notes.append(
            (".note.cuda.fwd_compatibility", pack_note(b"NVIDIA Corporation", 1, desc.encode()))
        )
    with open(os.path.join(compat, f"libcuda.so.{compat_version}"), "wb") as f:
        f.write(make_shared_object("libcuda.so.1", note_sections=notes))
    os.symlink(f"libcuda.so.{compat_version}", os.path.join(compat, "libcuda.so.1"))
    if mode == "spec":
        assert edit_bundle(bundle, HostRoot.single(sim.root)).written
    else:
        _register_hook(bundle, sim.root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run(
        ["ldconfig", "-p", "-C", os.path.join(bundle, "rootfs/etc/ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines = [ln.strip() for ln in out.splitlines() if ln.strip().startswith("libcuda.so.1 ")]
    want = "/usr/local/cuda/compat/libcuda.so.1" if used else "/usr/lib64/libcuda.so.1"
    assert lines == [f"libcuda.so.1 (libc6,x86-64) => {want}"]


@pytest.mark.parametrize(
    ("env", "needles"),
    [
        (
            ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_DRIVER=driver>=560 driver<400"],
            ["unsatisfied condition: driver>=560", "550.127.05", "NVIDIA_REQUIRE_DRIVER"],
        ),
        (
            [
                "NVIDIA_VISIBLE_DEVICES=0",
                "CUDA_VERSION=12.4.1",
                "NVIDIA_REQUIRE_CUDA=",
                "NVIDIA_REQUIRE_ARCH=arch>=99",
            ],
            ["arch>=99"],
        ),
        (
            ["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_MIG_CONFIG_DEVICES=all"],
            ["privileged containers only", "NVIDIA_MIG_CONFIG_DEVICES"],
        ),
    ],
    ids=["requirement", "arch-unknown-passes", "privileged-only"],
)
@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_refusals_stop_the_start(
    sim: Any,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
    mode: str,
    env: list[str],
    needles: list[str],
) -> None:
    """An unmet requirement or a privileged-only request stops the container start with a
    message naming the term, the host's value and what to do; config.json and the rootfs
    are left as they were. (arch is unknown with the procfs backend: it passes.)"""
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], env)
    cfg = os.path.join(bundle, "config.json")
    passes = needles == ["arch>=99"]
    if mode == "spec":
        proc = edit_cli(bundle, sim.root)
        err, code = proc.stderr, proc.returncode
    else:
        _register_hook(bundle, sim.root)
        with open(cfg, "rb") as f:
            before = f.read()
        proc = run_container(bundle, state_root=str(tmp_path / "runc"))
        err, code = proc.stderr, proc.returncode
        with open(cfg, "rb") as f:
            assert f.read() == before
    if passes:
        assert code == 0, err
        return
    assert code != 0
    for n in needles:
        assert n in err, (n, err)
    assert not os.path.exists(os.path.join(bundle, "rootfs/usr/lib64"))


# --- hostile images and states, against real runc -------------------------------------------------


def _copy(sim: simhost.SimulatedHost, tmp_path: Any) -> str:
    root = str(tmp_path / "host")
    subprocess.run(["cp", "-a", sim.root, root], check=True)
    return root


def _prepare(mode: str, bundle: str, root: str) -> None:
    if mode == "hook":
        _register_hook(bundle, root)
    else:
        proc = run_cli_process(
            "edit", "-b", bundle, "--driver-root", root, "--dev-root", root, text=False
        )
        assert proc.returncode == 0, proc.stderr


def test_foreign_state_pid_is_refused(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str]
) -> None:
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    state = json.dumps({"id": "x", "pid": os.getpid(), "bundle": bundle}).encode()
    proc = run_cli_process(
        "hook",
        "prestart",
        "--driver-root",
        sim.root,
        "--dev-root",
        sim.root,
        stdin=state,
        text=False,
    )
    assert proc.returncode == 4 and b"not in a container's mount namespace" in proc.stderr
    assert bundle not in Path("/proc/self/mountinfo").read_text()
    assert not Path(bundle, "rootfs/dev/nvidia0").exists()


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_image_ldcache_fifo_fails_fast(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any, mode: str
) -> None:
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    os.mkfifo(os.path.join(bundle, "rootfs/etc/ld.so.cache"))
    _prepare(mode, bundle, sim.root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=30)
    assert proc.returncode != 0
    assert "not a regular file" in proc.stderr


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_image_ldcache_linked_to_proc_kmsg_is_not_read(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any, mode: str
) -> None:
    need_root_and("runc", "ldconfig")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    cache = os.path.join(bundle, "rootfs/etc/ld.so.cache")
    os.symlink("/proc/kmsg", cache)
    _prepare(mode, bundle, sim.root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert not os.path.islink(cache)  # the link was replaced, never written through
    out = subprocess.run(["ldconfig", "-p", "-C", cache], capture_output=True, text=True).stdout
    assert "libcuda.so.1 (libc6,x86-64) => /usr/lib64/libcuda.so.1" in out


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_image_with_its_own_libraries_gets_the_hosts(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any, mode: str
) -> None:
    """An image that ships libnvidia-ml.so.1 and libcuda.so as regular files (CUDA stubs):
    the container starts and reads the host's libraries under those names; the image's
    files are unchanged afterwards ("file exists" failures of the NVIDIA toolkit)."""
    need_root_and("runc")
    script = (
        "head -c 4 /usr/lib64/libnvidia-ml.so.1 | od -An -tx1; "
        "head -c 4 /usr/lib64/libcuda.so | od -An -tx1; "
        "grep ' /usr/lib64/libcuda.so ' /proc/self/mountinfo | cut -d' ' -f6"
    )
    bundle = bundle_factory(["sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=0"])
    libdir = Path(bundle, "rootfs/usr/lib64")
    libdir.mkdir(parents=True)
    (libdir / "libnvidia-ml.so.1").write_bytes(b"STUB ml")
    (libdir / "libcuda.so").write_bytes(b"STUB cuda")
    _prepare(mode, bundle, sim.root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = [ln.split() for ln in proc.stdout.splitlines()]
    assert lines[0] == ["7f", "45", "4c", "46"] and lines[1] == ["7f", "45", "4c", "46"]
    assert "ro" in lines[2][0].split(",")
    assert (libdir / "libnvidia-ml.so.1").read_bytes() == b"STUB ml"
    assert (libdir / "libcuda.so").read_bytes() == b"STUB cuda"


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_host_node_group_is_kept(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any, mode: str
) -> None:
    """NVreg_DeviceFileGID: the host's nodes belong to the video group (44) with mode 0660;
    the container's nodes must too, or a container user in that group gets EACCES."""
    need_root_and("runc")
    root = _copy(sim, tmp_path)
    for name in ("nvidiactl", "nvidia0"):
        os.chown(os.path.join(root, "dev", name), 0, 44)
        os.chmod(os.path.join(root, "dev", name), 0o660)
    bundle = bundle_factory(
        ["sh", "-c", "stat -c '%n %g %a' /dev/nvidiactl /dev/nvidia0"], ["NVIDIA_VISIBLE_DEVICES=0"]
    )
    _prepare(mode, bundle, root)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["/dev/nvidiactl 44 660", "/dev/nvidia0 44 660"]


def test_spec_mode_hook_failure_removes_its_links(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """An image whose ld.so.cache is a FIFO: the edit cannot write the cache, undoes its
    links and leaves them to the hook; the hook fails on the same FIFO, and the links it
    made before are removed too."""
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    os.mkfifo(os.path.join(bundle, "rootfs/etc/ld.so.cache"))
    _prepare("spec", bundle, sim.root)
    args = json.loads(Path(bundle, "config.json").read_text())["hooks"]["createContainer"]
    assert "--link" in args[0]["args"] and "--lib" in args[0]["args"]
    assert not any(p.is_symlink() for p in Path(bundle, "rootfs/usr/lib64").iterdir())
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=30)
    assert proc.returncode != 0
    assert "not a regular file" in proc.stderr, proc.stderr
    assert not any(p.is_symlink() for p in Path(bundle, "rootfs/usr/lib64").iterdir())


def test_hook_applied_twice_gives_the_same_container(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    need_root_and("runc")
    # stat, not ls -l: no timestamps (two runs can straddle a minute)
    script = (
        "stat -c '%A %F %t:%T %N' /dev/nvidia0 /usr/lib64/libcuda.so.1; "
        "grep -c libcuda /proc/self/mountinfo"
    )
    bundle = bundle_factory(["sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=0"])
    _register_hook(bundle, sim.root)
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    once = run_container(bundle, state_root=str(tmp_path / "r1"))
    doc["hooks"]["prestart"] = doc["hooks"]["prestart"] * 2
    cfg.write_text(json.dumps(doc))
    twice = run_container(bundle, state_root=str(tmp_path / "r2"))
    assert once.returncode == 0 and twice.returncode == 0, twice.stderr
    assert len(once.stdout.splitlines()) == 3, once.stdout
    # the same nodes, links and number of libcuda mounts
    assert once.stdout == twice.stdout
