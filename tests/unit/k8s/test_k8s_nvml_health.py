"""XID health through NVML (``--nvml-health``): :class:`~ocihook.k8s.nvmlhealth.XidRules`
read as NVIDIA's device plugin reads ``DP_DISABLE_HEALTHCHECKS`` / ``DP_ENABLE_HEALTHCHECKS``,
and events raised through the ``pynvml`` double reaching kubelet's ListAndWatch stream
(real gRPC, :class:`support.FakeKubelet`)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc")

from support import FakeKubelet, load_pynvml_double, sim_nvml

from ocihook.core.hostroot import HostRoot
from ocihook.k8s.deviceplugin import DevicePluginServer
from ocihook.k8s.inventory import build_inventory
from ocihook.k8s.nvmlhealth import APPLICATION_XIDS, XidRules
from ocihook.sim import host as simhost

GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig"
XID = 0x8  # nvmlEventTypeXidCriticalError
DBE = 0x2  # nvmlEventTypeDoubleBitEccError


def rules(**env: str) -> XidRules:
    return XidRules.from_env(env)


def test_xid_rules_default_skips_application_xids() -> None:
    r = rules()
    assert {13, 31, 43, 45, 68, 109} == APPLICATION_XIDS
    assert [x for x in (13, 31, 43, 45, 48, 63, 68, 79, 94, 109) if r.counts(x)] == [48, 63, 79, 94]
    assert not r.off


@pytest.mark.parametrize("value", ["all", "xids", "ALL", "48, xids", " All "])
def test_xid_rules_all_disabled(value: str) -> None:
    r = rules(DP_DISABLE_HEALTHCHECKS=value)
    assert r.off
    assert not any(r.counts(x) for x in (48, 79))


def test_xid_rules_extra_list_and_malformed(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="ocihook.k8s"):
        r = rules(DP_DISABLE_HEALTHCHECKS=" 79 ,, 48x,94")
    assert [x for x in (13, 48, 79, 94, 95) if r.counts(x)] == [48, 95]
    assert [rec.getMessage() for rec in caplog.records] == [
        "XID health checks: ignoring malformed XID '48x'"
    ]


def test_xid_rules_enable_overrides() -> None:
    r = rules(DP_DISABLE_HEALTHCHECKS="79", DP_ENABLE_HEALTHCHECKS="79,31")
    assert r.counts(79) and r.counts(31) and not r.counts(13)
    everything = rules(DP_ENABLE_HEALTHCHECKS="all")
    assert all(everything.counts(x) for x in (13, 31, 79))
    only = rules(DP_DISABLE_HEALTHCHECKS="all", DP_ENABLE_HEALTHCHECKS="79")
    assert not only.off
    assert [x for x in (13, 48, 79) if only.counts(x)] == [79]


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A simulated host, the ``pynvml`` double describing it (installed), a fake kubelet and
    ``start(**kw)`` to serve the plugin with ``--nvml-health``."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the simulated GPU nodes are made with mknod (health checks them)")
    sim = simhost.build(str(tmp_path / "host"))
    nvml = load_pynvml_double()
    nvml.load(sim_nvml(sim))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    for var in ("DP_DISABLE_HEALTHCHECKS", "DP_ENABLE_HEALTHCHECKS"):
        monkeypatch.delenv(var, raising=False)
    plugin_dir = tmp_path / "dp"
    plugin_dir.mkdir()
    kubelet = FakeKubelet(str(plugin_dir))
    servers: list[DevicePluginServer] = []

    def start(**kw: Any) -> DevicePluginServer:
        inv_kw = {k: kw.pop(k) for k in ("mig_strategy", "replicas") if k in kw}
        inventory = build_inventory(HostRoot.single(sim.root), hook_command=["ocihook"], **inv_kw)
        server = DevicePluginServer(
            inventory,
            plugin_dir=str(plugin_dir),
            cdi_dir=str(tmp_path / "cdi"),
            interval=0.05,
            nvml_health=True,
            **kw,
        )
        server.start()
        servers.append(server)
        kubelet.wait(lambda: sum(len(v) for v in kubelet.devices.values()) >= 8)
        return server

    yield kubelet, start, sim, nvml
    for s in servers:
        s.stop()
    kubelet.stop()
    assert nvml.init_refcount() == 0


def test_critical_xid_makes_gpu_unhealthy(node: Any) -> None:
    """A critical XID turns its GPU Unhealthy on the stream, for good; an application XID,
    an ECC event and an XID of another GPU do not; the event set is freed at stop."""
    kubelet, start, sim, nvml = node
    server = start()
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    assert "nvmlEventSetCreate" in nvml.history()
    assert nvml.deliver(3, XID, 13) == 1  # graphics engine exception: an application error
    assert nvml.deliver(5, DBE, 0) == 1
    assert nvml.deliver(4, XID, 79) == 1  # fallen off the bus
    kubelet.wait(lambda: kubelet.devices[GPU][sim.gpus[4].uuid] == "Unhealthy")
    assert kubelet.healthy(GPU) == [g.uuid for g in sim.gpus if g.index != 4]
    with pytest.raises(Exception, match="unhealthy"):
        kubelet.allocate(GPU, [sim.gpus[4].uuid])
    server.step()
    assert kubelet.devices[GPU][sim.gpus[4].uuid] == "Unhealthy"  # no recovery
    server.stop()
    assert "nvmlEventSetFree" in nvml.history()


def test_xid_on_mig_instance(node: Any) -> None:
    """An XID with instance ids makes that MIG device Unhealthy only; one without, every
    device of the GPU."""
    kubelet, start, sim, nvml = node
    start(mig_strategy="mixed")
    kubelet.wait(lambda: len(kubelet.healthy(MIG)) == 2)
    first, second = sim.gpus[1].mig_devices
    nvml.deliver(1, XID, 94, gi=second.gi, ci=second.ci)  # contained ECC error
    kubelet.wait(lambda: len(kubelet.healthy(MIG)) == 1)
    # the procfs backend names a MIG device by its GPU and instance ids
    assert kubelet.healthy(MIG) == [f"{sim.gpus[1].uuid}::mig{first.gi}.{first.ci}"]
    assert len(kubelet.healthy(GPU)) == 7
    nvml.deliver(1, XID, 48)
    kubelet.wait(lambda: kubelet.healthy(MIG) == [])
    assert len(kubelet.healthy(GPU)) == 7


def test_replicas_follow_their_gpu(node: Any) -> None:
    kubelet, start, sim, nvml = node
    start(replicas=2)
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 16)
    nvml.deliver(0, XID, 79)
    kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 14)
    assert not any(i.startswith(sim.gpus[0].uuid) for i in kubelet.healthy(GPU))


def test_disable_healthchecks(node: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``DP_DISABLE_HEALTHCHECKS=79``: XID 79 ignored, 48 counts; ``=all``: no event set."""
    kubelet, start, sim, nvml = node
    monkeypatch.setenv("DP_DISABLE_HEALTHCHECKS", "79")
    server = start()
    nvml.deliver(2, XID, 79)
    nvml.deliver(6, XID, 48)
    kubelet.wait(lambda: kubelet.devices[GPU][sim.gpus[6].uuid] == "Unhealthy")
    assert kubelet.healthy(GPU) == [g.uuid for g in sim.gpus if g.index != 6]
    server.stop()
    nvml.load(sim_nvml(sim))
    monkeypatch.setenv("DP_DISABLE_HEALTHCHECKS", "all")
    start()
    assert "nvmlEventSetCreate" not in nvml.history()
    assert nvml.deliver(2, XID, 79) == 0


