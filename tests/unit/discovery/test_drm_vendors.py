"""AMD and Intel GPUs: discovery from the simulated trees, requests, plans, spec edits,
``ocihook info`` / ``list``, and the errors for bad input."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO, host_cdi_spec, run_cli

from ocihook.appliers.spec import apply_plan, edit_bundle
from ocihook.config.options import Options
from ocihook.core.errors import EXIT_CODES, CdiError, DiscoveryError, OcihookError, RequestError
from ocihook.core.hostroot import HostRoot
from ocihook.core.version import VERSION
from ocihook.discovery import amd, intel
from ocihook.discovery.records import DrmGpu, HostDeviceNode
from ocihook.plan.build import make_drm_plan, merge_plans
from ocihook.plan.select import select_drm_gpus
from ocihook.request.drm import DrmRequest, drm_request_from_env, drm_requests_from_spec
from ocihook.sim import vendors as simvendors

with open(os.path.join(REPO, "specs/plan.schema.json")) as _f:
    PLAN_SCHEMA = json.load(_f)


@pytest.fixture(scope="module")
def amd_sim(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_amd(str(tmp_path_factory.mktemp("amd")))


@pytest.fixture(scope="module")
def intel_sim(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_intel(str(tmp_path_factory.mktemp("intel")), sriov=True)


def _roots(root: str) -> list[str]:
    return ["--driver-root", root, "--dev-root", root]


# -- AMD discovery ------------------------------------------------------------------------


def test_amd_discovery_order_ids_and_partitions(amd_sim: simvendors.SimDrmHost) -> None:
    host = amd.discover(HostRoot.single(amd_sim.root))
    got = [(g.index, g.bus_id, g.card_name, g.render.minor, g.uuid, g.partition) for g in host.gpus]
    want = [
        (s.index, s.bus_id, f"card{s.card}", s.render, s.uuid, s.partition) for s in amd_sim.amd
    ]
    assert got == want
    # amd-ctk's order: PCI order, not render order (index 1 is renderD130, index 2 renderD129)
    assert [g.render.minor for g in host.gpus] == [128, 130, 129, 131, 132]
    split = [g for g in host.gpus if g.partition is not None]
    assert [(g.compute_partition, g.memory_partition) for g in split] == [("DPX", "NPS1")] * 2
    assert split[1].sysfs_dir.endswith("devices/platform/amdgpu_xcp_0")
    assert all(g.architecture == "gfx90a" and g.device_id == "0x740f" for g in host.gpus)
    assert host.gpus[0].unique_id == "0x" + host.gpus[0].uuid[4:].lstrip("0")  # type: ignore[index]
    assert host.driver_version == "6.8.5"
    (kfd,) = host.shared_nodes
    assert (kfd.path, kfd.major, kfd.minor) == ("/dev/kfd", simvendors.KFD_MAJOR, 0)
    if amd_sim.dev_nodes:
        assert kfd.present and kfd.gid == simvendors.RENDER_GID
        assert {g.card.gid for g in host.gpus if g.card} == {simvendors.CARD_GID}
        assert {g.render.gid for g in host.gpus} == {simvendors.RENDER_GID}
    assert host.warnings == () or not amd_sim.dev_nodes


def test_amd_gpu_without_kfd_node_is_skipped(tmp_path: Any) -> None:
    root = simvendors.build_amd(str(tmp_path / "root"), make_dev_nodes=False).root
    topo = os.path.join(root, "sys/devices/virtual/kfd/kfd/topology/nodes")
    for node in os.listdir(topo):
        path = os.path.join(topo, node, "properties")
        with open(path) as f:
            text = f.read()
        if "drm_render_minor 130\n" in text:
            os.unlink(path)
    host = amd.discover(HostRoot.single(root))
    assert [g.render.minor for g in host.gpus] == [128, 129, 131, 132]
    assert [g.index for g in host.gpus] == [0, 1, 2, 3]
    assert any("renderD130 is in no KFD topology node" in w for w in host.warnings)


def test_amd_without_kfd_is_a_clear_error(tmp_path: Any) -> None:
    built = simvendors.build_amd(str(tmp_path / "nokfd"), kfd=False, make_dev_nodes=False)
    with pytest.raises(DiscoveryError) as e:
        amd.discover(HostRoot.single(built.root))
    text = str(e.value)
    assert "loaded but provides no KFD" in text and "CONFIG_HSA_AMD" in text
    assert "0000:03:00.0" in text
    proc = run_cli("info", *_roots(built.root))
    assert proc.returncode == 6 and "no KFD" in proc.stderr


def test_amd_module_absent(tmp_path: Any) -> None:
    with pytest.raises(DiscoveryError, match="amdgpu driver is not loaded"):
        amd.discover(HostRoot.single(str(tmp_path)))


def test_amd_wrong_node_number_is_refused(tmp_path: Any) -> None:
    root = simvendors.build_amd(str(tmp_path / "root"), make_dev_nodes=False).root
    dev = os.path.join(root, "sys/devices/pci0000:00/0000:00:01.1/0000:23:00.0/drm/renderD130/dev")
    with open(dev, "w") as f:
        f.write("226:131\n")
    with pytest.raises(DiscoveryError, match="does not match its name"):
        amd.discover(HostRoot.single(root))


@given(st.dictionaries(st.from_regex(r"[a-z_]{1,12}", fullmatch=True), st.integers(0, 2**64)))
def test_kfd_properties_round_trip(props: dict[str, int]) -> None:
    text = "".join(f"{k} {v}\n" for k, v in props.items())
    assert amd.parse_kfd_properties(text) == props


@given(st.text())
def test_kfd_properties_never_raise(text: str) -> None:
    amd.parse_kfd_properties(text)


def test_gfx_names() -> None:
    assert [amd.gfx_name(v) for v in (90010, 90402, 110000, 100300, 0)] == [
        "gfx90a",
        "gfx942",
        "gfx1100",
        "gfx1030",
        None,
    ]


# -- Intel discovery ----------------------------------------------------------------------


def test_intel_discovery(intel_sim: simvendors.SimDrmHost) -> None:
    host = intel.discover(HostRoot.single(intel_sim.root))
    got = [(g.index, g.bus_id, g.card_name, g.render.minor) for g in host.gpus]
    assert got == [(s.index, s.bus_id, f"card{s.card}", s.render) for s in intel_sim.intel]
    assert [g.driver for g in host.gpus] == ["i915", "xe", "i915", "i915"]
    assert host.shared_nodes == ()
    # the SR-IOV physical function is skipped, its VFs kept; connectors are no GPUs
    assert intel_sim.skipped == ("0000:4d:00.0",)
    assert [w for w in host.warnings if "SR-IOV" in w] == [
        "0000:4d:00.0: SR-IOV physical function with 2 virtual functions enabled; skipped "
        "(its VFs are the GPUs)"
    ]
    assert host.gpus[1].links == (
        ("/dev/dri/by-path/pci-0000:03:00.0-card", "../card1"),
        ("/dev/dri/by-path/pci-0000:03:00.0-render", "../renderD129"),
    )


def test_intel_driver_absent(tmp_path: Any) -> None:
    with pytest.raises(DiscoveryError, match=r"no Intel GPU driver \(i915 or xe\)"):
        intel.discover(HostRoot.single(str(tmp_path)))


def test_intel_ignores_other_vendors(amd_sim: simvendors.SimDrmHost) -> None:
    """The AMD host's class/drm has AMD and ASPEED cards and no Intel module."""
    with pytest.raises(DiscoveryError):
        intel.discover(HostRoot.single(amd_sim.root))


