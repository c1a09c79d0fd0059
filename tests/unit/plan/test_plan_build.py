"""The plan is a pure value computed from host + request."""

from __future__ import annotations

import json
import os

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO

from ocihook.core.errors import RequestError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import NvidiaHost, discover
from ocihook.plan.build import ContainerLayout, make_plan
from ocihook.request.nvidia import request_from_env
from ocihook.sim import host as simhost

with open(os.path.join(REPO, "specs/plan.schema.json")) as _f:
    SCHEMA = json.load(_f)


@pytest.fixture(scope="module")
def host(sim: simhost.SimulatedHost) -> NvidiaHost:
    return discover(HostRoot.single(sim.root))


def test_two_gpus_compute_utility(host: NvidiaHost, sim: simhost.SimulatedHost) -> None:
    req = request_from_env({"NVIDIA_VISIBLE_DEVICES": f"0,{sim.gpus[3].uuid}"})
    plan = make_plan(host, req, ContainerLayout("/usr/lib64"))
    e = plan.edits
    minor3 = sim.gpus[3].minor
    assert [(n.path, n.major, n.minor) for n in e.device_nodes] == [
        ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia-uvm", simhost.UVM_MAJOR, 0),
        ("/dev/nvidia-uvm-tools", simhost.UVM_MAJOR, 1),
        ("/dev/nvidia0", 195, 0),
        (f"/dev/nvidia{minor3}", 195, minor3),
    ]
    assert minor3 != 3  # the simulated host maps index 3 to minor 2
    assert [(r.type, r.major, r.minor, r.access) for r in e.cgroup_rules] == [
        ("c", n.major, n.minor, "rw") for n in e.device_nodes
    ]
    v = sim.driver_version
    dests = {m.destination: m for m in e.mounts}
    cuda = dests[f"/usr/lib64/libcuda.so.{v}"]
    assert cuda.options == ("ro", "nosuid", "nodev", "bind")
    assert cuda.source.endswith(f"/nvidia/current/libcuda.so.{v}")
    links = {s.link: s.target for s in e.symlinks}
    assert links["/usr/lib64/libcuda.so.1"] == f"libcuda.so.{v}"
    assert links["/usr/lib64/libcuda.so"] == "libcuda.so.1"
    assert links["/usr/lib64/libnvidia-nvvm.so.4"] == f"libnvidia-nvvm.so.{v}"
    assert f"/usr/lib64/libnvidia-gpucomp.so.{v}" not in links  # soname == file name
    assert "/usr/lib64/libcuda.so.1" in e.ldcache_libraries
    assert f"/usr/lib64/libnvidia-gpucomp.so.{v}" in e.ldcache_libraries
    assert e.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    assert plan.gpus == ((0, sim.gpus[0].uuid, 0), (3, sim.gpus[3].uuid, minor3))
    jsonschema.validate(plan.to_dict(), SCHEMA)


def test_utility_only_has_no_uvm_and_no_cuda(host: NvidiaHost) -> None:
    req = request_from_env({"NVIDIA_VISIBLE_DEVICES": "1", "NVIDIA_DRIVER_CAPABILITIES": "utility"})
    e = make_plan(host, req, ContainerLayout()).edits
    assert [n.path for n in e.device_nodes] == ["/dev/nvidiactl", "/dev/nvidia1"]
    assert {os.path.basename(m.destination).split(".so")[0] for m in e.mounts} == {
        "libnvidia-ml",
        "libnvidia-cfg",
        "socket",  # /var/run/nvidia-persistenced/socket (utility)
    }


def test_none_gives_driver_but_no_gpu(host: NvidiaHost) -> None:
    e = make_plan(
        host, request_from_env({"NVIDIA_VISIBLE_DEVICES": "none"}), ContainerLayout()
    ).edits
    assert not any(
        n.path.startswith("/dev/nvidia") and n.path[11:].isdigit() for n in e.device_nodes
    )
    assert "/dev/nvidiactl" in [n.path for n in e.device_nodes]
    assert e.mounts


def test_void_is_empty(host: NvidiaHost) -> None:
    plan = make_plan(host, request_from_env({}), ContainerLayout())
    assert plan.edits.is_empty() and plan.gpus == ()


