"""The wire contracts: the committed generated modules match the .proto files, and the
messages carry kubelet's package, service and field numbers (device plugin v1beta1,
plugin registration v1, DRA v1beta1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("grpc", reason="needs grpcio: pip install 'ocihook[k8s]'")

from support import REPO

from ocihook.k8s import rpc
from ocihook.k8s.api import deviceplugin_pb2 as dp
from ocihook.k8s.api import dra_pb2 as dra
from ocihook.k8s.api import pluginregistration_pb2 as reg

API = Path(REPO) / "ocihook/k8s/api"


def test_generated_modules_are_current(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc", reason="regenerating needs grpcio-tools")
    tree = tmp_path / "ocihook/k8s/api"
    tree.mkdir(parents=True)
    names = ("deviceplugin", "pluginregistration", "dra")
    for n in names:
        shutil.copy(API / f"{n}.proto", tree / f"{n}.proto")
    args = ["protoc", f"-I{tmp_path}", f"--python_out={tmp_path}"]
    assert protoc.main([*args, *(f"ocihook/k8s/api/{n}.proto" for n in names)]) == 0
    for n in names:
        assert (tree / f"{n}_pb2.py").read_text() == (API / f"{n}_pb2.py").read_text(), (
            f"{n}_pb2.py is stale: run scripts/gen-k8s-protos"
        )


def _numbers(message: type) -> dict[str, int]:
    return {f.name: f.number for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("message", "fields"),
    [
        (dp.RegisterRequest, {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}),
        (
            dp.DevicePluginOptions,
            {"pre_start_required": 1, "get_preferred_allocation_available": 2},
        ),
        (dp.Device, {"ID": 1, "health": 2, "topology": 3}),
        (dp.NUMANode, {"ID": 1}),
        (
            dp.ContainerPreferredAllocationRequest,
            {"available_deviceIDs": 1, "must_include_deviceIDs": 2, "allocation_size": 3},
        ),
        (
            dp.ContainerAllocateResponse,
            {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4, "cdi_devices": 5},
        ),
        (dp.Mount, {"container_path": 1, "host_path": 2, "read_only": 3}),
        (dp.DeviceSpec, {"container_path": 1, "host_path": 2, "permissions": 3}),
        (reg.PluginInfo, {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}),
        (reg.RegistrationStatus, {"plugin_registered": 1, "error": 2}),
        (dra.Claim, {"namespace": 1, "uid": 2, "name": 3}),
        (dra.Device, {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}),
        (dra.NodePrepareResourceResponse, {"devices": 1, "error": 2}),
    ],
)
def test_field_numbers(message: type, fields: dict[str, int]) -> None:
    assert _numbers(message) == fields


def test_service_names_and_methods() -> None:
    assert dp.DESCRIPTOR.package == "v1beta1"
    assert reg.DESCRIPTOR.package == "pluginregistration"
    assert dra.DESCRIPTOR.package == "k8s.io.kubelet.pkg.apis.dra.v1beta1"
    for service, module in (
        (rpc.REGISTRATION, dp), (rpc.DEVICE_PLUGIN, dp), (rpc.PLUGIN_REGISTRATION, reg), (rpc.DRA_PLUGIN, dra),
    ):  # fmt: skip
        declared = module.DESCRIPTOR.services_by_name[service.name.rsplit(".", 1)[1]]
        assert declared.full_name == service.name
        assert {m.name: m.server_streaming for m in declared.methods} == {
            n: m.stream for n, m in service.methods.items()
        }
        for m in declared.methods:
            assert m.input_type.full_name == service.methods[m.name].request.DESCRIPTOR.full_name
            assert m.output_type.full_name == service.methods[m.name].response.DESCRIPTOR.full_name