# -- requests -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [None, "", "void", "none", "0,void", " , "])
def test_drm_request_for_nothing(value: str | None) -> None:
    env = {} if value is None else {"AMD_VISIBLE_DEVICES": value}
    assert drm_request_from_env("amd", env) is None


def test_drm_request_forms() -> None:
    r = drm_request_from_env("amd", {"AMD_VISIBLE_DEVICES": " 1, 0-2 ,0xAB,GPU-0123456789abcdef"})
    assert r == DrmRequest("amd", "list", ("1", "0-2", "0xAB", "GPU-0123456789abcdef"))
    assert drm_request_from_env("amd", {"AMD_VISIBLE_DEVICES": "0,all"}) == DrmRequest("amd", "all")
    r = drm_request_from_env("intel", {"INTEL_VISIBLE_DEVICES": "card1,0000:03:00.0,03:00.0"})
    assert r is not None and r.devices == ("card1", "0000:03:00.0", "03:00.0")
    # qualified CDI names are the CDI path's
    assert drm_request_from_env("amd", {"AMD_VISIBLE_DEVICES": "amd.com/gpu=0"}) is None


@pytest.mark.parametrize(
    ("vendor", "value", "message"),
    [
        ("amd", "3-1", "range runs backwards"),
        ("amd", "1-", "malformed AMD GPU entry"),
        ("amd", "-1", "malformed AMD GPU entry"),
        ("amd", "0-1-2", "malformed AMD GPU entry"),
        ("amd", "GPU-123", "malformed AMD GPU entry"),
        ("amd", "0x", "malformed AMD GPU entry"),
        ("amd", "card1", "malformed AMD GPU entry"),
        ("intel", "GPU-0123456789abcdef", "malformed Intel GPU entry"),
        ("intel", "0000:03:00", "malformed Intel GPU entry"),
        ("intel", "\u0661", "malformed Intel GPU entry"),  # an Arabic-Indic digit
    ],
)
def test_drm_request_malformed(vendor: str, value: str, message: str) -> None:
    variable = f"{vendor.upper()}_VISIBLE_DEVICES"
    with pytest.raises(RequestError) as e:
        drm_request_from_env(vendor, {variable: value})
    assert message in str(e.value)
    assert e.value.field == f"process.env[{variable}]" and e.value.value == value


def _gpu(index: int, uid: int | None = None) -> DrmGpu:
    node = HostDeviceNode(f"/dev/dri/renderD{128 + index}", "/h", 226, 128 + index)
    return DrmGpu(
        "amd",
        index,
        f"0000:{index:02x}:00.0",
        node,
        uuid=None if uid is None else f"GPU-{uid:016x}",
        unique_id=None if uid is None else f"0x{uid:x}",
    )


@given(st.integers(1, 12), st.data())
def test_ranges_select_exactly_their_gpus(count: int, data: st.DataObject) -> None:
    gpus = [_gpu(i, 1000 + i) for i in range(count)]
    a = data.draw(st.integers(0, count + 2))
    b = data.draw(st.integers(0, count + 2))
    value = f"{a}-{b}"
    if a > b:
        with pytest.raises(RequestError, match="backwards"):
            drm_request_from_env("amd", {"AMD_VISIBLE_DEVICES": value})
        return
    request = drm_request_from_env("amd", {"AMD_VISIBLE_DEVICES": value})
    assert request is not None
    if b >= count:
        with pytest.raises(RequestError, match=f"no AMD GPU with index {b}"):
            select_drm_gpus(request, gpus)
    else:
        assert [g.index for g in select_drm_gpus(request, gpus)] == list(range(a, b + 1))