def test_debian_layout(host: NvidiaHost) -> None:
    plan = make_plan(
        host,
        request_from_env({"NVIDIA_VISIBLE_DEVICES": "0"}),
        ContainerLayout.for_image(True, "x86_64"),
    )
    libs = [m.destination for m in plan.edits.mounts if ".so" in m.destination]
    assert libs and all(d.startswith("/usr/lib/x86_64-linux-gnu/") for d in libs)


def test_every_capability_is_planned(host: NvidiaHost) -> None:
    req = request_from_env(
        {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "video,compute,display"}
    )
    plan = make_plan(host, req, ContainerLayout())
    assert plan.capabilities == ("compute", "display", "video")
    assert not any("not provided" in w for w in plan.warnings)
    paths = [n.path for n in plan.edits.device_nodes]
    assert "/dev/nvidia-modeset" in paths  # display
    assert "/dev/dri/card1" in paths and "/dev/dri/renderD128" in paths  # GPU 0's DRM nodes
    links = {s.link: s.target for s in plan.edits.symlinks}
    assert links["/dev/dri/by-path/pci-0000:07:00.0-card"] == "../card1"
    assert plan.edits.proc_mask is not None
    assert plan.edits.proc_mask.gpu_dirs == ("0000:07:00.0",)
    jsonschema.validate(plan.to_dict(), SCHEMA)


def test_unknown_gpu(host: NvidiaHost) -> None:
    with pytest.raises(RequestError) as ei:
        make_plan(host, request_from_env({"NVIDIA_VISIBLE_DEVICES": "8"}), ContainerLayout())
    assert ei.value.value == "8"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 7), max_size=8), st.sampled_from(["utility", "compute", "all", ""]))
def test_exactly_the_requested_gpus(host: NvidiaHost, indices: list[int], caps: str) -> None:
    env = {
        "NVIDIA_VISIBLE_DEVICES": ",".join(map(str, indices)) or "void",
        "NVIDIA_DRIVER_CAPABILITIES": caps,
    }
    plan = make_plan(host, request_from_env(env), ContainerLayout())
    wanted = {host.gpus[i].minor for i in indices}
    gpu_nodes = {n.minor for n in plan.edits.device_nodes if n.major == 195 and n.minor < 254}
    assert gpu_nodes == wanted
    # one allow rule per node, nothing wider
    assert len(plan.edits.cgroup_rules) == len(plan.edits.device_nodes)
    assert all(r.major is not None and r.minor is not None for r in plan.edits.cgroup_rules)
    # the plan is deterministic
    assert make_plan(host, request_from_env(env), ContainerLayout()) == plan
    if indices:
        jsonschema.validate(plan.to_dict(), SCHEMA)


def test_mig_device_request(host: NvidiaHost, sim: simhost.SimulatedHost) -> None:
    """MIG device 1:1 (GPU 1's second GPU instance): the parent's node and exactly that
    instance's two capability nodes; by the older MIG-GPU-<uuid>/<gi>/<ci> name too."""
    gpu1 = sim.gpus[1]
    gi = simhost.MIG_INSTANCES[1]
    g_minor = 3 + gpu1.minor * 135 + gi * 9
    want = {
        ("/dev/nvidia1", 195, gpu1.minor),
        (f"/dev/nvidia-caps/nvidia-cap{g_minor}", simhost.CAPS_MAJOR, g_minor),
        (f"/dev/nvidia-caps/nvidia-cap{g_minor + 1}", simhost.CAPS_MAJOR, g_minor + 1),
    }
    for name in ("1:1", f"MIG-{gpu1.uuid}/{gi}/0"):
        req = request_from_env(
            {"NVIDIA_VISIBLE_DEVICES": name, "NVIDIA_DRIVER_CAPABILITIES": "utility"}
        )
        plan = make_plan(host, req, ContainerLayout())
        got = {(n.path, n.major, n.minor) for n in plan.edits.device_nodes} - {
            ("/dev/nvidiactl", 195, 255)
        }
        assert got == want, name
        assert {(r.major, r.minor) for r in plan.edits.cgroup_rules} == {
            (m, n) for _p, m, n in want
        } | {(195, 255)}
    with pytest.raises(RequestError) as ei:
        make_plan(host, request_from_env({"NVIDIA_VISIBLE_DEVICES": "1:5"}), ContainerLayout())
    assert "1:0" in str(ei.value) and "1:1" in str(ei.value)  # the hint lists MIG devices
