"""The DRA kubelet plugin through its gRPC sockets, as kubelet's plugin watcher and DRA
manager call them, on the simulated 8-GPU host; ResourceSlices checked against the
``kubernetes`` package's models when it is installed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="needs grpcio: pip install 'ocihook[k8s]'")

from support import run_cli

from ocihook.core.hostroot import HostRoot
from ocihook.k8s import rpc
from ocihook.k8s.api import dra_pb2 as dra
from ocihook.k8s.api import pluginregistration_pb2 as reg
from ocihook.k8s.dra import DirectoryClaims, DraPlugin, resource_slices
from ocihook.k8s.inventory import build_inventory
from ocihook.sim import host as simhost

DRIVER = "gpu.ocihook.io"


@pytest.fixture
def plugin(tmp_path: Path) -> Any:
    if os.geteuid() != 0:
        pytest.skip("needs root: the simulated GPU nodes are made with mknod (health checks them)")
    sim = simhost.build(str(tmp_path / "host"))
    inventory = build_inventory(HostRoot.single(sim.root), hook_command=["ocihook"])
    (tmp_path / "claims").mkdir()
    p = DraPlugin(
        inventory, DirectoryClaims(str(tmp_path / "claims")), str(tmp_path / "cdi"),
        plugin_dir=str(tmp_path / "plugins"), registry_dir=str(tmp_path / "registry"),
        node_name="node-a",
    )  # fmt: skip
    p.start()
    yield p, sim, tmp_path
    p.stop()


def _claim(tmp: Path, uid: str, devices: list[str], driver: str = DRIVER) -> None:
    obj = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"claim-{uid}", "namespace": "default", "uid": uid},
        "status": {"allocation": {"devices": {"results": [
            {"request": "gpus", "driver": driver, "pool": "node-a", "device": d} for d in devices
        ]}}},
    }  # fmt: skip
    (tmp / "claims" / f"{uid}.json").write_text(json.dumps(obj))


def _dra(p: DraPlugin) -> Any:
    return rpc.client(rpc.unix_channel(p.endpoint), rpc.DRA_PLUGIN)


def _claims(*uids: str) -> list[Any]:
    return [dra.Claim(namespace="default", uid=u, name=f"claim-{u}") for u in uids]


def test_registration(plugin: Any) -> None:
    p, _, tmp = plugin
    assert p.registration_socket == str(tmp / "registry" / f"{DRIVER}-reg.sock")
    r = rpc.client(rpc.unix_channel(p.registration_socket), rpc.PLUGIN_REGISTRATION)
    info = r.GetInfo(reg.InfoRequest(), timeout=10)
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, p.endpoint)
    assert list(info.supported_versions) == ["v1beta1.DRAPlugin"]
    r.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True), timeout=10)
    assert p.registration_status == (True, "")


def test_prepare_unprepare(plugin: Any) -> None:
    p, sim, tmp = plugin
    _claim(tmp, "uid-1", ["gpu-0", "gpu-3"])
    _claim(tmp, "uid-2", ["gpu-9"])  # not on this node
    client = _dra(p)
    out = client.NodePrepareResources(
        dra.NodePrepareResourcesRequest(claims=_claims("uid-1", "uid-2", "uid-3")), timeout=10
    )
    one = out.claims["uid-1"]
    assert one.error == ""
    assert [(d.pool_name, d.device_name, list(d.cdi_device_ids)) for d in one.devices] == [
        (
            "node-a",
            "gpu-0",
            [f"k8s.ocihook.io/nvidia-gpu={sim.gpus[0].uuid}", f"k8s.{DRIVER}/claim=uid-1-gpu-0"],
        ),
        (
            "node-a",
            "gpu-3",
            [f"k8s.ocihook.io/nvidia-gpu={sim.gpus[3].uuid}", f"k8s.{DRIVER}/claim=uid-1-gpu-3"],
        ),
    ]
    assert "'gpu-9'" in out.claims["uid-2"].error and not out.claims["uid-2"].devices
    assert "not found" in out.claims["uid-3"].error
    spec = json.loads((tmp / "cdi" / "ocihook-dra_uid-1.json").read_text())
    assert spec["kind"] == f"k8s.{DRIVER}/claim"
    assert [d["name"] for d in spec["devices"]] == ["uid-1-gpu-0", "uid-1-gpu-3"]
    assert spec["devices"][0]["containerEdits"]["env"] == [
        "OCIHOOK_DRA_CLAIM_GPU_0=default/claim-uid-1"
    ]
    assert (tmp / "cdi" / "k8s.ocihook.io-nvidia-gpu.json").exists()
    assert not (tmp / "cdi" / "ocihook-dra_uid-2.json").exists()
    # idempotent prepare
    again = client.NodePrepareResources(
        dra.NodePrepareResourcesRequest(claims=_claims("uid-1")), timeout=10
    )
    assert again.claims["uid-1"] == one
    # unprepare twice, and a claim never prepared
    for _ in range(2):
        u = client.NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest(claims=_claims("uid-1", "uid-4")), timeout=10
        )
        assert {k: v.error for k, v in u.claims.items()} == {"uid-1": "", "uid-4": ""}
        assert not (tmp / "cdi" / "ocihook-dra_uid-1.json").exists()


def test_other_driver_and_unhealthy(plugin: Any) -> None:
    p, sim, tmp = plugin
    _claim(tmp, "uid-5", ["gpu-0"], driver="other.example.com")
    dev = Path(sim.root) / f"dev/nvidia{sim.gpus[2].minor}"
    dev.unlink()
    _claim(tmp, "uid-6", ["gpu-2"])
    out = _dra(p).NodePrepareResources(
        dra.NodePrepareResourcesRequest(claims=_claims("uid-5", "uid-6")), timeout=10
    )
    assert "no allocation for gpu.ocihook.io" in out.claims["uid-5"].error
    assert "unhealthy" in out.claims["uid-6"].error


def test_resource_slices(plugin: Any) -> None:
    p, sim, _ = plugin
    slices = resource_slices(p.inventory, "node-a", models={"nvidia": sim.gpus[0].model})
    (s,) = slices
    assert s["spec"]["pool"] == {"name": "node-a", "generation": 1, "resourceSliceCount": 1}
    names = [d["name"] for d in s["spec"]["devices"]]
    assert names == [f"gpu-{i}" for i in range(8)]
    a0 = s["spec"]["devices"][0]["basic"]["attributes"]
    assert a0["uuid"] == {"string": sim.gpus[0].uuid}
    assert a0["driverVersion"] == {"string": sim.driver_version}
    kubernetes = pytest.importorskip(
        "kubernetes", reason="the kubernetes package checks the models"
    )
    api = kubernetes.client.ApiClient()
    obj = api._ApiClient__deserialize(s, "V1beta1ResourceSlice")
    assert api.sanitize_for_serialization(obj) == s  # every field known to the model
    assert (
        obj.spec.devices[3].basic.attributes["pciBusID"].string
        == s["spec"]["devices"][3]["basic"]["attributes"]["pciBusID"]["string"]
    )


def test_cli_print_slices(tmp_path: Path) -> None:

    sim = simhost.build(str(tmp_path / "host"), make_dev_nodes=False)
    proc = run_cli(
        "k8s", "dra-plugin", "--driver-root", sim.root, "--dev-root", sim.root,
        "--print-slices", "json", "--node-name", "node-b",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    s = json.loads(out)
    assert (s["kind"], s["spec"]["nodeName"], s["spec"]["driver"]) == (
        "ResourceSlice",
        "node-b",
        DRIVER,
    )
    assert [d["basic"]["attributes"]["uuid"]["string"] for d in s["spec"]["devices"]] == [
        g.uuid for g in sim.gpus
    ]


def test_resource_slices_mig_profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With NVML and the mixed strategy: MIG devices named mig-<n> whatever their
    per-profile resource, with their profile and memory; GPUs with their memory."""
    import sys

    from support import load_pynvml_double, sim_nvml

    sim = simhost.build(str(tmp_path / "host"), make_dev_nodes=False)
    module = load_pynvml_double()
    module.load(sim_nvml(sim))
    monkeypatch.setitem(sys.modules, "pynvml", module)
    inv = build_inventory(HostRoot.single(sim.root), mig_strategy="mixed", gpu_backend="nvml")
    (s,) = resource_slices(inv, "node-a")
    devices = {d["name"]: d["basic"] for d in s["spec"]["devices"]}
    assert list(devices) == [f"gpu-{i}" for i in range(7)] + ["mig-0", "mig-1"]
    three, one = sim.gpus[1].mig_devices
    assert [
        (b["attributes"]["uuid"]["string"], b["attributes"]["profile"]["string"], b["capacity"])
        for b in (devices["mig-0"], devices["mig-1"])
    ] == [  # sorted resources: nvidia.com/mig-1g.10gb first
        (one.uuid, "1g.10gb", {"memory": {"value": "9728Mi"}}),
        (three.uuid, "3g.40gb", {"memory": {"value": "40192Mi"}}),
    ]
    assert devices["gpu-0"]["capacity"] == {"memory": {"value": "81920Mi"}}
    assert "profile" not in devices["gpu-0"]["attributes"]
    assert devices["gpu-0"]["attributes"]["productName"] == {"string": sim.gpus[0].model}
    kubernetes = pytest.importorskip(
        "kubernetes", reason="the kubernetes package checks the models"
    )
    api = kubernetes.client.ApiClient()
    obj = api._ApiClient__deserialize(s, "V1beta1ResourceSlice")
    assert api.sanitize_for_serialization(obj) == s
