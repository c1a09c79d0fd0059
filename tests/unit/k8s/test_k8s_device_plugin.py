"""The device plugin against the kubelet-role harness (support.FakeKubelet), on the
simulated 8-GPU host: registration, ListAndWatch with health, GetPreferredAllocation by
NUMA node, Allocate per strategy, MIG strategies, time-slicing, kubelet restarts, the CDI
spec it writes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="needs grpcio: pip install 'ocihook[k8s]'")

from support import FakeKubelet

from ocihook.core.hostroot import HostRoot
from ocihook.k8s.deviceplugin import DevicePluginServer, preferred_allocation, wait_until
from ocihook.k8s.inventory import build_inventory
from ocihook.sim import host as simhost

GPU = "nvidia.com/gpu"


@pytest.fixture
def host(tmp_path: Path) -> simhost.SimulatedHost:
    if os.geteuid() != 0:
        pytest.skip("needs root: the simulated GPU nodes are made with mknod (health checks them)")
    sim = simhost.build(str(tmp_path / "host"))
    # NUMA: GPUs 0-3 on node 0, 4-7 on node 1 (sysfs numa_node of each PCI device)
    for g in sim.gpus:
        d = tmp_path / "host" / f"sys/bus/pci/devices/0000:{g.bus_id[9:]}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "numa_node").write_text("0\n" if g.index < 4 else "1\n")
    return sim


@pytest.fixture
def node(tmp_path: Path, host: simhost.SimulatedHost) -> Any:
    plugin_dir = tmp_path / "device-plugins"
    plugin_dir.mkdir()
    kubelet = FakeKubelet(str(plugin_dir))
    servers: list[DevicePluginServer] = []

    def start(**kw: Any) -> DevicePluginServer:
        inv_kw = {k: kw.pop(k) for k in ("mig_strategy", "replicas") if k in kw}
        inventory = build_inventory(HostRoot.single(host.root), hook_command=["ocihook"], **inv_kw)
        server = DevicePluginServer(
            inventory,
            plugin_dir=str(plugin_dir),
            cdi_dir=str(tmp_path / "cdi"),
            interval=0.05,
            **kw,
        )
        server.start()
        servers.append(server)
        return server

    yield kubelet, start, host, tmp_path
    for s in servers:
        s.stop()
    kubelet.stop()


def test_registration_and_list(node: Any) -> None:
    kubelet, start, sim, _ = node
    start()
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 8)
    reg = kubelet.registrations[0]
    assert (reg.version, reg.resource_name, reg.endpoint) == (
        "v1beta1",
        GPU,
        "ocihook-nvidia.com-gpu.sock",
    )
    assert reg.options.get_preferred_allocation_available
    assert sorted(kubelet.devices[GPU]) == sorted(g.uuid for g in sim.gpus)
    assert set(kubelet.devices[GPU].values()) == {"Healthy"}
    by_uuid = {g.uuid: g for g in sim.gpus}
    assert {u: n for u, n in kubelet.numa[GPU].items()} == {
        u: [0 if by_uuid[u].index < 4 else 1] for u in by_uuid
    }


def test_health_turns_unhealthy_and_back(node: Any) -> None:
    kubelet, start, sim, _ = node
    start()
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    g3 = sim.gpus[3]
    dev = Path(sim.root) / f"dev/nvidia{g3.minor}"
    dev.rename(dev.with_suffix(".gone"))
    kubelet.wait(lambda: kubelet.devices[GPU][g3.uuid] == "Unhealthy")
    assert len(kubelet.healthy(GPU)) == 7
    # an unhealthy GPU is never allocated
    with pytest.raises(Exception, match="unhealthy"):
        kubelet.allocate(GPU, [g3.uuid])
    dev.with_suffix(".gone").rename(dev)
    kubelet.wait(lambda: kubelet.devices[GPU][g3.uuid] == "Healthy")
    # the procfs entry of GPU 5 disappears
    g5 = sim.gpus[5]
    proc = Path(sim.root) / f"proc/driver/nvidia/gpus/{g5.bus_id[4:]}"
    shutil.move(proc, str(proc) + ".gone")
    kubelet.wait(lambda: kubelet.devices[GPU][g5.uuid] == "Unhealthy")
    assert kubelet.healthy(GPU) == [g.uuid for g in sim.gpus if g.index != 5]


def test_allocate_cdi_cri_and_spec(node: Any) -> None:
    kubelet, start, sim, tmp = node
    start()
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 8)
    a, b = sim.gpus[0].uuid, sim.gpus[6].uuid
    r = kubelet.allocate(GPU, [a, b], [sim.gpus[2].uuid]).container_responses
    assert [c.name for c in r[0].cdi_devices] == [f"nvidia.com/gpu={a}", f"nvidia.com/gpu={b}"]
    assert [c.name for c in r[1].cdi_devices] == [f"nvidia.com/gpu={sim.gpus[2].uuid}"]
    assert (dict(r[0].envs), list(r[0].mounts), list(r[0].devices), dict(r[0].annotations)) == (
        {},
        [],
        [],
        {},
    )
    spec = json.loads((tmp / "cdi/ocihook-k8s_nvidia.com_gpu.json").read_text())
    assert spec["kind"] == GPU
    names = {d["name"] for d in spec["devices"]}
    assert {a, b, "0", "6", "all"} <= names


def test_spec_kept_fresh(node: Any) -> None:
    _, start, _, tmp = node
    server = start()
    path = tmp / "cdi/ocihook-k8s_nvidia.com_gpu.json"
    good = path.read_bytes()
    path.unlink()
    assert wait_until(path.exists)
    assert path.read_bytes() == good
    path.write_text("{}")
    assert wait_until(lambda: path.exists() and path.read_bytes() == good)
    assert wait_until(lambda: server.spec_writes >= 3)


def test_allocate_envvar_volume_mounts_annotations(node: Any) -> None:
    kubelet, start, sim, _ = node
    start(strategies=("envvar", "volume-mounts", "cdi-annotations"), pass_device_specs=True)
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 8)
    g = sim.gpus[2]  # minor 3
    r = kubelet.allocate(GPU, [g.uuid]).container_responses[0]
    assert list(r.cdi_devices) == []
    assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert [(m.container_path, m.host_path, m.read_only) for m in r.mounts] == [
        (f"/var/run/nvidia-container-devices/{g.uuid}", "/dev/null", True)
    ]
    assert [(d.container_path, d.permissions) for d in r.devices] == [
        ("/dev/nvidiactl", "rw"),
        ("/dev/nvidia-uvm", "rw"),
        ("/dev/nvidia-uvm-tools", "rw"),
        ("/dev/nvidia3", "rw"),
    ]
    assert r.devices[3].host_path == os.path.join(sim.root, "dev/nvidia3")
    ((key, value),) = r.annotations.items()
    assert (
        key.startswith("cdi.k8s.io/ocihook-k8s_nvidia.com-") and value == f"nvidia.com/gpu={g.uuid}"
    )


def test_envvar_alone(node: Any) -> None:
    kubelet, start, sim, _ = node
    start(strategies=("envvar",))
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 8)
    r = kubelet.allocate(GPU, [sim.gpus[1].uuid, sim.gpus[7].uuid]).container_responses[0]
    assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": f"{sim.gpus[1].uuid},{sim.gpus[7].uuid}"}


def test_unknown_device_refused(node: Any) -> None:
    import grpc

    kubelet, start, _, _ = node
    start()
    kubelet.wait(lambda: GPU in kubelet.devices)
    with pytest.raises(grpc.RpcError) as e:
        kubelet.allocate(GPU, ["GPU-not-there"])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown nvidia.com/gpu device 'GPU-not-there'" in e.value.details()


def test_preferred_allocation_numa(node: Any) -> None:
    kubelet, start, sim, _ = node
    start()
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 8)
    u = [g.uuid for g in sim.gpus]
    # node 0 has 0,1,2 free; node 1 has 4..7: a request for 3 fits node 0 best
    got = kubelet.preferred(GPU, [u[0], u[1], u[2], u[4], u[5], u[6], u[7]], [], 3)
    assert got == [u[0], u[1], u[2]]
    # must include GPU 5 (node 1): the rest from node 1 too
    assert kubelet.preferred(GPU, u, [u[5]], 2) == [u[5], u[4]]
    # 6 fit on no node: the fuller node first, then the other
    got6 = kubelet.preferred(GPU, u[1:], [], 6)
    assert got6 == [u[4], u[5], u[6], u[7], u[1], u[2]]


def test_mig_strategies(node: Any) -> None:
    kubelet, start, sim, _ = node
    start(mig_strategy="mixed")
    kubelet.wait(
        lambda: (
            len(kubelet.devices.get(GPU, {})) == 7
            and len(kubelet.devices.get("nvidia.com/mig", {})) == 2
        )
    )
    mig = sorted(kubelet.devices["nvidia.com/mig"])
    assert mig == [f"{sim.gpus[1].uuid}::mig1.0", f"{sim.gpus[1].uuid}::mig2.0"]
    r = kubelet.allocate("nvidia.com/mig", [mig[1]]).container_responses[0]
    assert [c.name for c in r.cdi_devices] == ["nvidia.com/gpu=1:1"]
    assert sim.gpus[1].uuid not in kubelet.devices[GPU]


def test_mig_single(node: Any) -> None:
    kubelet, start, sim, _ = node
    start(mig_strategy="single")
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 2)
    assert sorted(kubelet.devices[GPU]) == [
        f"{sim.gpus[1].uuid}::mig1.0",
        f"{sim.gpus[1].uuid}::mig2.0",
    ]


def test_time_slicing(node: Any) -> None:
    kubelet, start, sim, _ = node
    start(replicas=3)
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 24)
    u0 = sim.gpus[0].uuid
    r = kubelet.allocate(GPU, [f"{u0}::0", f"{u0}::2"]).container_responses[0]
    assert [c.name for c in r.cdi_devices] == [f"nvidia.com/gpu={u0}"]
    # preferred spreads two replicas over two GPUs
    avail = sorted(kubelet.devices[GPU])
    got = kubelet.preferred(GPU, avail, [], 2)
    assert len({g.split("::")[0] for g in got}) == 2


def test_kubelet_restart_reregisters(node: Any) -> None:
    kubelet, start, _, _ = node
    start()
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 8)
    assert len(kubelet.registrations) == 1
    kubelet.restart()
    kubelet.wait(lambda: len(kubelet.registrations) == 2 and len(kubelet.devices.get(GPU, {})) == 8)
    assert (
        kubelet.allocate(GPU, [next(iter(kubelet.devices[GPU]))]).container_responses[0].cdi_devices
    )


def test_plugin_restart(node: Any) -> None:
    kubelet, start, _, _ = node
    first = start()
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 8)
    first.stop()
    start()
    kubelet.wait(lambda: len(kubelet.registrations) == 2)
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)


def test_preferred_allocation_pure() -> None:
    from ocihook.k8s.inventory import K8sDevice

    devs = [
        K8sDevice(f"d{i}", GPU, f"d{i}", "x", "x", "nvidia", "b", numa_node=i // 2)
        for i in range(6)
    ]
    ids = [d.id for d in devs]
    assert preferred_allocation(devs, ids, [], 2) == ["d0", "d1"]
    assert preferred_allocation(devs, ids[1:], [], 2) == ["d2", "d3"]  # best fit leaves d1 alone
    assert preferred_allocation(devs, ids, ["d5"], 2) == ["d5", "d4"]
    assert preferred_allocation(devs, ids, [], 0) == []


def test_metrics_endpoint(node: Any) -> None:
    import urllib.request

    from ocihook.k8s.features import serve_metrics

    kubelet, start, sim, _ = node
    server = start()
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 8)
    kubelet.allocate(GPU, [sim.gpus[0].uuid])
    httpd = serve_metrics(server, "127.0.0.1:0")
    try:
        port = httpd.server_address[1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            text = r.read().decode()
    finally:
        httpd.shutdown()
    lines = set(text.splitlines())
    assert 'ocihook_k8s_devices{resource="nvidia.com/gpu",health="Healthy"} 8' in lines
    assert 'ocihook_k8s_devices{resource="nvidia.com/gpu",health="Unhealthy"} 0' in lines
    assert 'ocihook_k8s_allocations_total{resource="nvidia.com/gpu"} 1' in lines
    assert 'ocihook_k8s_registered{resource="nvidia.com/gpu"} 1' in lines
    assert 'ocihook_k8s_registrations_total{resource="nvidia.com/gpu"} 1' in lines
    assert "# TYPE ocihook_k8s_allocations_total counter" in lines


def test_nfd_features(host: simhost.SimulatedHost) -> None:
    from ocihook.k8s.features import nfd_features

    inv = build_inventory(HostRoot.single(host.root), mig_strategy="mixed")
    text = nfd_features(inv, {"nvidia": host.gpus[0].model}, mig_capable=True)
    assert text.splitlines() == [
        "ocihook.io/nvidia.com.gpu.count=7",
        "ocihook.io/nvidia.com.mig.count=2",
        "ocihook.io/nvidia.devices=9",
        f"ocihook.io/nvidia.driver.major={host.driver_version.split('.')[0]}",
        f"ocihook.io/nvidia.driver.version={host.driver_version}",
        "ocihook.io/nvidia.mig.capable=true",
        "ocihook.io/nvidia.present=true",
        "ocihook.io/nvidia.product=NVIDIA-A100-SXM4-80GB",
    ]


def test_cli_list(host: simhost.SimulatedHost) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "ocihook", "k8s", "device-plugin", "--driver-root", host.root,
         "--dev-root", host.root, "--list", "--replicas", "2"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    data = json.loads(out)
    assert list(data) == [GPU]
    assert [d["id"] for d in data[GPU]][:2] == [
        f"{host.gpus[0].uuid}::0",
        f"{host.gpus[0].uuid}::1",
    ]
    assert {d["health"] for d in data[GPU]} == {"Healthy"}
    assert data[GPU][0]["numa_node"] == 0 and data[GPU][-1]["numa_node"] == 1


def test_cli_serves_until_sigterm(node: Any, tmp_path: Path) -> None:
    """``ocihook k8s device-plugin`` as a process: registers, serves, writes its spec and
    metrics, removes its socket on SIGTERM."""
    import signal
    import subprocess
    import sys

    kubelet, _, sim, _ = node
    plugin_dir = kubelet.plugin_dir
    proc = subprocess.Popen(
        [sys.executable, "-m", "ocihook", "k8s", "device-plugin", "--driver-root", sim.root,
         "--dev-root", sim.root, "--plugin-dir", plugin_dir, "--cdi-dir", str(tmp_path / "cli-cdi"),
         "--metrics-address", "127.0.0.1:0", "--interval", "0.1"],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8, timeout=60)
        assert (tmp_path / "cli-cdi/ocihook-k8s_nvidia.com_gpu.json").exists()
        socket = os.path.join(plugin_dir, "ocihook-nvidia.com-gpu.sock")
        assert os.path.exists(socket)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert not os.path.exists(socket)
        err = proc.stderr.read() if proc.stderr else ""
        assert f"serving nvidia.com/gpu (8 devices) on {socket}" in err
        assert "metrics on http://127.0.0.1:" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_preferred_allocation_pcie_switch(tmp_path: Path) -> None:
    """GPUs 0,1 behind switch A, 2,3 behind switch B (both on NUMA node 0), as sysfs links
    them: with 0, 2 and 3 free a request for two takes the pair behind one switch."""
    sim = simhost.build(str(tmp_path / "host"), make_dev_nodes=False)
    sys_dir = tmp_path / "host/sys"
    for g in sim.gpus[:4]:
        bdf = f"0000:{g.bus_id[9:]}"
        up = "0000:01:00.0" if g.index < 2 else "0000:11:00.0"
        root_port = "0000:00:01.0" if g.index < 2 else "0000:00:02.0"
        down = f"0000:{'02' if g.index < 2 else '12'}:0{g.index + 1}.0"
        real = sys_dir / "devices/pci0000:00" / root_port / up / down / bdf
        link = sys_dir / "bus/pci/devices" / bdf
        real.parent.mkdir(parents=True)
        shutil.move(str(link), str(real))
        (real / "numa_node").write_text("0\n")
        link.symlink_to(os.path.relpath(real, link.parent))
    inv = build_inventory(HostRoot.single(sim.root))
    devs = inv.devices[GPU]
    assert [d.pci_switch for d in devs[:5]] == ["0000:01:00.0"] * 2 + ["0000:11:00.0"] * 2 + [None]
    u = [d.id for d in devs]
    assert preferred_allocation(devs, [u[0], u[2], u[3]], [], 2) == [u[2], u[3]]
    assert preferred_allocation(devs, u[:4], [u[1]], 2) == [u[1], u[0]]


def test_amd_intel_and_mixed_resources(tmp_path: Path) -> None:
    """AMD GPUs and partitions as amd.com/gpu, Intel GPUs as gpu.intel.com/<driver>, a
    mixed host with both NVIDIA and AMD resources; Allocate names their CDI devices."""
    from ocihook.k8s.deviceplugin import ResourcePlugin
    from ocihook.sim import vendors

    amd = vendors.build_amd(str(tmp_path / "amd"))
    inv = build_inventory(HostRoot.single(amd.root))
    assert list(inv.devices) == ["amd.com/gpu"]
    devs = inv.devices["amd.com/gpu"]
    assert [d.cdi_name for d in devs] == [f"amd.com/gpu={i}" for i in range(5)]
    assert [d.id for d in devs][3:] == [
        f"{devs[3].id.rsplit('-p', 1)[0]}-p0",
        f"{devs[3].id.rsplit('-p', 1)[0]}-p1",
    ]
    assert ("/dev/kfd", os.path.join(amd.root, "dev/kfd")) in devs[0].nodes
    plugin = ResourcePlugin("amd.com/gpu", devs, str(tmp_path), strategies=("cdi-cri", "envvar"))
    r = plugin.allocate_one([devs[1].id, devs[4].id])
    assert [c.name for c in r.cdi_devices] == ["amd.com/gpu=1", "amd.com/gpu=4"]
    assert dict(r.envs) == {"AMD_VISIBLE_DEVICES": "1,4"}
    assert set(inv.specs) == {"amd.com/gpu"}

    intel = vendors.build_intel(str(tmp_path / "intel"))
    inv = build_inventory(HostRoot.single(intel.root))
    assert {r: [d.cdi_name for d in ds] for r, ds in inv.devices.items()} == {
        "gpu.intel.com/i915": ["intel.com/gpu=0"],
        "gpu.intel.com/xe": ["intel.com/gpu=1"],
    }

    mixed = vendors.build_mixed(str(tmp_path / "mixed"))
    inv = build_inventory(HostRoot.single(mixed.root))
    assert {r: len(ds) for r, ds in inv.devices.items()} == {"nvidia.com/gpu": 2, "amd.com/gpu": 2}
    only = build_inventory(HostRoot.single(mixed.root), resources=["amd.com"])
    assert list(only.devices) == ["amd.com/gpu"]
    with pytest.raises(Exception, match="volume-mounts strategy is NVIDIA's convention only"):
        ResourcePlugin(
            "amd.com/gpu", only.devices["amd.com/gpu"], str(tmp_path), strategies=("volume-mounts",)
        )


def test_plugin_waits_for_kubelet(tmp_path: Path, host: simhost.SimulatedHost) -> None:
    """Started before kubelet, the plugin serves and registers once kubelet.sock appears;
    without waiting, a missing kubelet socket is an error naming it."""
    from ocihook.k8s.deviceplugin import KubeletError

    plugin_dir = tmp_path / "dp"
    plugin_dir.mkdir()
    inventory = build_inventory(HostRoot.single(host.root), hook_command=["ocihook"])
    server = DevicePluginServer(inventory, plugin_dir=str(plugin_dir), cdi_dir=None, interval=0.05)
    with pytest.raises(KubeletError, match="kubelet's device plugin socket does not exist"):
        server.start()
    server.stop()
    server = DevicePluginServer(inventory, plugin_dir=str(plugin_dir), cdi_dir=None, interval=0.05)
    server.start(wait_for_kubelet=True)
    try:
        assert os.path.exists(plugin_dir / "ocihook-nvidia.com-gpu.sock")
        kubelet = FakeKubelet(str(plugin_dir))
        try:
            kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
            assert server.plugin(GPU).metrics.registered
        finally:
            kubelet.stop()
    finally:
        server.stop()


def _pynvml_double(monkeypatch: pytest.MonkeyPatch, sim: simhost.SimulatedHost) -> Any:
    import importlib.util
    import sys

    from support import DOUBLES

    spec = importlib.util.spec_from_file_location("pynvml", os.path.join(DOUBLES, "pynvml.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.load({
        "driver_version": sim.driver_version,
        "gpus": [{"uuid": g.uuid, "minor": g.minor, "bus_id": g.bus_id, "name": g.model} for g in sim.gpus],
    })  # fmt: skip
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module


def test_nvml_reports_a_lost_gpu(node: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GPU NVML reports lost (Xid 79: node and procfs entry still there) turns
    Unhealthy, with its MIG devices, and Healthy again when NVML answers again."""
    kubelet, start, sim, _ = node
    nvml = _pynvml_double(monkeypatch, sim)
    server = start(nvml_health=True, mig_strategy="mixed")
    kubelet.wait(
        lambda: len(kubelet.healthy(GPU)) == 7 and len(kubelet.healthy("nvidia.com/mig")) == 2
    )
    gpus = nvml._description["gpus"]
    gpus[2]["errors"] = {"nvmlDeviceGetUUID": nvml.NVML_ERROR_GPU_IS_LOST}
    gpus[1]["errors"] = {"nvmlDeviceGetUUID": nvml.NVML_ERROR_RESET_REQUIRED}  # the MIG GPU
    kubelet.wait(lambda: kubelet.devices[GPU][sim.gpus[2].uuid] == "Unhealthy")
    kubelet.wait(lambda: kubelet.healthy("nvidia.com/mig") == [])
    assert len(kubelet.healthy(GPU)) == 6
    gpus[2]["errors"] = {"nvmlDeviceGetUUID": nvml.NVML_ERROR_UNKNOWN}  # not "lost": no change
    gpus[1]["errors"] = {}
    kubelet.wait(
        lambda: len(kubelet.healthy(GPU)) == 7 and len(kubelet.healthy("nvidia.com/mig")) == 2
    )
    server.stop()
    assert nvml.init_refcount() == 0
