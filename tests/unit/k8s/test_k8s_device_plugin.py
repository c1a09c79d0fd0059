"""The device plugin against the kubelet-role harness (support.FakeKubelet), on the
simulated 8-GPU host: registration, ListAndWatch with health, GetPreferredAllocation by
NUMA node, Allocate per strategy, MIG strategies (per-profile resources through the
``pynvml`` double described from the simulated host), time-slicing, kubelet restarts, the
CDI spec it writes, the NFD labels."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="needs grpcio: pip install 'ocihook[k8s]'")

from hypothesis import given
from hypothesis import strategies as st
from support import FakeKubelet, load_pynvml_double, run_cli, sim_nvml

from ocihook.core.cudaversion import cuda_for_driver
from ocihook.core.hostroot import HostRoot
from ocihook.discovery import nvml
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
    plugin_dir = tmp_path / "dp"  # short: gRPC binds a unix socket path of at most 105 bytes
    plugin_dir.mkdir()
    kubelet = FakeKubelet(str(plugin_dir))
    servers: list[DevicePluginServer] = []

    def start(**kw: Any) -> DevicePluginServer:
        inv_kw = {k: kw.pop(k) for k in ("mig_strategy", "replicas", "gpu_backend") if k in kw}
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
    assert [c.name for c in r[0].cdi_devices] == [
        f"k8s.ocihook.io/nvidia-gpu={a}",
        f"k8s.ocihook.io/nvidia-gpu={b}",
    ]
    assert [c.name for c in r[1].cdi_devices] == [f"k8s.ocihook.io/nvidia-gpu={sim.gpus[2].uuid}"]
    assert (dict(r[0].envs), list(r[0].mounts), list(r[0].devices), dict(r[0].annotations)) == (
        {},
        [],
        [],
        {},
    )
    spec = json.loads((tmp / "cdi/k8s.ocihook.io-nvidia-gpu.json").read_text())
    assert spec["kind"] == "k8s.ocihook.io/nvidia-gpu"
    names = {d["name"] for d in spec["devices"]}
    assert {a, b, "0", "6", "all"} <= names


def test_spec_kept_fresh(node: Any) -> None:
    _, start, _, tmp = node
    server = start()
    path = tmp / "cdi/k8s.ocihook.io-nvidia-gpu.json"
    good = path.read_bytes()
    path.unlink()
    assert wait_until(path.exists)
    assert path.read_bytes() == good
    path.write_text("{}")
    assert wait_until(lambda: path.exists() and path.read_bytes() == good)
    assert wait_until(lambda: server.spec_writes >= 3)


def test_no_collision_with_cdi_generate(node: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The plugin's spec has a kind of its own: ``ocihook cdi generate``'s spec for the
    same GPUs in the same directory (``nvidia.com/gpu``) collides with nothing, and both
    resolve; a second producer of the plugin's kind is one warning naming both files."""
    from ocihook.cdi.registry import Registry

    _, start, sim, tmp = node
    cdi = tmp / "cdi"
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    r = run_cli("cdi", "generate", *root, "--output", str(cdi / "nvidia.yaml"))
    assert r.returncode == 0, r.stderr
    server = start()
    registry = Registry.load([str(cdi)])
    assert registry.collisions() == []
    uuid = sim.gpus[0].uuid
    assert registry.resolve(f"nvidia.com/gpu={uuid}") is not None
    assert registry.resolve(f"k8s.ocihook.io/nvidia-gpu={uuid}") is not None
    assert server.warn_collisions() == []
    ours = cdi / "k8s.ocihook.io-nvidia-gpu.json"
    other = cdi / "other-plugin.json"
    other.write_bytes(ours.read_bytes())
    with caplog.at_level("WARNING", logger="ocihook.k8s"):
        (line,) = server.warn_collisions()
    assert line.startswith(f"CDI specs {ours} and {other} all define k8s.ocihook.io/nvidia-gpu=")
    assert "\n" not in line and line in caplog.text


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
        key.startswith("cdi.k8s.io/ocihook-k8s_nvidia.com-")
        and value == f"k8s.ocihook.io/nvidia-gpu={g.uuid}"
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
    assert [c.name for c in r.cdi_devices] == ["k8s.ocihook.io/nvidia-gpu=1:1"]
    assert sim.gpus[1].uuid not in kubelet.devices[GPU]
    # procfs knows no profile: one resource for both, and the inventory says why
    assert sorted(r.resource_name for r in kubelet.registrations) == [GPU, "nvidia.com/mig"]
    inventory = build_inventory(HostRoot.single(sim.root), mig_strategy="mixed")
    assert (
        "the MIG profile of 2 of 2 MIG devices is unknown (the procfs GPU backend cannot "
        "tell them: /proc/driver/nvidia/capabilities gives each MIG device's GPU and compute "
        "instance ids, not its profile; use --gpu-backend nvml (nvidia-ml-py)): advertised as "
        "nvidia.com/mig, not per profile"
    ) in inventory.warnings


