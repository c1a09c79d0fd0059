"""Kubernetes end to end through a real CRI: containerd 1.7 (Debian trixie) and 2.x (Debian
sid) with the CRI plugin and CDI, ocihook's device plugin and DRA plugin on the simulated
8-GPU host, and the test playing kubelet (support.FakeKubelet: registration, ListAndWatch,
Allocate; then CRI RunPodSandbox / CreateContainer with the plugin's CDI devices, envs,
mounts, devices and annotations, as kubelet's device manager passes them).

The container's view is the oracle: the ``/dev/nvidia<minor>`` nodes it has are exactly
those of the allocated GPUs (kubelet's request never decides that alone: containerd 1.6
silently drops CDI devices), with the device numbers of the CDI spec the plugin wrote.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="needs grpcio: pip install 'ocihook[k8s]'")

from support import (
    CriContainerd,
    FakeKubelet,
    load_pynvml_double,
    run_cri_pod,
    sim_nvml,
)

from ocihook.core.hostroot import HostRoot
from ocihook.k8s.deviceplugin import DevicePluginServer
from ocihook.k8s.inventory import RootView, build_inventory
from ocihook.sim import host as simhost

GPU = "nvidia.com/gpu"
SCRIPT = "ls /dev > /out/dev.txt; ls /dev/dri > /out/dri.txt 2>/dev/null; ls /dev/nvidia-caps > /out/caps.txt 2>/dev/null; for n in /dev/nvidia[0-9]*; do ls -l $n; done > /out/nodes.txt; env > /out/env.txt"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    return simhost.build(str(tmp_path_factory.mktemp("k8s-host")))


@pytest.fixture
def node(cri: CriContainerd, sim: simhost.SimulatedHost, tmp_path: Path) -> Iterator[Any]:
    plugin_dir = tmp_path / "dp"  # short: gRPC binds a unix socket path of at most 105 bytes
    plugin_dir.mkdir()
    kubelet = FakeKubelet(str(plugin_dir))
    servers: list[DevicePluginServer] = []

    def start(**kw: Any) -> DevicePluginServer:
        keys = ("mig_strategy", "replicas", "gpu_backend", "view")
        inv_kw = {k: kw.pop(k) for k in keys if k in kw}
        inventory = build_inventory(HostRoot.single(kw.pop("root", sim.root)), **inv_kw)
        kw.setdefault("interval", 0.05)
        server = DevicePluginServer(
            inventory, plugin_dir=str(plugin_dir), cdi_dir=str(cri.cdi_dir), **kw
        )
        server.start()
        servers.append(server)
        return server

    yield kubelet, start
    for s in servers:
        s.stop()
    kubelet.stop()


def run_pod(
    cri: CriContainerd, out: Path, allocation: Any = None, cdi: list[str] | None = None
) -> dict[str, str]:
    """Run one pod with one container as kubelet would with ``allocation`` (a
    ContainerAllocateResponse; :func:`support.run_cri_pod`); returns the container's view
    files."""
    run_cri_pod(cri, out, SCRIPT, allocation, cdi)
    return {
        name: (out / name).read_text() if (out / name).exists() else ""
        for name in ("dev.txt", "nodes.txt", "env.txt", "caps.txt", "dri.txt")
    }


def _gpu_nodes(view: dict[str, str]) -> list[str]:
    return sorted(n for n in view["dev.txt"].split() if n.startswith("nvidia") and n[6:].isdigit())


def _minor(sim: simhost.SimulatedHost, uuid_: str) -> int:
    return next(g.minor for g in sim.gpus if g.uuid == uuid_)


def test_cdi_cri_gives_exactly_the_allocated_gpus(
    cri: CriContainerd, node: Any, sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    kubelet, start = node
    start()
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    u = [g.uuid for g in sim.gpus]
    want = kubelet.preferred(GPU, u, [], 2)
    resp = kubelet.allocate(GPU, want).container_responses[0]
    assert [c.name for c in resp.cdi_devices] == [f"k8s.ocihook.io/nvidia-gpu={x}" for x in want]
    view = run_pod(cri, tmp_path / "pod1", resp)
    assert _gpu_nodes(view) == sorted(f"nvidia{_minor(sim, x)}" for x in want), view["dev.txt"]
    for line in view["nodes.txt"].splitlines():
        assert line.startswith("crw-rw-rw-") and " 195, " in line, line
    assert "NVIDIA_VISIBLE_DEVICES=void" in view["env.txt"].splitlines()
    assert "nvidiactl" in view["dev.txt"].split()


def test_beside_the_nodes_own_spec(
    cri: CriContainerd, node: Any, sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    """The node's own spec (``ocihook cdi generate``, kind nvidia.com/gpu) in the same CDI
    directory as the plugin's: no collision, a pod gets its allocated GPU through the
    plugin's kind and another its GPU through nvidia.com/gpu."""
    from support import run_cli

    own = Path(cri.cdi_dir) / "nvidia.yaml"
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    assert run_cli("cdi", "generate", *root, "--output", str(own)).returncode == 0
    try:
        kubelet, start = node
        start()
        kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
        g = sim.gpus[5]
        view = run_pod(
            cri, tmp_path / "plugin", kubelet.allocate(GPU, [g.uuid]).container_responses[0]
        )
        assert _gpu_nodes(view) == [f"nvidia{g.minor}"]
        view = run_pod(cri, tmp_path / "own", cdi=[f"nvidia.com/gpu={sim.gpus[2].index}"])
        assert _gpu_nodes(view) == [f"nvidia{sim.gpus[2].minor}"]
    finally:
        own.unlink()


