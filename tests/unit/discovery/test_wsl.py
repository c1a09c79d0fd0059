"""WSL2 hosts through the whole discovery: ``discover`` on a tree from
:mod:`ocihook.sim.wsl` (no /proc/driver/nvidia), the driver version from the driver
store's INF, the plan, and the ``info``/``list``/``cdi generate`` commands."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import run_cli

from ocihook.cdi.hookargs import hook_data
from ocihook.core.errors import DiscoveryError, RequestError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.devices import parse_driver_ver, windows_to_nvidia_version
from ocihook.discovery.nvidia import discover
from ocihook.plan.build import ContainerLayout, make_plan
from ocihook.request.nvidia import request_from_env
from ocihook.sim import wsl as simwsl

STORE_DIR = f"/usr/lib/wsl/drivers/{simwsl.STORE}"


@pytest.fixture
def wsl_host(tmp_path: Path) -> simwsl.SimulatedWslHost:
    if os.geteuid() != 0:
        pytest.skip("making /dev/dxg needs root (mknod)")
    return simwsl.build(str(tmp_path / "wsl"))


def test_windows_versions() -> None:
    assert windows_to_nvidia_version("31.0.15.3667") == "536.67"
    assert windows_to_nvidia_version("32.0.15.6094") == "560.94"
    assert windows_to_nvidia_version("30.0.14.7141") == "471.41"
    assert windows_to_nvidia_version("32.0.15.0605") == "506.05"
    assert windows_to_nvidia_version("32.0.15.605") == "506.05"
    for bad in ("", "31.0.15", "31.0.15.36x7", "31.0.15.36671", "a.b.c.d", "31.0.15.3667.1"):
        assert windows_to_nvidia_version(bad) is None, bad


@given(st.integers(100, 999), st.integers(0, 99), st.integers(20, 40))
def test_windows_version_round_trip(branch: int, release: int, major: int) -> None:
    digits = f"{branch}{release:02d}"
    windows = f"{major}.0.1{digits[0]}.{digits[1:]}"
    assert windows_to_nvidia_version(windows) == f"{branch}.{release:02d}"


def test_parse_driver_ver() -> None:
    text = "[Version]\r\nSignature = x\r\n driverver = 07/11/2023, 31.0.15.3667 ; comment\r\n"
    assert parse_driver_ver(text) == "31.0.15.3667"
    assert parse_driver_ver("DriverVer = 07/11/2023\n") is None
    assert parse_driver_ver("DriverVersion = 1,2.3.4.5\n") is None


def test_discover_wsl_host(wsl_host: simwsl.SimulatedWslHost) -> None:
    """The procfs version file is missing: discovery takes the WSL2 path, not the error."""
    root = wsl_host.root
    assert not os.path.exists(os.path.join(root, "proc/driver/nvidia"))
    h = discover(HostRoot.single(root))
    assert (h.driver_version, h.gpus, h.gpu_backend) == ("536.67", (), "wsl")
    assert (h.control_nodes, h.libraries, h.warnings) == ((), (), ())
    assert h.wsl is not None
    assert (h.wsl.dxg.major, h.wsl.dxg.minor) == (10, simwsl.DXG_MINOR)
    assert h.wsl.driver_stores == (wsl_host.store,)
    files = {f.name: (f.path, f.soname) for f in h.wsl.driver_files}
    assert files["libcuda.so.1.1"] == (f"{STORE_DIR}/libcuda.so.1.1", "libcuda.so.1")
    assert files["libdxcore.so"] == ("/usr/lib/wsl/lib/libdxcore.so", None)
    assert files["nvidia-smi"] == (f"{STORE_DIR}/nvidia-smi", None)
    assert h.wsl.missing == ()


def test_wsl_version_unknown_without_inf(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("making /dev/dxg needs root (mknod)")
    w = simwsl.build(str(tmp_path / "wsl"), inf=False)
    h = discover(HostRoot.single(w.root))
    assert h.driver_version == ""
    assert len(h.warnings) == 1 and "WSL driver version is unknown" in h.warnings[0]
    env = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_REQUIRE_DRIVER": "driver>=999"}
    p = make_plan(h, request_from_env(env), ContainerLayout())
    assert p.edits.cuda_compat is None  # nothing to compare an image's compat with
    assert len(p.edits.device_nodes) == 1


def test_wsl_plan(wsl_host: simwsl.SimulatedWslHost) -> None:
    h = discover(HostRoot.single(wsl_host.root))
    p = make_plan(h, request_from_env({"NVIDIA_VISIBLE_DEVICES": "all"}), ContainerLayout())
    e = p.edits
    assert [(n.path, n.major, n.minor) for n in e.device_nodes] == [
        ("/dev/dxg", 10, simwsl.DXG_MINOR)
    ]
    assert [(r.major, r.minor, r.access) for r in e.cgroup_rules] == [(10, simwsl.DXG_MINOR, "rw")]
    assert {m.destination for m in e.mounts} == {f.path for f in h.wsl.driver_files}  # type: ignore[union-attr]
    assert all(m.options == ("ro", "nosuid", "nodev", "bind") for m in e.mounts)
    assert {(s.link, s.target) for s in e.symlinks} == {
        (f"{STORE_DIR}/libcuda.so.1", "libcuda.so.1.1"),
        ("/usr/bin/nvidia-smi", f"{STORE_DIR}/nvidia-smi"),
    }
    assert f"{STORE_DIR}/libcuda.so.1" in e.ldcache_libraries
    assert f"{STORE_DIR}/nvcubins.bin" not in e.ldcache_libraries
    assert e.proc_mask is None
    assert e.cuda_compat is not None and e.cuda_compat.host_major == 536
    assert e.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    # "none": the driver files, no device
    none = make_plan(h, request_from_env({"NVIDIA_VISIBLE_DEVICES": "none"}), ContainerLayout())
    assert none.edits.device_nodes == () and none.edits.mounts == e.mounts
    assert p.warnings == ()  # the default capabilities: compute, utility
    env = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,graphics"}
    graphics = make_plan(h, request_from_env(env), ContainerLayout())
    assert graphics.warnings == (
        "on WSL2 the driver files serve compute and utility; nothing else is given for graphics",
    )
    void = make_plan(h, request_from_env({"NVIDIA_VISIBLE_DEVICES": "void"}), ContainerLayout())
    assert void.edits.is_empty()


def test_wsl_gpu_by_index_is_refused(wsl_host: simwsl.SimulatedWslHost) -> None:
    h = discover(HostRoot.single(wsl_host.root))
    with pytest.raises(RequestError) as ei:
        make_plan(h, request_from_env({"NVIDIA_VISIBLE_DEVICES": "0,1"}), ContainerLayout())
    text = str(ei.value)
    assert "\n" not in text and "/dev/dxg" in text
    assert "NVIDIA_VISIBLE_DEVICES" in text and "NVIDIA_VISIBLE_DEVICES=all" in text


def test_wsl_dxg_without_driver_files(wsl_host: simwsl.SimulatedWslHost) -> None:
    subprocess.run(["rm", "-rf", os.path.join(wsl_host.root, "usr/lib/wsl")], check=True)
    with pytest.raises(DiscoveryError) as ei:
        discover(HostRoot.single(wsl_host.root))
    text = str(ei.value)
    assert "WSL2 host (/dev/dxg) without the NVIDIA driver files" in text
    assert "--driver-root" in text and "\n" not in text
    r = run_cli("info", "--driver-root", wsl_host.root, "--dev-root", wsl_host.root)
    assert r.returncode == 6 and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_not_wsl_without_dxg(tmp_path: Path) -> None:
    """WSL files but no /dev/dxg: still "no driver", as before."""
    w = simwsl.build(str(tmp_path / "wsl"), make_dev_nodes=False)
    with pytest.raises(DiscoveryError, match="NVIDIA driver version file"):
        discover(HostRoot.single(w.root))


def test_wsl_cli_info_list_cdi(wsl_host: simwsl.SimulatedWslHost) -> None:
    root = wsl_host.root
    roots = ("--driver-root", root, "--dev-root", root)
    r = run_cli("info", "--json", *roots)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert (info["driverVersion"], info["gpus"], info["gpuBackend"]) == ("536.67", [], "wsl")
    assert info["wsl"]["dxg"] == f"/dev/dxg (10:{simwsl.DXG_MINOR})"
    assert info["wsl"]["driverStores"] == [wsl_host.store]
    r = run_cli("info", *roots)
    assert r.returncode == 0 and "NVRM version:   536.67" in r.stdout
    assert "WSL2 device:    /dev/dxg" in r.stdout
    r = run_cli("list", "--json", *roots)
    assert r.returncode == 0, r.stderr
    listed = json.loads(r.stdout)
    assert listed["devices"] == [os.path.join(root, "dev/dxg")]
    assert os.path.join(wsl_host.store, "libcuda.so.1.1") in listed["libraries"]
    assert listed["binaries"] == [os.path.join(wsl_host.store, "nvidia-smi")]
    r = run_cli("list", "-d", "0", *roots)
    assert r.returncode == 5 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "--device all" in r.stderr
    r = run_cli("cdi", "generate", "--format", "json", *roots)
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)
    assert [d["name"] for d in spec["devices"]] == ["all"]
    assert spec["devices"][0]["containerEdits"]["deviceNodes"][0]["path"] == "/dev/dxg"
    common = spec["containerEdits"]
    assert f"{STORE_DIR}/libcuda.so.1.1" in {m["containerPath"] for m in common["mounts"]}
    args = common["hooks"][0]["args"]
    assert "--mask-proc" not in args
    data = hook_data(args)
    assert data is not None
    assert f"libcuda.so.1.1::{STORE_DIR}/libcuda.so.1" in data[1]
    assert "/usr/local/cuda/compat::536.67" in args


def test_simhost_vendor_wsl(tmp_path: Path) -> None:
    r = run_cli("simhost", str(tmp_path / "w"), "--vendor", "wsl", "--no-dev-nodes")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path / "w")
    assert (tmp_path / "w" / "usr/lib/wsl/drivers" / simwsl.STORE / "nv_dispi.inf").is_file()
    r = run_cli("simhost", str(tmp_path / "c"), "--vendor", "cos", "--no-dev-nodes")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(tmp_path / "c"), str(tmp_path / "c/home/kubernetes/bin/nvidia")]


def test_wsl_nvml_backend_is_not_silently_ignored(wsl_host: simwsl.SimulatedWslHost) -> None:
    h = discover(HostRoot.single(wsl_host.root), gpu_backend="nvml")
    assert h.warnings == ("GPUs are not enumerated on WSL2 (--gpu-backend nvml not used)",)
    assert discover(HostRoot.single(wsl_host.root), gpu_backend="auto").warnings == ()
