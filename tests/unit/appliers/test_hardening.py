"""Regression tests for what an adversarial review found (see the closing notes): each
test reproduces the attack or input, and checks the host and the bundle."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import need_root_and
from support import register_hook as _register_hook

from ocihook.core.errors import DiscoveryError, RequestError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.linux import ldcache
from ocihook.oci import bundle as bundle_mod
from ocihook.request import request_from_env
from ocihook.sim import host as simhost
from ocihook.sim.demo import run_container


def _cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "ocihook", *args], input=stdin, capture_output=True, timeout=60
    )


def test_write_json_atomic_never_chmods_through_a_swapped_link(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle's owner swaps the temporary file for a link to a victim while the new
    config.json is being written; the victim's mode must not change, and set-id bits of
    the old config.json are not copied."""
    victim = tmp_path / "victim"
    victim.write_text("secret")
    os.chmod(victim, 0o600)
    d = tmp_path / "b"
    d.mkdir()
    cfg = d / "config.json"
    cfg.write_text("{}")
    os.chmod(cfg, 0o4777)
    real_fsync = os.fsync

    def swap(fd: int) -> None:
        real_fsync(fd)
        for name in os.listdir(d):
            if name.startswith(".config.json."):
                os.unlink(d / name)
                os.symlink(victim, d / name)

    monkeypatch.setattr(bundle_mod.os, "fsync", swap)
    with contextlib.suppress(OSError):
        bundle_mod.write_json_atomic(str(cfg), {"a": 1})
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.read_text() == "secret"
    monkeypatch.setattr(bundle_mod.os, "fsync", real_fsync)
    if cfg.is_symlink():  # the swapped link was renamed over config.json: the owner's doing
        cfg.unlink()
    cfg.write_text("{}")
    os.chmod(cfg, 0o4777)
    bundle_mod.write_json_atomic(str(cfg), {"a": 1})
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o777  # no set-uid bit carried over