def test_container_driver_root(
    cri: CriContainerd, node: Any, sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    """The plugin reads the host through another path (``--container-driver-root``, here
    a link that is gone before the pod starts): the spec names the host's paths, which
    containerd opens."""
    seen = tmp_path / "ctr-host"
    seen.symlink_to(sim.root)
    kubelet, start = node
    view_ = RootView.of(HostRoot.single(sim.root), str(seen))
    start(view=view_, interval=3600)  # no health round once the link is gone
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    spec = (Path(cri.cdi_dir) / "k8s.ocihook.io-nvidia-gpu.json").read_text()
    assert str(seen) not in spec and sim.root in spec
    seen.unlink()
    g = sim.gpus[6]
    view = run_pod(cri, tmp_path / "pod", kubelet.allocate(GPU, [g.uuid]).container_responses[0])
    assert _gpu_nodes(view) == [f"nvidia{g.minor}"]


def test_no_allocation_no_gpu(cri: CriContainerd, tmp_path: Path) -> None:
    view = run_pod(cri, tmp_path / "pod0")
    assert _gpu_nodes(view) == []
    assert "nvidiactl" not in view["dev.txt"].split()


def test_two_pods_never_share_and_unhealthy_never_allocated(
    cri: CriContainerd, node: Any, sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    kubelet, start = node
    start()
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    g4 = sim.gpus[4]
    dev = Path(sim.root) / f"dev/nvidia{g4.minor}"
    dev.rename(dev.with_suffix(".away"))
    try:
        kubelet.wait(lambda: kubelet.devices[GPU][g4.uuid] == "Unhealthy")
        free = kubelet.healthy(GPU)
        assert g4.uuid not in free and len(free) == 7
        first = kubelet.preferred(GPU, free, [], 3)
        rest = [x for x in free if x not in first]
        second = kubelet.preferred(GPU, rest, [], 3)
        assert not set(first) & set(second) and g4.uuid not in first + second
        views = [
            run_pod(cri, tmp_path / f"pod{i}", kubelet.allocate(GPU, ids).container_responses[0])
            for i, ids in enumerate((first, second))
        ]
    finally:
        dev.with_suffix(".away").rename(dev)
    seen = [set(_gpu_nodes(v)) for v in views]
    assert seen[0] == {f"nvidia{_minor(sim, x)}" for x in first}
    assert seen[1] == {f"nvidia{_minor(sim, x)}" for x in second}
    assert not seen[0] & seen[1]


def test_mig_instance_and_replica(
    cri: CriContainerd, node: Any, sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    kubelet, start = node
    start(mig_strategy="mixed", replicas=2)
    kubelet.wait(
        lambda: (
            len(kubelet.devices.get("nvidia.com/mig", {})) == 4
            and len(kubelet.devices.get(GPU, {})) == 14
        )
    )
    mig = sorted(kubelet.devices["nvidia.com/mig"])[2]  # replica 0 of the second MIG device
    resp = kubelet.allocate("nvidia.com/mig", [mig]).container_responses[0]
    view = run_pod(cri, tmp_path / "mig", resp)
    g1 = sim.gpus[1]
    assert _gpu_nodes(view) == [f"nvidia{g1.minor}"]
    inventory = build_inventory(HostRoot.single(sim.root), mig_strategy="mixed")
    (device,) = [d for d in inventory.devices["nvidia.com/mig"] if d.id == mig.rsplit("::", 1)[0]]
    caps = sorted(os.path.basename(c) for c, _ in device.nodes if c.startswith("/dev/nvidia-caps/"))
    assert len(caps) == 2 and view["caps.txt"].split() == caps  # its GPU and compute instance
    u0 = sim.gpus[0].uuid
    r = kubelet.allocate(GPU, [f"{u0}::1"]).container_responses[0]
    view = run_pod(cri, tmp_path / "replica", r)
    assert _gpu_nodes(view) == [f"nvidia{_minor(sim, u0)}"]
    assert view["caps.txt"] == ""


def test_mig_profile_resource_pod(
    cri: CriContainerd,
    node: Any,
    sim: simhost.SimulatedHost,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Mixed strategy with NVML (the pynvml double describing the simulated host): a pod
    given the nvidia.com/mig-1g.10gb device gets its GPU's node and the capability nodes
    of GPU instance 2 and its compute instance, through the CDI device named by its
    MIG UUID."""
    import sys

    double = load_pynvml_double()
    double.load(sim_nvml(sim))
    monkeypatch.setitem(sys.modules, "pynvml", double)
    kubelet, start = node
    start(mig_strategy="mixed", gpu_backend="nvml")
    kubelet.wait(lambda: len(kubelet.devices.get("nvidia.com/mig-1g.10gb", {})) == 1)
    g1 = sim.gpus[1]
    one = g1.mig_devices[1]  # gi 2: 1g.10gb
    assert list(kubelet.devices["nvidia.com/mig-1g.10gb"]) == [one.uuid]
    resp = kubelet.allocate("nvidia.com/mig-1g.10gb", [one.uuid]).container_responses[0]
    assert [c.name for c in resp.cdi_devices] == [f"k8s.ocihook.io/nvidia-gpu={one.uuid}"]
    view = run_pod(cri, tmp_path / "mig1g", resp)
    assert _gpu_nodes(view) == [f"nvidia{g1.minor}"]
    gi = 3 + 135 * g1.minor + 9 * one.gi  # the driver's mig-minors table
    assert view["caps.txt"].split() == [f"nvidia-cap{gi}", f"nvidia-cap{gi + 1}"]


def test_envvar_strategy_with_device_specs(
    cri: CriContainerd, node: Any, sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    kubelet, start = node
    start(strategies=("envvar",), pass_device_specs=True)
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    g = sim.gpus[6]
    resp = kubelet.allocate(GPU, [g.uuid]).container_responses[0]
    view = run_pod(cri, tmp_path / "env", resp)
    assert f"NVIDIA_VISIBLE_DEVICES={g.uuid}" in view["env.txt"].splitlines()
    assert _gpu_nodes(view) == [f"nvidia{g.minor}"]


def test_cdi_annotations_strategy(
    cri: CriContainerd, node: Any, sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    """containerd resolves CDI devices named in ``cdi.k8s.io/`` annotations too."""
    kubelet, start = node
    start(strategies=("cdi-annotations",))
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    g = sim.gpus[3]
    resp = kubelet.allocate(GPU, [g.uuid]).container_responses[0]
    assert list(resp.cdi_devices) == [] and len(resp.annotations) == 1
    view = run_pod(cri, tmp_path / "annotations", resp)
    assert _gpu_nodes(view) == [f"nvidia{g.minor}"]


def test_amd_gpu(cri: CriContainerd, node: Any, tmp_path: Path) -> None:
    """An AMD GPU through the same path: its card and render nodes and /dev/kfd, no other."""
    from ocihook.sim import vendors

    amd = vendors.build_amd(str(tmp_path / "amd"))
    kubelet, start = node
    start(root=amd.root)
    kubelet.wait(lambda: len(kubelet.healthy("amd.com/gpu")) == 5)
    want = sorted(kubelet.devices["amd.com/gpu"])[0]
    resp = kubelet.allocate("amd.com/gpu", [want]).container_responses[0]
    (name,) = [c.name for c in resp.cdi_devices]
    index = int(name.split("=")[1])
    gpu = amd.amd[index]
    view = run_pod(cri, tmp_path / "amd-pod", resp)
    expected = sorted([f"card{gpu.card}", f"renderD{gpu.render}"])
    assert sorted(view["dri.txt"].split()) == expected, (gpu, view["dri.txt"])
    assert "kfd" in view["dev.txt"].split() and _gpu_nodes(view) == []


def test_kubelet_and_plugin_restart(
    cri: CriContainerd, node: Any, sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    kubelet, start = node
    first = start()
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    kubelet.restart()
    kubelet.wait(lambda: len(kubelet.registrations) == 2 and len(kubelet.healthy(GPU)) == 8)
    first.stop()
    start()
    kubelet.wait(lambda: len(kubelet.registrations) == 3 and len(kubelet.healthy(GPU)) == 8)
    u = sim.gpus[7].uuid
    view = run_pod(cri, tmp_path / "after", kubelet.allocate(GPU, [u]).container_responses[0])
    assert _gpu_nodes(view) == [f"nvidia{_minor(sim, u)}"]


def test_dra_end_to_end(cri: CriContainerd, sim: simhost.SimulatedHost, tmp_path: Path) -> None:
    from ocihook.k8s import rpc
    from ocihook.k8s.api import dra_pb2 as dra
    from ocihook.k8s.api import pluginregistration_pb2 as reg
    from ocihook.k8s.dra import DirectoryClaims, DraPlugin

    inventory = build_inventory(HostRoot.single(sim.root))
    (tmp_path / "claims").mkdir()
    plugin = DraPlugin(
        inventory, DirectoryClaims(str(tmp_path / "claims")), str(cri.cdi_dir),
        plugin_dir=str(tmp_path / "plugins"), registry_dir=str(tmp_path / "registry"), node_name="node-a",
    )  # fmt: skip
    plugin.start()
    try:
        info = rpc.client(
            rpc.unix_channel(plugin.registration_socket), rpc.PLUGIN_REGISTRATION
        ).GetInfo(reg.InfoRequest(), timeout=10)
        uid = str(uuid.uuid4())
        claim = {
            "metadata": {"name": "two-gpus", "namespace": "default", "uid": uid},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpus", "driver": info.name, "pool": "node-a", "device": d} for d in ("gpu-2", "gpu-5")
            ]}}},
        }  # fmt: skip
        (tmp_path / "claims" / f"{uid}.json").write_text(json.dumps(claim))
        client = rpc.client(rpc.unix_channel(info.endpoint), rpc.DRA_PLUGIN)
        c = dra.Claim(namespace="default", uid=uid, name="two-gpus")
        out = client.NodePrepareResources(
            dra.NodePrepareResourcesRequest(claims=[c]), timeout=10
        ).claims[uid]
        assert out.error == ""
        ids = [i for d in out.devices for i in d.cdi_device_ids]
        view = run_pod(cri, tmp_path / "dra", cdi=ids)
        assert _gpu_nodes(view) == sorted(f"nvidia{sim.gpus[i].minor}" for i in (2, 5))
        env = view["env.txt"].splitlines()
        assert (
            "OCIHOOK_DRA_CLAIM_GPU_2=default/two-gpus" in env
            and "OCIHOOK_DRA_CLAIM_GPU_5=default/two-gpus" in env
        )
        client.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=[c]), timeout=10)
        assert not os.path.exists(plugin.claim_spec_path(uid))
    finally:
        plugin.stop()