def test_mig_single(node: Any) -> None:
    kubelet, start, sim, _ = node
    start(mig_strategy="single")
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 2)
    assert sorted(kubelet.devices[GPU]) == [
        f"{sim.gpus[1].uuid}::mig1.0",
        f"{sim.gpus[1].uuid}::mig2.0",
    ]
    warnings = build_inventory(HostRoot.single(sim.root), mig_strategy="single").warnings
    (unchecked,) = [w for w in warnings if "MIG profile of" in w]
    assert unchecked.startswith("the MIG profile of 2 of 2 MIG devices is unknown (the procfs")
    assert unchecked.endswith(
        "the single strategy's check that every MIG device has one profile was not made"
    )
    assert sum("has MIG disabled: not advertised" in w for w in warnings) == 7


@pytest.fixture
def nvml_sim(monkeypatch: pytest.MonkeyPatch, host: simhost.SimulatedHost) -> Any:
    """The ``pynvml`` double, installed, describing the simulated host (its GPU memory and
    MIG profiles: 3g.40gb as GPU instance 1 and 1g.10gb as GPU instance 2 of GPU 1)."""
    import sys

    module = load_pynvml_double()
    module.load(sim_nvml(host))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    yield module
    assert module.init_refcount() == 0


def test_mig_mixed_one_resource_per_profile(node: Any, nvml_sim: Any) -> None:
    """Mixed strategy, NVML: one resource per MIG profile, each its own plugin socket and
    registration with its MIG device's UUID; Allocate on a per-profile resource gives that
    MIG device: its CDI device, and the parent's node and its two capability nodes."""
    import grpc

    kubelet, start, sim, tmp = node
    start(mig_strategy="mixed", gpu_backend="nvml", pass_device_specs=True)
    g1 = sim.gpus[1]
    three, one = g1.mig_devices  # gi 1: 3g.40gb, gi 2: 1g.10gb
    kubelet.wait(lambda: len(kubelet.registrations) == 3 and len(kubelet.devices) == 3)
    assert sorted((r.resource_name, r.endpoint) for r in kubelet.registrations) == [
        (GPU, "ocihook-nvidia.com-gpu.sock"),
        ("nvidia.com/mig-1g.10gb", "ocihook-nvidia.com-mig-1g.10gb.sock"),
        ("nvidia.com/mig-3g.40gb", "ocihook-nvidia.com-mig-3g.40gb.sock"),
    ]
    assert kubelet.devices["nvidia.com/mig-1g.10gb"] == {one.uuid: "Healthy"}
    assert kubelet.devices["nvidia.com/mig-3g.40gb"] == {three.uuid: "Healthy"}
    assert sorted(kubelet.devices[GPU]) == sorted(g.uuid for g in sim.gpus if g.index != 1)
    r = kubelet.allocate("nvidia.com/mig-1g.10gb", [one.uuid]).container_responses[0]
    assert [c.name for c in r.cdi_devices] == [f"k8s.ocihook.io/nvidia-gpu={one.uuid}"]
    # the driver's mig-minors: 3 + 135 * <GPU minor> + 9 * <gi> for the GI, + 1 for CI 0
    assert [(d.container_path, d.host_path) for d in r.devices] == [
        (p, os.path.join(sim.root, p.lstrip("/")))
        for p in (
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
            f"/dev/nvidia{g1.minor}",
            f"/dev/nvidia-caps/nvidia-cap{3 + 135 * g1.minor + 9 * 2}",
            f"/dev/nvidia-caps/nvidia-cap{3 + 135 * g1.minor + 9 * 2 + 1}",
        )
    ]
    r3 = kubelet.allocate("nvidia.com/mig-3g.40gb", [three.uuid]).container_responses[0]
    assert [d.container_path for d in r3.devices][-2:] == [
        f"/dev/nvidia-caps/nvidia-cap{3 + 135 * g1.minor + 9}",
        f"/dev/nvidia-caps/nvidia-cap{3 + 135 * g1.minor + 9 + 1}",
    ]
    with pytest.raises(grpc.RpcError) as e:  # the 3g device is not a 1g one
        kubelet.allocate("nvidia.com/mig-1g.10gb", [three.uuid])
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    spec = json.loads((tmp / "cdi/k8s.ocihook.io-nvidia-gpu.json").read_text())
    assert {one.uuid, three.uuid} <= {d["name"] for d in spec["devices"]}