def test_lone_surrogate_in_config_is_written_as_an_escape(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    b = tmp_path / "b"
    (b / "rootfs").mkdir(parents=True)
    (b / "config.json").write_text(
        '{"root": {"path": "rootfs"}, "annotations": {"x": "\\ud800"}, '
        '"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}'
    )
    proc = _cli("edit", "-b", str(b), "--driver-root", sim.root, "--dev-root", sim.root)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((b / "config.json").read_bytes())
    assert doc["annotations"]["x"] == "\ud800"


@pytest.mark.parametrize("bad", [b"\xff\xfe{\x00}\x00", b"\xef\xbb\xbf{}", b'{"a": NaN}'])
def test_non_json_config_is_refused(tmp_path: Any, bad: bytes) -> None:
    (tmp_path / "config.json").write_bytes(bad)
    proc = _cli("edit", "-b", str(tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert (tmp_path / "config.json").read_bytes() == bad


def test_capability_list_order_does_not_matter() -> None:
    for value in ("all,foo", "foo,all"):
        with pytest.raises(RequestError) as ei:
            request_from_env({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": value})
        assert ei.value.value == "foo"


def test_huge_index_is_a_request_error_with_a_short_message() -> None:
    with pytest.raises(RequestError) as ei:
        request_from_env({"NVIDIA_VISIBLE_DEVICES": "1" * 5000})
    assert len(str(ei.value)) < 400


def _copy(sim: simhost.SimulatedHost, tmp_path: Any) -> str:
    root = str(tmp_path / "host")
    subprocess.run(["cp", "-a", sim.root, root], check=True)
    return root


def test_nvidia_major_must_be_195(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _copy(sim, tmp_path)
    p = Path(root, "proc/devices")
    p.write_text(p.read_text().replace("195 nvidia", "10 nvidia"))
    with pytest.raises(DiscoveryError) as ei:
        discover(HostRoot.single(root))
    assert ei.value.value == 10 and ei.value.path == str(p)


@pytest.mark.parametrize("minor", ["254", "255", "1048576"])
def test_gpu_minor_out_of_range(sim: simhost.SimulatedHost, tmp_path: Any, minor: str) -> None:
    root = _copy(sim, tmp_path)
    info = sorted(Path(root, "proc/driver/nvidia/gpus").glob("*/information"))[0]
    text = info.read_text()
    info.write_text(text.replace("Device Minor: \t 0", f"Device Minor: \t {minor}"))
    with pytest.raises(DiscoveryError, match="out of range"):
        discover(HostRoot.single(root))


@pytest.mark.parametrize("which", ["information", "ld.so.cache"])
def test_fifos_in_the_host_trees_do_not_hang(
    sim: simhost.SimulatedHost, tmp_path: Any, which: str
) -> None:
    root = _copy(sim, tmp_path)
    if which == "information":
        path = sorted(Path(root, "proc/driver/nvidia/gpus").glob("*/information"))[0]
    else:
        path = Path(root, "etc/ld.so.cache")
    path.unlink()
    os.mkfifo(path)
    proc = _cli("info", "--driver-root", root, "--dev-root", root)
    assert proc.returncode == 6
    assert b"not a regular file" in proc.stderr


def test_soname_with_a_path_is_not_used(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _copy(sim, tmp_path)
    v = sim.driver_version
    libdir = "/usr/lib/x86_64-linux-gnu"
    entries = [
        ldcache.CacheEntry(
            "libnvidia-ml.so.1/../../../bin/sh", f"{libdir}/libnvidia-ml.so.{v}", 0x0303
        ),
        ldcache.CacheEntry("libcuda.so.1", f"{libdir}/libcuda.so.1", 0x0303),
    ]
    Path(root, "etc/ld.so.cache").write_bytes(ldcache.build(entries))
    h = discover(HostRoot.single(root))
    sonames = [lib.soname for lib in h.libraries]
    assert "libcuda.so.1" in sonames
    assert all("/" not in s and ".." not in s for s in sonames)
    # libnvidia-ml still comes, through the fallback directories, under its real soname
    assert "libnvidia-ml.so.1" in sonames


# -- against real runc ---------------------------------------------------------------------


def _prepare(mode: str, bundle: str, root: str) -> None:
    if mode == "hook":
        _register_hook(bundle, root)
    else:
        proc = _cli("edit", "-b", bundle, "--driver-root", root, "--dev-root", root)
        assert proc.returncode == 0, proc.stderr


def test_foreign_state_pid_is_refused(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str]
) -> None:
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    state = json.dumps({"id": "x", "pid": os.getpid(), "bundle": bundle}).encode()
    proc = _cli("hook", "prestart", "--driver-root", sim.root, "--dev-root", sim.root, stdin=state)
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
    """When the ld.so.cache step fails, the links made before it are removed."""
    need_root_and("runc")
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    _prepare("spec", bundle, sim.root)
    os.mkfifo(os.path.join(bundle, "rootfs/etc/ld.so.cache"))
    proc = run_container(bundle, state_root=str(tmp_path / "runc"), timeout=30)
    assert proc.returncode != 0
    assert not any(p.is_symlink() for p in Path(bundle, "rootfs/usr/lib64").iterdir())


def test_directory_swapped_for_a_link_between_check_and_use(tmp_path: Any) -> None:
    """The image swaps a directory for a link to a host directory after ocihook looked it
    up: the file is made through the descriptor it already holds, never on the host."""
    from ocihook.linux import pathsafe

    rootfs = tmp_path / "rootfs"
    (rootfs / "usr/lib64").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    root_fd = pathsafe.open_root(str(rootfs))
    try:
        parent_fd = pathsafe.makedirs_in_root(root_fd, "/usr/lib64")
        try:
            (rootfs / "usr/lib64").rename(rootfs / "usr/old")
            (rootfs / "usr/lib64").symlink_to(victim)
            fd = pathsafe.create_file_at(parent_fd, "/usr/lib64", "libcuda.so.1")
            os.close(fd)
        finally:
            os.close(parent_fd)
    finally:
        os.close(root_fd)
    assert list(victim.iterdir()) == []
    assert (rootfs / "usr/old/libcuda.so.1").is_file()


def test_fifo_where_a_library_should_be_does_not_block(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    root = _copy(sim, tmp_path)
    lib = Path(root, f"usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.{sim.driver_version}")
    lib.unlink()
    os.mkfifo(lib)
    h = discover(HostRoot.single(root))  # returns: the FIFO is never opened for reading
    assert "libnvidia-ptxjitcompiler.so.1" not in {x.soname for x in h.libraries}
    assert any("libnvidia-ptxjitcompiler" in w for w in h.warnings)


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