def test_selection_by_ids_and_errors_list_the_host(amd_sim: simvendors.SimDrmHost) -> None:
    host = amd.discover(HostRoot.single(amd_sim.root))
    split_uuid = host.gpus[3].uuid
    assert split_uuid is not None
    by_uuid = DrmRequest("amd", "list", (split_uuid.lower(), "0"))
    assert [g.index for g in select_drm_gpus(by_uuid, host.gpus)] == [3, 4, 0]
    unique = host.gpus[2].unique_id
    assert unique is not None
    by_unique = DrmRequest("amd", "list", ("0x000" + unique[2:].upper(), "2"))
    assert [g.index for g in select_drm_gpus(by_unique, host.gpus)] == [2]
    with pytest.raises(RequestError) as e:
        select_drm_gpus(DrmRequest("amd", "list", ("0x1",)), host.gpus)
    hint = e.value.hint or ""
    for g in host.gpus:
        assert f"{g.index} ({g.card_name}, renderD{g.render.minor}, {g.bus_id}, {g.uuid})" in hint


def test_intel_selection(intel_sim: simvendors.SimDrmHost) -> None:
    host = intel.discover(HostRoot.single(intel_sim.root))
    pick = DrmRequest("intel", "list", ("card4", "00000000:03:00.0", "03:00.0", "0"))
    assert [g.bus_id for g in select_drm_gpus(pick, host.gpus)] == [
        "0000:4d:00.2",
        "0000:03:00.0",
        "0000:00:02.0",
    ]
    with pytest.raises(RequestError, match="no Intel GPU matches"):
        select_drm_gpus(DrmRequest("intel", "list", ("card2",)), host.gpus)  # the skipped PF


# -- plans and spec edits -----------------------------------------------------------------


def test_amd_plan(amd_sim: simvendors.SimDrmHost) -> None:
    host = amd.discover(HostRoot.single(amd_sim.root))
    plan = make_drm_plan(host, DrmRequest("amd", "list", ("2",)))
    e = plan.edits
    assert [n.path for n in e.device_nodes] == ["/dev/kfd", "/dev/dri/card2", "/dev/dri/renderD129"]
    assert [(r.major, r.minor, r.access) for r in e.cgroup_rules] == [
        (simvendors.KFD_MAJOR, 0, "rw"),
        (226, 2, "rw"),
        (226, 129, "rw"),
    ]
    assert e.mounts == () and e.symlinks == () and e.proc_mask is None
    assert e.env == ("AMD_VISIBLE_DEVICES=void",)
    gids = {n.gid for n in e.device_nodes} - {0}
    assert e.additional_gids == tuple(sorted(gids))
    assert plan.drm_gpus == (("amd", 2, host.gpus[2].uuid),)
    jsonschema.validate(plan.to_dict(), PLAN_SCHEMA)


def test_merge_with_an_nvidia_plan(sim_root: HostRoot, amd_sim: simvendors.SimDrmHost) -> None:
    from ocihook.discovery.nvidia import discover
    from ocihook.plan.build import ContainerLayout, make_plan
    from ocihook.request.nvidia import request_from_env

    nv = make_plan(
        discover(sim_root),
        request_from_env({"NVIDIA_VISIBLE_DEVICES": "0"}),
        ContainerLayout(),
    )
    drm = make_drm_plan(
        amd.discover(HostRoot.single(amd_sim.root)), DrmRequest("amd", "list", ("0",))
    )
    both = merge_plans(nv, drm)
    assert both.driver_version == nv.driver_version and both.gpus == nv.gpus
    assert both.drm_gpus == drm.drm_gpus
    assert both.edits.device_nodes == nv.edits.device_nodes + drm.edits.device_nodes
    assert both.edits.env == ("NVIDIA_VISIBLE_DEVICES=void", "AMD_VISIBLE_DEVICES=void")
    assert both.edits.mounts == nv.edits.mounts and both.edits.proc_mask == nv.edits.proc_mask
    assert merge_plans(both, drm) == both  # nothing twice
    jsonschema.validate(both.to_dict(), PLAN_SCHEMA)


def test_additional_gids_applied_once(amd_sim: simvendors.SimDrmHost) -> None:
    host = amd.discover(HostRoot.single(amd_sim.root))
    plan = make_drm_plan(host, DrmRequest("amd", "all"))
    if not plan.edits.additional_gids:
        pytest.skip("the AMD host was built without /dev nodes (no group owners)")
    first = plan.edits.additional_gids[0]
    doc = {"process": {"user": {"uid": 0, "gid": 0, "additionalGids": [first, 5]}}}
    out = apply_plan(doc, plan, command=("/x",))
    assert out["process"]["user"]["additionalGids"] == [
        first,
        5,
        *plan.edits.additional_gids[1:],
    ]
    assert apply_plan(out, plan, command=("/x",)) == out