def test_registration_and_wait_failures(node: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A GPU whose events cannot be registered is Unhealthy from the start, one that
    supports no XID events is registered for what it supports and stays Healthy; a failed
    wait makes every device Unhealthy (NVIDIA's rules)."""
    kubelet, start, sim, nvml = node
    nvml._description["gpus"][7]["events"] = 0x1  # single-bit ECC only: XID not supported
    nvml._description["gpus"][6]["errors"] = {"nvmlDeviceRegisterEvents": 999}
    with caplog.at_level(logging.WARNING, logger="ocihook.k8s"):
        start()
        kubelet.wait(lambda: len(kubelet.healthy(GPU)) == 7)
    assert kubelet.healthy(GPU) == [g.uuid for g in sim.gpus if g.index != 6]
    assert nvml.deliver(7, XID, 79) == 0
    assert any(
        f"GPU {sim.gpus[6].uuid}: its XID events cannot be registered (Unknown Error)" in r.message
        for r in caplog.records
    )
    nvml._description["wait_error"] = 999
    kubelet.wait(lambda: kubelet.healthy(GPU) == [])


def test_driver_without_wait_v2(node: Any) -> None:
    """A driver without ``nvmlEventSetWait_v2``: the events come through
    ``nvmlEventSetWait``, and no device is marked for the missing function."""
    kubelet, start, sim, nvml = node
    nvml._description["missing"] = ["nvmlEventSetWait_v2"]
    start()
    nvml.deliver(3, XID, 79)
    kubelet.wait(lambda: kubelet.devices[GPU][sim.gpus[3].uuid] == "Unhealthy")
    assert kubelet.healthy(GPU) == [g.uuid for g in sim.gpus if g.index != 3]
    assert "nvmlEventSetWait" in nvml.history()