def test_mig_single_needs_one_profile(host: simhost.SimulatedHost, nvml_sim: Any) -> None:
    from ocihook.core.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        build_inventory(HostRoot.single(host.root), mig_strategy="single", gpu_backend="nvml")
    assert e.value.message == (
        "the single MIG strategy needs every MIG device to have the same profile; this node "
        "has 1 x 1g.10gb, 1 x 3g.40gb"
    )
    assert (e.value.field, e.value.value) == ("--mig-strategy", "single")
    assert "--mig-strategy mixed" in (e.value.hint or "")


def test_mig_single_one_profile(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 1g.10gb MIG devices: the single strategy advertises both as nvidia.com/gpu,
    and the labels describe them (GFD: product <model>-MIG-<profile>, the MIG memory)."""
    import sys

    from ocihook.k8s.features import gfd_labels

    sim = simhost.build(str(tmp_path / "h"), mig_profiles=("1g.10gb", "1g.10gb"))
    module = load_pynvml_double()
    module.load(sim_nvml(sim))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    inv = build_inventory(HostRoot.single(sim.root), mig_strategy="single", gpu_backend="nvml")
    assert [(d.id, d.mig_profile, d.memory_mib) for d in inv.devices[GPU]] == [
        (m.uuid, "1g.10gb", 9728) for m in sim.gpus[1].mig_devices
    ]
    assert not any("MIG profile" in w for w in inv.warnings)
    labels, reasons = gfd_labels(inv)
    assert {k: v for k, v in labels.items() if k.startswith("nvidia.com/gpu.")} == {
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
        "nvidia.com/gpu.memory": "9728",  # no compute labels: GFD gives MIG devices none
    }
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert reasons == (
        "nvidia.com/gpu.machine left out: sysfs class/dmi/id/product_name is missing or empty",
    )


def test_mig_single_without_mig_falls_back_to_none(tmp_path: Path) -> None:
    sim = simhost.build(str(tmp_path / "h"), gpus=1, make_dev_nodes=False)  # no MIG GPU
    inv = build_inventory(HostRoot.single(sim.root), mig_strategy="single")
    assert [d.id for d in inv.devices[GPU]] == [sim.gpus[0].uuid]
    assert (
        "no GPU has MIG devices: the single MIG strategy falls back to none (as NVIDIA's "
        "device plugin does)"
    ) in inv.warnings


def _socket_path(base: Path, length: int) -> str:
    """A path of ``length`` bytes under ``base`` (which must exist)."""
    path = f"{base}/{'s' * (length - len(str(base)) - 1)}"
    assert len(path) == length
    return path


class _Registration:
    def GetInfo(self, request: Any, context: Any) -> Any:
        from ocihook.k8s.api import pluginregistration_pb2 as reg

        return reg.PluginInfo(name="boundary")

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        raise NotImplementedError


def test_socket_path_limit_is_grpcs(tmp_path: Path) -> None:
    """At the boundary, against the installed grpcio: a socket path of MAX_SOCKET_PATH
    (105) bytes is served and answers a call; one byte more is refused by ocihook in one
    line naming the path and its length, and gRPC itself cannot bind it either (were
    grpcio to bind it, the check would be too strict and this test says so)."""
    import tempfile
    from concurrent import futures

    import grpc

    from ocihook.core.errors import ConfigError
    from ocihook.k8s import rpc
    from ocihook.k8s.api import pluginregistration_pb2 as reg

    base = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    try:
        assert rpc.MAX_SOCKET_PATH == 105
        longest = _socket_path(base, rpc.MAX_SOCKET_PATH)
        server = rpc.unix_server(longest)
        try:
            rpc.add_service(server, rpc.PLUGIN_REGISTRATION, _Registration())
            with rpc.unix_channel(longest) as channel:
                stub = rpc.client(channel, rpc.PLUGIN_REGISTRATION)
                assert stub.GetInfo(reg.InfoRequest(), timeout=5).name == "boundary"
        finally:
            server.stop(None)
        too_long = _socket_path(base, rpc.MAX_SOCKET_PATH + 1)
        with pytest.raises(ConfigError) as e:
            rpc.unix_server(too_long)
        assert str(e.value) == (
            f"unix socket path {too_long} is 106 bytes long; gRPC binds at most 105; hint: "
            "choose a shorter directory (--plugin-dir, --registry-dir)"
        )
        assert not os.path.lexists(too_long)
        raw = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        try:
            port = raw.add_insecure_port(f"unix://{too_long}")
        except RuntimeError:  # grpcio >= 1.50
            port = 0
        assert port == 0, "grpcio binds 106 bytes now: raise rpc.MAX_SOCKET_PATH"
    finally:
        shutil.rmtree(base)


def test_cli_socket_path_too_long(tmp_path: Path) -> None:
    """The device plugin with a --plugin-dir too long for its sockets: exit 10, one line."""
    import tempfile

    sim = simhost.build(str(tmp_path / "h"), gpus=1, make_dev_nodes=False)
    base = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    try:
        plugin_dir = _socket_path(base, 80)
        os.makedirs(plugin_dir)
        result = run_cli(
            "k8s", "device-plugin", f"--driver-root={sim.root}", f"--dev-root={sim.root}",
            f"--plugin-dir={plugin_dir}",
            f"--cdi-dir={tmp_path}/cdi", "--gpu-backend=procfs",
        )  # fmt: skip
    finally:
        shutil.rmtree(base)
    socket = f"{plugin_dir}/ocihook-nvidia.com-gpu.sock"
    assert result.returncode == 10, result.stderr
    assert result.stderr.splitlines()[-1:] == [
        f"ocihook: error[bad-config]: unix socket path {socket} is {len(socket)} bytes long; "
        "gRPC binds at most 105; hint: choose a shorter directory (--plugin-dir, --registry-dir)"
    ]


def test_gpu_backend_asked_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--gpu-backend nvml without NVML is the error that says so (not "no GPU to
    advertise"); auto falls back to procfs in silence; an unknown backend is refused."""
    import sys

    from ocihook.core.errors import ConfigError
    from ocihook.discovery.nvml import NvmlNotInstalled

    sim = simhost.build(str(tmp_path / "h"), make_dev_nodes=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(NvmlNotInstalled, match="pynvml is not importable"):
        build_inventory(HostRoot.single(sim.root), gpu_backend="nvml")
    inv = build_inventory(HostRoot.single(sim.root), gpu_backend="auto")
    assert inv.gpu_backend == "procfs" and len(inv.devices[GPU]) == 8
    with pytest.raises(ConfigError, match="unknown GPU backend"):
        build_inventory(HostRoot.single(sim.root), gpu_backend="cuda")


def test_mig_resource_names() -> None:
    from ocihook.k8s.deviceplugin import socket_name
    from ocihook.k8s.inventory import mig_resource_name

    assert mig_resource_name("1g.10gb") == "nvidia.com/mig-1g.10gb"
    assert mig_resource_name("1c.3g.40gb") == "nvidia.com/mig-1c.3g.40gb"
    assert mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"
    assert mig_resource_name("1g.10gb+me.all") == "nvidia.com/mig-1g.10gb.me.all"
    assert mig_resource_name("1g.10gb-me") == "nvidia.com/mig-1g.10gb-me"
    assert socket_name("nvidia.com/mig-1g.10gb") == "ocihook-nvidia.com-mig-1g.10gb.sock"
    with pytest.raises(ValueError, match="no valid resource name"):
        mig_resource_name("1g.10gb+")
    with pytest.raises(ValueError):
        mig_resource_name("x" * 60)


@given(
    st.sampled_from(sorted(nvml.GPU_INSTANCE_PROFILES)),
    st.sampled_from(sorted(nvml.COMPUTE_INSTANCE_PROFILES)),
    st.integers(0, 10**6),
)
def test_every_nameable_profile_is_a_valid_resource(gi: int, ci: int, gb: int) -> None:
    import re

    from ocihook.k8s.inventory import mig_resource_name

    profile = nvml.mig_profile_name(gi, ci, gb)
    assert profile is not None
    resource = mig_resource_name(profile)
    prefix, name = resource.split("/")
    assert prefix == "nvidia.com" and len(name) <= 63
    assert re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?", name)
    assert "+" not in resource and name == "mig-" + profile.replace("+", ".")


def test_time_slicing(node: Any) -> None:
    kubelet, start, sim, _ = node
    start(replicas=3)
    kubelet.wait(lambda: len(kubelet.devices.get(GPU, {})) == 24)
    u0 = sim.gpus[0].uuid
    r = kubelet.allocate(GPU, [f"{u0}::0", f"{u0}::2"]).container_responses[0]
    assert [c.name for c in r.cdi_devices] == [f"k8s.ocihook.io/nvidia-gpu={u0}"]
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


def test_nfd_features(host: simhost.SimulatedHost, caplog: pytest.LogCaptureFixture) -> None:
    """procfs: ocihook's labels and GFD's resource labels, without the memory and the
    per-profile labels procfs cannot know (logged, not guessed)."""
    from ocihook.k8s.features import nfd_features

    inv = build_inventory(HostRoot.single(host.root), mig_strategy="mixed")
    with caplog.at_level("WARNING", logger="ocihook.k8s"):
        text = nfd_features(inv)
    assert [line for line in text.splitlines() if not line.startswith("nvidia.com/cuda.")] == [
        "nvidia.com/gpu.count=8",
        "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.replicas=1",
        "nvidia.com/gpu.sharing-strategy=none",
        "nvidia.com/mig.capable=true",  # a GPU has MIG devices
        "nvidia.com/mig.strategy=mixed",
        "ocihook.io/nvidia.com.gpu.count=7",
        "ocihook.io/nvidia.com.mig.count=2",
        # no NVML: the CUDA version of the driver's branch (ocihook.core.cudaversion)
        f"ocihook.io/nvidia.cuda.version={cuda_for_driver(host.driver_version)}",
        "ocihook.io/nvidia.devices=9",
        f"ocihook.io/nvidia.driver.major={host.driver_version.split('.')[0]}",
        f"ocihook.io/nvidia.driver.version={host.driver_version}",
        "ocihook.io/nvidia.mig.capable=true",
        "ocihook.io/nvidia.present=true",
        "ocihook.io/nvidia.product=NVIDIA-A100-SXM4-80GB",
    ]
    assert [r.getMessage() for r in caplog.records] == [
        "nvidia.com/gpu.memory left out: the procfs GPU backend cannot tell memory sizes "
        "(use --gpu-backend nvml)",
        "nvidia.com/gpu.compute.major, .compute.minor and .family left out: the compute "
        "capability is unknown (the procfs GPU backend cannot tell it; use --gpu-backend nvml)",
        "2 MIG devices of unknown profile have no nvidia.com/mig-<profile> labels",
        "nvidia.com/gpu.machine left out: sysfs class/dmi/id/product_name is missing or empty",
    ]


def test_nfd_features_nvml(host: simhost.SimulatedHost, nvml_sim: Any) -> None:
    """NVML: the GPU memory, one label set per MIG profile, the CUDA version."""
    from ocihook.k8s.features import nfd_features

    inv = build_inventory(
        HostRoot.single(host.root), mig_strategy="mixed", gpu_backend="nvml", replicas=2
    )
    reasons: list[str] = []
    lines = nfd_features(inv, reasons=reasons).splitlines()
    assert reasons == [
        "nvidia.com/gpu.machine left out: sysfs class/dmi/id/product_name is missing or empty"
    ]
    assert [line for line in lines if line.startswith(("nvidia.com/gpu", "nvidia.com/mig"))] == [
        "nvidia.com/gpu.compute.major=8",
        "nvidia.com/gpu.compute.minor=0",
        "nvidia.com/gpu.count=8",
        "nvidia.com/gpu.family=ampere",
        "nvidia.com/gpu.memory=81920",
        "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB-SHARED",
        "nvidia.com/gpu.replicas=2",
        "nvidia.com/gpu.sharing-strategy=time-slicing",
        "nvidia.com/mig-1g.10gb.count=1",
        "nvidia.com/mig-1g.10gb.memory=9728",
        "nvidia.com/mig-1g.10gb.product=NVIDIA-A100-SXM4-80GB-MIG-1g.10gb-SHARED",
        "nvidia.com/mig-1g.10gb.replicas=2",
        "nvidia.com/mig-1g.10gb.sharing-strategy=time-slicing",
        "nvidia.com/mig-3g.40gb.count=1",
        "nvidia.com/mig-3g.40gb.memory=40192",
        "nvidia.com/mig-3g.40gb.product=NVIDIA-A100-SXM4-80GB-MIG-3g.40gb-SHARED",
        "nvidia.com/mig-3g.40gb.replicas=2",
        "nvidia.com/mig-3g.40gb.sharing-strategy=time-slicing",
        "nvidia.com/mig.capable=true",
        "nvidia.com/mig.strategy=mixed",
    ]
    assert "ocihook.io/nvidia.cuda.version=12.4" in lines
    assert "ocihook.io/nvidia.com.mig-1g.10gb.count=2" in lines  # its two replicas
    none = build_inventory(HostRoot.single(host.root), gpu_backend="nvml")
    assert [line for line in nfd_features(none).splitlines() if "nvidia.com/mig" in line] == [
        "nvidia.com/mig.capable=true"  # no strategy label, no per-profile labels
    ]


def test_cli_list(host: simhost.SimulatedHost) -> None:
    proc = run_cli(
        "k8s", "device-plugin", "--driver-root", host.root, "--dev-root", host.root, "--list",
        "--replicas", "2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
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
        assert (tmp_path / "cli-cdi/k8s.ocihook.io-nvidia-gpu.json").exists()
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
    assert [d.cdi_name for d in devs] == [f"k8s.ocihook.io/amd-gpu={i}" for i in range(5)]
    assert [d.id for d in devs][3:] == [
        f"{devs[3].id.rsplit('-p', 1)[0]}-p0",
        f"{devs[3].id.rsplit('-p', 1)[0]}-p1",
    ]
    assert ("/dev/kfd", os.path.join(amd.root, "dev/kfd")) in devs[0].nodes
    plugin = ResourcePlugin("amd.com/gpu", devs, str(tmp_path), strategies=("cdi-cri", "envvar"))
    r = plugin.allocate_one([devs[1].id, devs[4].id])
    assert [c.name for c in r.cdi_devices] == [
        "k8s.ocihook.io/amd-gpu=1",
        "k8s.ocihook.io/amd-gpu=4",
    ]
    assert dict(r.envs) == {"AMD_VISIBLE_DEVICES": "1,4"}
    assert set(inv.specs) == {"k8s.ocihook.io/amd-gpu"}

    intel = vendors.build_intel(str(tmp_path / "intel"))
    inv = build_inventory(HostRoot.single(intel.root))
    assert {r: [d.cdi_name for d in ds] for r, ds in inv.devices.items()} == {
        "gpu.intel.com/i915": ["k8s.ocihook.io/intel-gpu=0"],
        "gpu.intel.com/xe": ["k8s.ocihook.io/intel-gpu=1"],
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


def test_nvml_reports_a_lost_gpu(node: Any, nvml_sim: Any) -> None:
    """A GPU NVML reports lost (Xid 79: node and procfs entry still there) turns
    Unhealthy, with its MIG devices, and Healthy again when NVML answers again."""
    kubelet, start, sim, _ = node
    server = start(nvml_health=True, mig_strategy="mixed")
    kubelet.wait(
        lambda: len(kubelet.healthy(GPU)) == 7 and len(kubelet.healthy("nvidia.com/mig")) == 2
    )
    gpus = nvml_sim._description["gpus"]
    gpus[2]["errors"] = {"nvmlDeviceGetUUID": nvml_sim.NVML_ERROR_GPU_IS_LOST}
    gpus[1]["errors"] = {"nvmlDeviceGetUUID": nvml_sim.NVML_ERROR_RESET_REQUIRED}  # the MIG GPU
    kubelet.wait(lambda: kubelet.devices[GPU][sim.gpus[2].uuid] == "Unhealthy")
    kubelet.wait(lambda: kubelet.healthy("nvidia.com/mig") == [])
    assert len(kubelet.healthy(GPU)) == 6
    gpus[2]["errors"] = {"nvmlDeviceGetUUID": nvml_sim.NVML_ERROR_UNKNOWN}  # not "lost": no change
    gpus[1]["errors"] = {}
    kubelet.wait(
        lambda: len(kubelet.healthy(GPU)) == 7 and len(kubelet.healthy("nvidia.com/mig")) == 2
    )
    server.stop()
    assert nvml_sim.init_refcount() == 0