def test_spec_edit_is_idempotent_and_leaves_nvidia_alone(
    amd_sim: simvendors.SimDrmHost, tmp_path: Any
) -> None:
    from ocihook.sim.demo import find_busybox, make_busybox_bundle

    if find_busybox() is None:
        pytest.skip("needs busybox")
    bundle = make_busybox_bundle(str(tmp_path / "b"), ["true"], ["AMD_VISIBLE_DEVICES=all"])
    root = HostRoot.single(amd_sim.root)
    first = edit_bundle(bundle, root)
    assert first.written and first.plan is not None and len(first.plan.drm_gpus) == 5
    doc = json.loads(first.after)
    assert not any(e.startswith("NVIDIA_VISIBLE_DEVICES") for e in doc["process"]["env"])
    assert "hooks" not in doc  # no links, no libraries: nothing to run in the container
    again = edit_bundle(bundle, root)
    assert not again.written and again.after == first.after


def test_bad_request_leaves_config_untouched(amd_sim: simvendors.SimDrmHost, tmp_path: Any) -> None:
    from ocihook.sim.demo import find_busybox, make_busybox_bundle

    if find_busybox() is None:
        pytest.skip("needs busybox")
    bundle = make_busybox_bundle(str(tmp_path / "b"), ["true"], ["AMD_VISIBLE_DEVICES=0,5"])
    path = os.path.join(bundle, "config.json")
    with open(path, "rb") as f:
        before = f.read()
    proc = run_cli("edit", "-b", bundle, *_roots(amd_sim.root))
    assert proc.returncode == 5
    assert "no AMD GPU with index 5" in proc.stderr and "4 (card5, renderD132" in proc.stderr
    with open(path, "rb") as f:
        assert f.read() == before


def test_drm_requests_from_spec_bad_env_names_the_file() -> None:
    config = {"process": {"env": ["INTEL_VISIBLE_DEVICES=card"]}}
    with pytest.raises(RequestError) as e:
        drm_requests_from_spec(config, path="/b/config.json")
    assert e.value.path == "/b/config.json"


def test_qualified_names_go_to_the_cdi_registry(
    amd_sim: simvendors.SimDrmHost, tmp_path: Any
) -> None:
    from ocihook.sim.demo import find_busybox, make_busybox_bundle

    if find_busybox() is None:
        pytest.skip("needs busybox")
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "amd.com/gpu",
        "devices": [
            {
                "name": "0",
                "containerEdits": {
                    "deviceNodes": [
                        {"path": "/dev/dri/renderD128", "type": "c", "major": 226, "minor": 128}
                    ]
                },
            }
        ],
        "containerEdits": {
            "deviceNodes": [{"path": "/dev/kfd", "type": "c", "major": 235, "minor": 0}]
        },
    }
    (spec_dir / "amd.json").write_text(json.dumps(host_cdi_spec(tmp_path / "host", spec)))
    options = Options(cdi_spec_dirs=(str(spec_dir),))
    root = HostRoot.single(amd_sim.root)
    bundle = make_busybox_bundle(
        str(tmp_path / "b"), ["true"], ["AMD_VISIBLE_DEVICES=amd.com/gpu=0"]
    )
    result = edit_bundle(bundle, root, options=options, dry_run=True)
    assert result.cdi_devices == ("amd.com/gpu=0",)
    # a plain entry beside a qualified one gets the vendor's kind, and must exist
    bundle2 = make_busybox_bundle(
        str(tmp_path / "b2"), ["true"], ["AMD_VISIBLE_DEVICES=amd.com/gpu=0,1"]
    )
    with pytest.raises(CdiError, match=r"amd\.com/gpu=1"):
        edit_bundle(bundle2, root, options=options, dry_run=True)


# -- info and list ------------------------------------------------------------------------


def test_info_json_amd(amd_sim: simvendors.SimDrmHost) -> None:
    proc = run_cli("info", "--json", *_roots(amd_sim.root))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"amd"}
    got = [
        (g["index"], g["busId"], g["render"], g["uuid"], g["partition"])
        for g in data["amd"]["gpus"]
    ]
    assert got == [
        (s.index, s.bus_id, f"/dev/dri/renderD{s.render}", s.uuid, s.partition) for s in amd_sim.amd
    ]
    assert data["amd"]["sharedNodes"] == ["/dev/kfd"]


def test_info_text_mixed(tmp_path: Any) -> None:
    host = simvendors.build_mixed(str(tmp_path / "mixed"))
    proc = run_cli("info", *_roots(host.root))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("NVRM version:")
    at = lines.index("AMD GPUs (amdgpu, ROCm) 6.8.5: 2")
    amd_lines = lines[at:]
    assert [ln for ln in amd_lines if ln.startswith("Render:")] == [
        f"Render:         /dev/dri/renderD{g.render}" for g in host.amd
    ]
    assert sum(ln.startswith("Device Index:") for ln in lines[:at]) == 2  # NVIDIA's


def test_list_all_vendors(tmp_path: Any) -> None:
    host = simvendors.build_mixed(str(tmp_path / "mixed"))
    data = json.loads(run_cli("list", "--json", *_roots(host.root)).stdout)
    assert set(data) == {"devices", "binaries", "libraries", "ipcs", "firmwares"}
    devices = data["devices"]
    assert os.path.join(host.root, "dev/nvidiactl") in devices
    if host.dev_nodes:
        amd_nodes = [p for p in devices if p.startswith(os.path.join(host.root, "dev/kfd"))]
        assert amd_nodes == [os.path.join(host.root, "dev/kfd")]
        tail = devices[devices.index(amd_nodes[0]) :]
        assert tail == [os.path.join(host.root, "dev/kfd")] + [
            os.path.join(host.root, f"dev/dri/{n}")
            for g in host.amd
            for n in (f"card{g.card}", f"renderD{g.render}")
        ]
    only = json.loads(
        run_cli("list", "--json", "--vendor", "amd", "-d", "1", *_roots(host.root)).stdout
    )
    assert set(only) == {"devices"}
    if host.dev_nodes:
        g = host.amd[1]
        assert only["devices"] == [
            os.path.join(host.root, p)
            for p in ("dev/kfd", f"dev/dri/card{g.card}", f"dev/dri/renderD{g.render}")
        ]


def test_list_unknown_intel_device(intel_sim: simvendors.SimDrmHost) -> None:
    proc = run_cli("list", "-d", "0000:4d:00.0", *_roots(intel_sim.root))
    assert proc.returncode == 5
    assert "no Intel GPU matches" in proc.stderr and "3 (card4, renderD132" in proc.stderr


def test_hook_fast_path_sees_vendor_requests() -> None:
    from ocihook.core.fastexit import REQUEST_MARKERS

    for variable in ("AMD_VISIBLE_DEVICES", "INTEL_VISIBLE_DEVICES"):
        assert any(m in variable.encode() for m in REQUEST_MARKERS)


# -- CDI generation -----------------------------------------------------------------------


def test_generate_amd_spec(amd_sim: simvendors.SimDrmHost) -> None:
    from ocihook.cdi.generate import generate_drm_spec
    from ocihook.cdi.spec import minimum_version, spec_from_dict

    host = amd.discover(HostRoot.single(amd_sim.root))
    spec = generate_drm_spec(host, hook_command=("/ocihook",))
    assert spec.kind == "amd.com/gpu"
    assert [d.name for d in spec.devices] == ["0", "1", "2", "3", "4", "all"]
    assert spec.version == minimum_version(spec) == "0.5.0"  # names start with a digit
    for gpu, dev in zip(host.gpus, spec.devices, strict=False):
        nodes = dev.container_edits.device_nodes
        want = [(n.path, 226, n.minor, "rw") for n in gpu.nodes]
        assert [(n.path, n.major, n.minor, n.permissions) for n in nodes] == want
        assert [n.path for n in nodes] == [f"/dev/dri/{gpu.card_name}", gpu.render.path]
        assert dev.container_edits.hooks == () and dev.container_edits.additional_gids == ()
        if amd_sim.dev_nodes:
            assert [n.gid for n in nodes] == [simvendors.CARD_GID, simvendors.RENDER_GID]
    assert len(spec.devices[-1].container_edits.device_nodes) == 10
    common = spec.container_edits
    assert common.env == ("AMD_VISIBLE_DEVICES=void",)
    assert [(n.path, n.major, n.minor) for n in common.device_nodes] == [
        ("/dev/kfd", simvendors.KFD_MAJOR, 0)
    ]
    assert spec_from_dict(spec.to_dict()) == spec  # valid, round-trips
    with_gids = generate_drm_spec(host, additional_gids=True, hook_command=("/ocihook",))
    assert with_gids.version == "0.7.0"
    if amd_sim.dev_nodes:
        assert with_gids.devices[0].container_edits.additional_gids == (
            simvendors.CARD_GID,
            simvendors.RENDER_GID,
        )


def test_generate_intel_spec(intel_sim: simvendors.SimDrmHost) -> None:
    from ocihook.cdi.generate import generate_drm_spec

    host = intel.discover(HostRoot.single(intel_sim.root))
    spec = generate_drm_spec(host, hook_command=("/ocihook",))
    assert spec.kind == "intel.com/gpu" and spec.version == "0.5.0"
    names = [d.name for d in spec.devices]
    assert names == ["0", "card0", "1", "card1", "2", "card3", "3", "card4", "all"]
    dgpu = spec.devices[3].container_edits
    assert [n.path for n in dgpu.device_nodes] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    (hook,) = dgpu.hooks
    assert hook.hook_name == "createContainer" and hook.args[:5] == (
        "/ocihook",
        "hook",
        "cdi",
        "--ocihook-version",
        VERSION,
    )
    assert hook.args[5:] == (
        "--links",
        "/dev/dri/by-path::pci-0000:03:00.0-card/../card1::pci-0000:03:00.0-render/../renderD129",
    )
    assert spec.container_edits.device_nodes == ()
    assert spec.container_edits.env == ("INTEL_VISIBLE_DEVICES=void",)


def test_generate_cli_vendor(amd_sim: simvendors.SimDrmHost, tmp_path: Any) -> None:
    out = tmp_path / "amd.json"
    proc = run_cli(
        "cdi", "generate", "--vendor", "amd", *_roots(amd_sim.root), "--output", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert data["kind"] == "amd.com/gpu" and data["cdiVersion"] == "0.5.0"
    assert run_cli("cdi", "validate", str(out)).returncode == 0
    bad = run_cli("cdi", "generate", "--vendor", "amd", "--class", "xcp", *_roots(amd_sim.root))
    assert bad.returncode == 11 and "class gpu" in bad.stderr
    none = run_cli("cdi", "generate", "--vendor", "intel", *_roots(amd_sim.root))
    assert none.returncode == 6 and "no Intel GPU driver" in none.stderr


def test_plan_command_and_simhost_vendor(tmp_path: Any) -> None:
    from ocihook.sim.demo import find_busybox, make_busybox_bundle

    if find_busybox() is None:
        pytest.skip("needs busybox")
    made = run_cli("simhost", "--vendor", "mixed", "--no-dev-nodes", str(tmp_path / "host"))
    assert made.returncode == 0, made.stderr
    root = made.stdout.strip()
    env = ["AMD_VISIBLE_DEVICES=1", "NVIDIA_VISIBLE_DEVICES=0"]
    bundle = make_busybox_bundle(str(tmp_path / "b"), ["true"], env)
    proc = run_cli("plan", "-b", bundle, *_roots(root))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, PLAN_SCHEMA)
    assert [g["index"] for g in data["gpus"]] == [0]
    assert [(g["vendor"], g["index"]) for g in data["drmGpus"]] == [("amd", 1)]
    paths = [n["path"] for n in data["containerEdits"]["deviceNodes"]]
    assert "/dev/nvidia0" in paths and paths[-3:] == [
        "/dev/kfd",
        "/dev/dri/card4",
        "/dev/dri/renderD131",
    ]


def test_hook_mode_warns_about_groups_it_cannot_add(amd_sim: simvendors.SimDrmHost) -> None:
    from ocihook.appliers.live.injection import _check_groups
    from ocihook.oci.bundle import Bundle

    plan = make_drm_plan(
        amd.discover(HostRoot.single(amd_sim.root)), DrmRequest("amd", "list", ("0",))
    )
    if not plan.edits.additional_gids:
        pytest.skip("the AMD host was built without /dev nodes (no group owners)")

    def bundle(user: dict[str, Any]) -> Bundle:
        config = {"process": {"user": user}}
        return Bundle("/b", "/b/config.json", b"", config, "/b/rootfs")

    assert _check_groups(bundle({"uid": 0, "gid": 0}), plan) == plan
    gids = list(plan.edits.additional_gids)
    assert _check_groups(bundle({"uid": 1000, "gid": 1000, "additionalGids": gids}), plan) == plan
    warned = _check_groups(bundle({"uid": 1000, "gid": gids[0]}), plan)
    assert warned.edits == plan.edits
    assert warned.warnings[-1].startswith(f"the container user 1000 lacks the groups {gids[1:]}")


_ENTRY = st.one_of(
    st.text(max_size=24),
    st.from_regex(
        r"(0x[0-9a-fA-F]{1,18}|GPU-[0-9a-fA-F]{14,18}|card[0-9]{1,3}|[0-9]{1,3}-[0-9]{1,3})",
        fullmatch=True,
    ),
    st.from_regex(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]", fullmatch=True),
)


@given(st.sampled_from(["amd", "intel"]), st.lists(_ENTRY, max_size=5))
def test_any_value_is_a_request_or_a_request_error(vendor: str, entries: list[str]) -> None:
    gpus = [_gpu(i, 0x1000 + i) for i in range(3)]
    value = ",".join(entries)
    try:
        request = drm_request_from_env(vendor, {f"{vendor.upper()}_VISIBLE_DEVICES": value})
        if request is not None:
            chosen = select_drm_gpus(request, gpus)
            assert set(chosen) <= set(gpus) and len(set(chosen)) == len(chosen)
    except RequestError as e:
        assert e.field == f"process.env[{vendor.upper()}_VISIBLE_DEVICES]" and e.hint


def test_cdi_mode_names_vendor_entries() -> None:
    from ocihook.pipeline.cdinames import cdi_device_names
    from ocihook.request.nvidia import request_from_spec

    config = {
        "process": {"env": ["AMD_VISIBLE_DEVICES=0,2", "INTEL_VISIBLE_DEVICES=intel.com/gpu=card1"]}
    }
    request = request_from_spec(config)
    auto = cdi_device_names(config, request, Options())
    assert auto == ("intel.com/gpu=card1",)  # AMD's plain entries stay with host discovery
    cdi = cdi_device_names(config, request, Options(mode="cdi"))
    assert cdi == ("amd.com/gpu=0", "amd.com/gpu=2", "intel.com/gpu=card1")
    assert cdi_device_names(config, request, Options(mode="legacy")) == ()
    bad = {"process": {"env": ["AMD_VISIBLE_DEVICES=amd.com/gpu=0,x_"]}}
    with pytest.raises(CdiError) as e:
        cdi_device_names(bad, request_from_spec(bad), Options())
    assert e.value.field == "process.env[AMD_VISIBLE_DEVICES]" and e.value.value == "x_"


def test_cdi_devices_and_host_gpus_together(amd_sim: simvendors.SimDrmHost, tmp_path: Any) -> None:
    """Intel GPUs named by CDI and AMD GPUs by index in one container: the CDI devices are
    injected and the AMD ones planned from the host, into one config.json."""
    from ocihook.sim.demo import find_busybox, make_busybox_bundle

    if find_busybox() is None:
        pytest.skip("needs busybox")
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    node = {"path": "/dev/dri/renderD200", "type": "c", "major": 226, "minor": 200}
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "intel.com/gpu",
        "devices": [{"name": "card9", "containerEdits": {"deviceNodes": [node]}}],
    }
    (spec_dir / "intel.json").write_text(json.dumps(host_cdi_spec(tmp_path / "host", spec)))
    env = ["INTEL_VISIBLE_DEVICES=intel.com/gpu=card9", "AMD_VISIBLE_DEVICES=2"]
    bundle = make_busybox_bundle(str(tmp_path / "b"), ["true"], env)
    options = Options(cdi_spec_dirs=(str(spec_dir),))
    result = edit_bundle(bundle, HostRoot.single(amd_sim.root), options=options, dry_run=True)
    assert result.cdi_devices == ("intel.com/gpu=card9",)
    doc = json.loads(result.after)
    paths = [d["path"] for d in doc["linux"]["devices"]]
    assert paths == ["/dev/dri/renderD200", "/dev/kfd", "/dev/dri/card2", "/dev/dri/renderD129"]
    assert "AMD_VISIBLE_DEVICES=void" in doc["process"]["env"]
    # with mode = "cdi" the AMD entries are CDI names too, and amd.com/gpu=2 is in no spec
    with pytest.raises(CdiError, match=r"amd\.com/gpu=2"):
        edit_bundle(
            bundle,
            HostRoot.single(amd_sim.root),
            options=Options(cdi_spec_dirs=(str(spec_dir),), mode="cdi"),
            dry_run=True,
        )


# --- malformed and hostile input on the AMD and Intel paths ---------------------------------------


@pytest.mark.parametrize(
    "value", ["9" * 5000, "0-" + "9" * 5000, "0," + "1" * 4301], ids=["index", "range", "list"]
)
def test_amd_huge_index_is_a_request_error(amd_sim: simvendors.SimDrmHost, value: str) -> None:
    """``AMD_VISIBLE_DEVICES`` with an index of 5000 digits: Python's int() refuses
    more than 4300 digits with ``ValueError``, which escapes ``select_drm_gpus`` (and so
    ``ocihook edit``, the hook and ``ocihook-runtime`` print a traceback). Expected:
    :class:`RequestError` "no AMD GPU with index ..." (exit 5)."""
    host = amd.discover(HostRoot.single(amd_sim.root))
    request = drm_request_from_env("amd", {"AMD_VISIBLE_DEVICES": value})
    assert request is not None
    with pytest.raises(RequestError):
        select_drm_gpus(request, host.gpus)


def test_amd_huge_index_edit_exit_code(amd_sim: simvendors.SimDrmHost, tmp_path: Path) -> None:
    """The same through ``ocihook edit``: found a ``ValueError`` traceback (exit 1);
    expected exit 5 and config.json untouched."""
    bundle = tmp_path / "b"
    (bundle / "rootfs").mkdir(parents=True)
    doc = {
        "ociVersion": "1.0.2",
        "process": {"args": ["true"], "cwd": "/", "env": ["AMD_VISIBLE_DEVICES=" + "9" * 5000]},
        "root": {"path": "rootfs"},
        "linux": {},
    }
    (bundle / "config.json").write_text(json.dumps(doc))
    before = (bundle / "config.json").read_bytes()
    roots = ["--driver-root", amd_sim.root, "--dev-root", amd_sim.root]
    proc = run_cli("edit", "-b", str(bundle), *roots)
    assert proc.returncode == EXIT_CODES[RequestError], proc.stderr[-500:]
    assert "Traceback" not in proc.stderr
    assert (bundle / "config.json").read_bytes() == before


def test_kfd_properties_with_a_huge_value_never_raise() -> None:
    """``parse_kfd_properties`` says it never raises; a line with a 5000-digit value (a
    corrupt sysfs file) raises ``ValueError`` from int(). Expected: the line ignored."""
    assert amd.parse_kfd_properties("x " + "9" * 5000 + "\ndomain 1\n") == {"domain": 1}


def test_amd_discovery_with_a_huge_kfd_value(tmp_path: Path) -> None:
    """A KFD topology ``properties`` file with a huge number makes ``amd.discover`` (and
    so ``ocihook info``, ``cdi generate --vendor amd``) die with ``ValueError`` instead of
    skipping the line or a :class:`DiscoveryError` (exit 6)."""
    built = simvendors.build_amd(str(tmp_path / "amd"))
    topo = Path(built.root, "sys/class/kfd/kfd/topology/nodes")
    props = sorted(topo.glob("*/properties"))
    assert props
    with open(props[0], "a") as f:
        f.write("max_engine_clk_fcompute " + "9" * 5000 + "\n")
    try:
        host = amd.discover(HostRoot.single(built.root))
    except OcihookError:
        return
    assert len(host.gpus) == len(built.amd)


def test_intel_sriov_numvfs_not_a_number_is_not_a_traceback(tmp_path: Path) -> None:
    """``sriov_numvfs`` holding ``²`` (U+00B2: ``str.isdigit()`` is true, ``int()``
    refuses it): ``intel.discover`` (and ``ocihook info``, ``cdi generate --vendor
    intel``) die with ``ValueError``. Expected: the attribute treated as malformed (a
    warning, or a :class:`DiscoveryError`, exit 6)."""
    from ocihook.discovery import intel

    built = simvendors.build_intel(str(tmp_path / "intel"), sriov=True)
    (numvfs,) = Path(built.root, "sys/devices").rglob("sriov_numvfs")
    numvfs.write_text("\u00b2\n")
    try:
        host = intel.discover(HostRoot.single(built.root))
    except OcihookError as e:
        assert e.path is not None and "sriov_numvfs" in e.path
    else:
        assert host.gpus


def test_amd_partition_dir_with_a_non_ascii_digit_is_not_a_traceback(tmp_path: Path) -> None:
    """A platform device ``amdgpu_xcp_²`` (``isdigit()`` true, ``int()`` refuses):
    ``amd.discover`` dies with ``ValueError``. Expected: the entry ignored, as other
    names that are not ``amdgpu_xcp_<N>``."""
    built = simvendors.build_amd(str(tmp_path / "amd"))
    Path(built.root, "sys/devices/platform/amdgpu_xcp_\u00b2").mkdir()
    host = amd.discover(HostRoot.single(built.root))
    assert len(host.gpus) == len(built.amd)


# -- the names kernels give: every form read, the unknown ones warned about ----------------


@pytest.mark.parametrize("xcp", ["amdgpu_xcp_0", "amdgpu_xcp.0"])
def test_amd_partition_names_of_every_kernel(tmp_path: Path, xcp: str) -> None:
    """Linux 6.10 and later name a partition's platform device ``amdgpu_xcp_<N>``; 6.5 to
    6.9 ``amdgpu_xcp.<N>`` (amdgpu_xcp_drv.c). Both give the same GPUs and indices, with
    the partition in ``info`` and in ``=all``."""
    built = simvendors.build_amd(str(tmp_path / "amd"), xcp_name=xcp)
    host = amd.discover(HostRoot.single(built.root))
    got = [(g.index, g.bus_id, g.card_name, g.render.minor, g.partition) for g in host.gpus]
    assert got == [(s.index, s.bus_id, f"card{s.card}", s.render, s.partition) for s in built.amd]
    assert host.gpus[-1].sysfs_dir.endswith(f"devices/platform/{xcp}")
    assert not [w for w in host.warnings if "partition" in w]
    r = run_cli("info", *_roots(built.root))
    assert r.returncode == 0, r.stderr
    assert "renderD132" in r.stdout


@pytest.mark.parametrize(
    ("xcp", "known"),
    [
        ("amdgpu_xcp_1", True),
        ("amdgpu_xcp.1", True),
        ("amdgpu_xcp_", False),
        ("amdgpu_xcp-1", False),
        ("amdgpu_xcp_\u00b2", False),
        ("amdgpu_xcp_1234567890", False),
        ("amdgpu_xcpx", False),
    ],
)
def test_amd_partition_name_forms(xcp: str, known: bool) -> None:
    assert (amd.xcp_number(xcp) is not None) == known


def test_amd_unknown_partition_name_is_warned(tmp_path: Path) -> None:
    """A platform device that looks like a partition in no known form is skipped with a
    warning naming it (it once vanished from info and =all without a word)."""
    built = simvendors.build_amd(str(tmp_path / "amd"))
    odd = Path(built.root, "sys/devices/platform/amdgpu_xcp-7")
    odd.mkdir()
    host = amd.discover(HostRoot.single(built.root))
    assert len(host.gpus) == len(built.amd)
    assert f"{odd}: looks like an amdgpu partition but is not named amdgpu_xcp_<N> or " in (
        "\n".join(host.warnings)
    )


def test_drm_entry_of_unknown_form_is_warned(tmp_path: Path) -> None:
    """In a GPU's drm/ directory: card<N>, renderD<N> and the control nodes of kernels
    before 6.8 (controlD<N>) are known; an entry such as renderD1x is warned about."""
    built = simvendors.build_amd(str(tmp_path / "amd"))
    drm_dir = Path(amd.discover(HostRoot.single(built.root)).gpus[0].sysfs_dir, "drm")
    (drm_dir / "renderD1x").mkdir()
    host = amd.discover(HostRoot.single(built.root))
    assert len(host.gpus) == len(built.amd)
    warned = [w for w in host.warnings if "renderD1x" in w]
    assert warned == [
        f"{drm_dir}/renderD1x: looks like a DRM node but is not named card<N> or renderD<N>; "
        "skipped"
    ]
    assert not [w for w in host.warnings if "controlD" in w]  # the sim has controlD<N>


def test_intel_gpu_without_a_card_node(tmp_path: Path) -> None:
    """An Intel GPU whose display is off has a render node and no card node: found from its
    renderD<N> entry (it was dropped when only card<N> entries were read)."""
    built = simvendors.build_intel(str(tmp_path / "intel"))
    # the second GPU loses its card node, as a kernel without display support gives it
    second = built.intel[1]
    card = Path(built.root, "sys/class/drm", f"card{second.card}")
    target = Path(os.path.realpath(card))
    card.unlink()
    for p in sorted(target.rglob("*"), reverse=True):
        p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
    target.rmdir()
    host = intel.discover(HostRoot.single(built.root))
    got = [(g.bus_id, g.card, g.render.minor) for g in host.gpus]
    assert got == [
        (built.intel[0].bus_id, host.gpus[0].card, built.intel[0].render),
        (second.bus_id, None, second.render),
    ]
    assert [w for w in host.warnings if "skipped" in w] == []


def test_intel_unknown_class_entry_is_warned(tmp_path: Path) -> None:
    built = simvendors.build_intel(str(tmp_path / "intel"))
    gpu = Path(os.path.realpath(Path(built.root, "sys/class/drm/card0")))
    odd = gpu.parent / "cardX"
    odd.mkdir()
    os.symlink(gpu.parent.parent, odd / "device")
    os.symlink(odd, Path(built.root, "sys/class/drm/cardX"))
    host = intel.discover(HostRoot.single(built.root))
    assert len(host.gpus) == len(built.intel)
    assert any(
        w.startswith(f"{built.root}/sys/class/drm/cardX: an Intel DRM device")
        for w in host.warnings
    )
