"""NVIDIA k8s-device-plugin's configuration file (``ocihook.k8s.nvconfig``) and what the
plugin does with it: the keys read as NVIDIA's ``api/config/v1`` spells them, the command
line ranked above the file, ``--device-id-strategy``, time-slicing per resource with
``renameByDefault`` and ``failRequestsGreaterThanOne``, one warning line for the keys
ocihook does not act on, ``$CONFIG_FILE`` and ``$NODE_NAME``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc")

import yaml
from hypothesis import given
from hypothesis import strategies as st
from support import run_cli

from ocihook.core.errors import ConfigError
from ocihook.core.hostroot import HostRoot
from ocihook.k8s.deviceplugin import ResourcePlugin, _Refused
from ocihook.k8s.inventory import Sharing, build_inventory
from ocihook.k8s.nvconfig import (
    DEVICE_LIST_STRATEGIES,
    PluginConfig,
    SharedResource,
    parse_plugin_config,
)
from ocihook.sim import host as simhost

GPU = "nvidia.com/gpu"
KIND = "k8s.ocihook.io/nvidia-gpu"

#: A configuration as NVIDIA's Helm chart and README have operators write them.
TIME_SLICING = """\
version: v1
flags:
  migStrategy: none
  failOnInitError: true
  nvidiaDriverRoot: /
  gdsEnabled: false
  mofedEnabled: false
  plugin:
    passDeviceSpecs: false
    deviceListStrategy: envvar
    deviceIDStrategy: uuid
sharing:
  timeSlicing:
    renameByDefault: true
    failRequestsGreaterThanOne: true
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""


def parse(text: str) -> PluginConfig:
    return parse_plugin_config(text.encode(), "config.yaml")


def test_a_time_slicing_config() -> None:
    c = parse(TIME_SLICING)
    assert c == PluginConfig(
        mig_strategy="none",
        fail_on_init_error=True,
        driver_root="/",
        pass_device_specs=False,
        strategies=("envvar",),
        device_id_strategy="uuid",
        rename_by_default=True,
        fail_requests_greater_than_one=True,
        time_slicing=(SharedResource(GPU, 4),),
    )
    assert c.warning() is None  # gdsEnabled/mofedEnabled false: what ocihook does
    assert c.shared_name(GPU) == "nvidia.com/gpu.shared"


def test_every_implemented_key() -> None:
    c = parse(
        """
flags:
  migStrategy: mixed
  failOnInitError: false
  nvidiaDriverRoot: /run/nvidia/driver
  nvidiaDevRoot: /
  deviceDiscoveryStrategy: nvml
  plugin:
    passDeviceSpecs: true
    deviceListStrategy: [cdi-cri, envvar, cdi-cri]
    deviceIDStrategy: index
    cdiAnnotationPrefix: nvidia.cdi.k8s.io/
    containerDriverRoot: /driver-root
    sharedDevicesAllocationPolicy: distributed
sharing:
  timeSlicing:
    resources:
    - {name: mig-1g.10gb, replicas: 2, devices: all}
    - {name: gpu, replicas: 3}
"""
    )
    assert c == PluginConfig(
        mig_strategy="mixed",
        fail_on_init_error=False,
        driver_root="/run/nvidia/driver",
        dev_root="/",
        gpu_backend="nvml",
        pass_device_specs=True,
        strategies=("cdi-cri", "envvar"),
        device_id_strategy="index",
        cdi_annotation_prefix="nvidia.cdi.k8s.io/",
        container_driver_root="/driver-root",
        time_slicing=(SharedResource("nvidia.com/mig-1g.10gb", 2), SharedResource(GPU, 3)),
    )
    assert c.shared_name(GPU) == GPU  # renameByDefault false


def test_json_empty_and_versions() -> None:
    assert parse('{"version": "v1", "flags": {"migStrategy": "single"}}').mig_strategy == "single"
    assert parse("") == PluginConfig() == parse("version: ''\n")
    with pytest.raises(ConfigError) as e:
        parse("version: v2\n")
    assert str(e.value) == (
        "unknown version (NVIDIA's plugin reads v1) (file config.yaml, field version, value 'v2')"
    )


def test_not_implemented_and_unknown_keys_in_one_line() -> None:
    c = parse(
        """
flags:
  migStratgy: mixed
  gdsEnabled: true
  mpsRoot: /run/nvidia/mps
  deviceDiscoveryStrategy: tegra
  plugin:
    nvidiaCTKPath: /usr/bin/nvidia-ctk
    sharedDevicesAllocationPolicy: packed
  gfd:
    oneshot: true
resources:
  gpus:
  - {pattern: "*A100*", name: a100}
sharing:
  timeSlicing:
    resources:
    - {name: nvidia.com/gpu, replicas: 2, rename: gpu-shared, devices: [0, "GPU-1"]}
  mps: {}
imex:
  channelIDs: [0]
extra: 1
"""
    )
    assert c.ignored == (
        "flags.gdsEnabled",
        "flags.mpsRoot",
        "flags.deviceDiscoveryStrategy",
        "flags.gfd",
        "flags.plugin.nvidiaCTKPath",
        "flags.plugin.sharedDevicesAllocationPolicy",
        "resources",
        "sharing.timeSlicing.resources[0].rename",
        "sharing.timeSlicing.resources[0].devices",
        "sharing.mps",
        "imex",
    )
    assert c.unknown == ("extra", "flags.migStratgy")
    warning = c.warning()
    assert warning is not None and "\n" not in warning
    assert warning.startswith("not implemented by ocihook, ignored: flags.gdsEnabled, ")
    assert warning.endswith("; not in NVIDIA's schema, ignored: extra, flags.migStratgy")
    assert c.time_slicing == (SharedResource(GPU, 2),) and c.mig_strategy is None
    # the default rename with renameByDefault is what is done: not ignored
    ok = parse(
        "sharing: {timeSlicing: {renameByDefault: true, resources: "
        "[{name: gpu, replicas: 2, rename: nvidia.com/gpu.shared}]}}"
    )
    assert ok.ignored == () and ok.rename_by_default


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("- a\n", "(top level)", "must be a mapping"),
        ("flags: {migStrategy: all}", "flags.migStrategy", "must be one of none, single, mixed"),
        ("flags: {failOnInitError: 'no'}", "flags.failOnInitError", "must be true or false"),
        ("flags: {nvidiaDriverRoot: run/nvidia}", "flags.nvidiaDriverRoot", "absolute path"),
        ("flags: {plugin: []}", "flags.plugin", "must be a mapping"),
        ("flags: {plugin: {deviceIDStrategy: serial}}", "flags.plugin.deviceIDStrategy",
         "must be one of uuid, index"),
        ("flags: {plugin: {deviceListStrategy: []}}", "flags.plugin.deviceListStrategy",
         "must be a strategy or a list of them"),
        ("flags: {plugin: {deviceListStrategy: [envvar, mounts]}}",
         "flags.plugin.deviceListStrategy[1]", "must be one of envvar"),
        ("flags: {plugin: {cdiAnnotationPrefix: 'cdi.k8s.io'}}",
         "flags.plugin.cdiAnnotationPrefix", "not an annotation key prefix"),
        ("sharing: {timeSlicing: {}}", "sharing.timeSlicing.resources", "no resources specified"),
        ("sharing: {timeSlicing: {resources: [{name: gpu}]}}",
         "sharing.timeSlicing.resources[0].replicas", "no replicas specified"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 1}]}}",
         "sharing.timeSlicing.resources[0].replicas", "2 or more"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2.0}]}}",
         "sharing.timeSlicing.resources[0].replicas", "whole number"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: true}]}}",
         "sharing.timeSlicing.resources[0].replicas", "whole number"),
        ("sharing: {timeSlicing: {resources: [{name: GPU, replicas: 2}]}}",
         "sharing.timeSlicing.resources[0].name", "not a resource name"),
        ("sharing: {timeSlicing: {resources: [{replicas: 2}]}}",
         "sharing.timeSlicing.resources[0].name", "a resource name is required"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}, "
         "{name: nvidia.com/gpu, replicas: 3}]}}",
         "sharing.timeSlicing.resources[1].name", "listed twice"),
        ("sharing: {timeSlicing: {resources: [{name: gpu, replicas: 2, devices: some}]}}",
         "sharing.timeSlicing.resources[0].devices", "the only string allowed is all"),
    ],
)  # fmt: skip
def test_refused_values(text: str, field: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(text)
    assert (e.value.field, e.value.path) == (field, "config.yaml")
    assert message in e.value.message and "\n" not in str(e.value)


def test_not_yaml_aliases_and_depth() -> None:
    with pytest.raises(ConfigError, match="not YAML") as e:
        parse("flags: {migStrategy: [\n")
    assert e.value.line == 2
    with pytest.raises(ConfigError, match="YAML aliases are not allowed"):
        parse("a: &x [1, 2]\nb: *x\n")
    with pytest.raises(ConfigError, match="key migStrategy given twice") as e:
        parse("flags:\n  migStrategy: none\n  migStrategy: mixed\n")
    assert e.value.line == 3
    with pytest.raises(ConfigError, match="nested too deep"):
        parse("[" * 5000 + "]" * 5000)
    with pytest.raises(ConfigError, match="larger than"):
        parse("#" * (2 << 20))


_roots = st.one_of(st.none(), st.sampled_from(["/", "/run/nvidia/driver", "/host"]))
_names = st.sampled_from(["nvidia.com/gpu", "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"])
_configs = st.builds(
    PluginConfig,
    mig_strategy=st.one_of(st.none(), st.sampled_from(["none", "single", "mixed"])),
    fail_on_init_error=st.one_of(st.none(), st.booleans()),
    driver_root=_roots,
    dev_root=_roots,
    gpu_backend=st.one_of(st.none(), st.sampled_from(["auto", "nvml"])),
    pass_device_specs=st.one_of(st.none(), st.booleans()),
    strategies=st.one_of(
        st.none(),
        st.lists(st.sampled_from(DEVICE_LIST_STRATEGIES), min_size=1, unique=True).map(tuple),
    ),
    device_id_strategy=st.one_of(st.none(), st.sampled_from(["uuid", "index"])),
    cdi_annotation_prefix=st.one_of(st.none(), st.sampled_from(["cdi.k8s.io/", "a.b-c/"])),
    container_driver_root=_roots,
    rename_by_default=st.booleans(),
    fail_requests_greater_than_one=st.booleans(),
    time_slicing=st.lists(
        st.builds(SharedResource, _names, st.integers(2, 64)),
        unique_by=lambda r: r.name,
        max_size=3,
    ).map(tuple),
).filter(  # time-slicing's two flags come with its resources only
    lambda c: bool(c.time_slicing) or not (c.rename_by_default or c.fail_requests_greater_than_one)
)


@given(_configs, st.sampled_from(["yaml", "json"]))
def test_round_trip(config: PluginConfig, fmt: str) -> None:
    """A configuration written out as NVIDIA's schema spells it reads back the same."""
    doc = config.to_dict()
    text = json.dumps(doc) if fmt == "json" else yaml.safe_dump(doc)
    assert parse(text) == config


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_places = st.sampled_from(
    [
        ("version",),
        ("flags",),
        ("flags", "migStrategy"),
        ("flags", "plugin"),
        ("flags", "plugin", "deviceListStrategy"),
        ("flags", "plugin", "cdiAnnotationPrefix"),
        ("flags", "gfd"),
        ("resources",),
        ("sharing",),
        ("sharing", "timeSlicing"),
        ("sharing", "timeSlicing", "resources"),
        ("imex",),
    ]
)


@given(_configs, _places, _json)
def test_any_value_anywhere_is_a_config_error_at_worst(
    config: PluginConfig, place: tuple[str, ...], value: object
) -> None:
    """A valid document with any JSON value grafted at a key of the schema parses, or is
    refused with one ConfigError line naming a key: never another exception."""
    doc: Any = config.to_dict()
    node = doc
    for key in place[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[place[-1]] = value
    try:
        parse(json.dumps(doc))
    except ConfigError as e:
        assert e.field is not None and "\n" not in str(e)


# --- what the plugin does with it -------------------------------------------------------


@pytest.fixture
def root_sim(sim: simhost.SimulatedHost) -> simhost.SimulatedHost:
    if os.geteuid() != 0:
        pytest.skip("needs root: the simulated GPU nodes are made with mknod (health checks them)")
    return sim


def test_device_id_strategy_index(root_sim: simhost.SimulatedHost) -> None:
    inv = build_inventory(HostRoot.single(root_sim.root), device_id_strategy="index")
    devs = inv.devices[GPU]
    assert [d.id for d in devs] == [str(i) for i in range(8)]
    assert [d.cdi_name for d in devs][:2] == [f"{KIND}=0", f"{KIND}=1"]
    assert {f"{d.cdi_name.split('=')[1]}" for d in devs} <= {
        x.name for x in inv.specs[KIND].devices
    }
    plugin = ResourcePlugin(GPU, devs, "/nonexistent", strategies=("envvar", "cdi-cri"))
    r = plugin.allocate_one(["3", "5"])
    assert dict(r.envs) == {"NVIDIA_VISIBLE_DEVICES": "3,5"}
    mig = build_inventory(
        HostRoot.single(root_sim.root), device_id_strategy="index", mig_strategy="mixed"
    )
    assert [d.id for d in mig.devices["nvidia.com/mig"]] == ["1:0", "1:1"]
    with pytest.raises(ConfigError, match="unknown device id strategy"):
        build_inventory(HostRoot.single(root_sim.root), device_id_strategy="serial")


def test_time_slicing_renamed_and_one_per_request(root_sim: simhost.SimulatedHost) -> None:
    inv = build_inventory(
        HostRoot.single(root_sim.root), time_slicing={GPU: Sharing(4, "nvidia.com/gpu.shared")}
    )
    assert list(inv.devices) == ["nvidia.com/gpu.shared"]
    devs = inv.devices["nvidia.com/gpu.shared"]
    u = root_sim.gpus[0].uuid
    assert [d.id for d in devs][:4] == [f"{u}::{n}" for n in range(4)] and len(devs) == 32
    assert {d.resource for d in devs} == {"nvidia.com/gpu.shared"}
    assert (inv.replicas_of(GPU), inv.advertised(GPU)) == (4, "nvidia.com/gpu.shared")
    plugin = ResourcePlugin(
        "nvidia.com/gpu.shared", devs, "/nonexistent", fail_requests_greater_than_one=True
    )
    assert [c.name for c in plugin.allocate_one([f"{u}::2"]).cdi_devices] == [f"{KIND}={u}"]
    with pytest.raises(_Refused) as e:
        plugin.allocate_one([f"{u}::2", f"{root_sim.gpus[1].uuid}::0"])
    assert (
        "may ask for one only (failRequestsGreaterThanOne); this one asks for 2" in e.value.message
    )
    # without it, two replicas of one GPU give the GPU once (as before)
    lax = ResourcePlugin("nvidia.com/gpu.shared", devs, "/nonexistent")
    assert len(lax.allocate_one([f"{u}::0", f"{u}::1"]).cdi_devices) == 1
    # a resource the node does not advertise: said; --replicas and per resource: refused
    inv = build_inventory(
        HostRoot.single(root_sim.root), time_slicing={"nvidia.com/mig-1g.10gb": Sharing(2)}
    )
    assert "time-slicing of nvidia.com/mig-1g.10gb: this node does not advertise it" in inv.warnings
    with pytest.raises(ConfigError, match="cannot be combined"):
        build_inventory(HostRoot.single(root_sim.root), replicas=2, time_slicing={GPU: Sharing(2)})


def test_features_labels_per_resource(root_sim: simhost.SimulatedHost) -> None:
    from ocihook.k8s.features import gfd_labels

    renamed = build_inventory(
        HostRoot.single(root_sim.root), time_slicing={GPU: Sharing(4, "nvidia.com/gpu.shared")}
    )
    labels, _ = gfd_labels(renamed)
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert not labels["nvidia.com/gpu.product"].endswith("-SHARED")  # renamed: GFD's rule
    shared = build_inventory(HostRoot.single(root_sim.root), time_slicing={GPU: Sharing(2)})
    labels, _ = gfd_labels(shared)
    assert labels["nvidia.com/gpu.product"].endswith("-SHARED")
    assert labels["nvidia.com/gpu.replicas"] == "2"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_cli_config_file(root_sim: simhost.SimulatedHost, tmp_path: Path) -> None:
    roots = ["--driver-root", root_sim.root, "--dev-root", root_sim.root]
    cfg = _write(tmp_path, TIME_SLICING.replace("gdsEnabled: false", "gdsEnabled: true"))
    r = run_cli("k8s", "device-plugin", *roots, "--config-file", cfg, "--list")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert list(data) == ["nvidia.com/gpu.shared"] and len(data["nvidia.com/gpu.shared"]) == 32
    said = [line for line in r.stderr.splitlines() if cfg in line]
    assert said == [
        f"ocihook: warning: {cfg}: not implemented by ocihook, ignored: flags.gdsEnabled"
    ]
    # $CONFIG_FILE, the command line above the file
    env = {**os.environ, "CONFIG_FILE": cfg}
    r = run_cli("k8s", "device-plugin", *roots, "--device-id-strategy", "index", "--list", env=env)
    assert r.returncode == 0, r.stderr
    assert [d["id"] for d in json.loads(r.stdout)["nvidia.com/gpu.shared"]][:2] == ["0::0", "0::1"]
    r = run_cli("k8s", "device-plugin", *roots, "--replicas", "2", "--list", env=env)
    assert list(json.loads(r.stdout)) == [GPU]
    assert "--replicas 2 given: the time-slicing of" in r.stderr
    # a refused file: exit 10, one line
    bad = _write(tmp_path, "flags: {migStrategy: all}\n")
    r = run_cli("k8s", "device-plugin", *roots, "--config-file", bad, "--list")
    assert r.returncode == 10 and r.stderr.count("\n") == 1
    assert "field flags.migStrategy" in r.stderr
    r = run_cli("k8s", "device-plugin", *roots, "--config-file", str(tmp_path / "none"), "--list")
    assert r.returncode == 10 and "cannot read the device plugin configuration" in r.stderr
    r = run_cli("k8s", "device-plugin", *roots, "--cdi-annotation-prefix", "x", "--list")
    assert r.returncode == 10 and "--cdi-annotation-prefix" in r.stderr


def test_cli_features_reads_the_config(root_sim: simhost.SimulatedHost, tmp_path: Path) -> None:
    roots = ["--driver-root", root_sim.root, "--dev-root", root_sim.root]
    cfg = _write(tmp_path, TIME_SLICING)
    r = run_cli("k8s", "features", *roots, "--config-file", cfg)
    assert r.returncode == 0, r.stderr
    assert "nvidia.com/gpu.replicas=4\n" in r.stdout
    assert "ocihook.io/nvidia.com.gpu.shared.count=32\n" in r.stdout


def test_fail_on_init_error_false_waits(tmp_path: Path) -> None:
    """No GPU: exit 6 by default; with failOnInitError false (file or option) the plugin
    says why and waits for SIGTERM without serving, then exits 0."""
    empty = str(tmp_path / "empty")
    os.mkdir(empty)
    roots = ["--driver-root", empty, "--dev-root", empty, "--plugin-dir", str(tmp_path)]
    r = run_cli("k8s", "device-plugin", *roots)
    assert r.returncode == 6 and "no GPU to advertise" in r.stderr
    cfg = _write(tmp_path, "flags: {failOnInitError: false}\n")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ocihook", "k8s", "device-plugin", *roots, "--config-file", cfg],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "no GPU to advertise" in line and "not serving (--no-fail-on-init-error)" in line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_dra_node_name_from_the_environment(sim: simhost.SimulatedHost) -> None:
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    env = {**os.environ, "NODE_NAME": "gpu-node-7"}
    r = run_cli("k8s", "dra-plugin", *roots, "--print-slices", "json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["spec"]["nodeName"] == "gpu-node-7"
    r = run_cli("k8s", "dra-plugin", *roots, "--print-slices", "json", "--node-name", "n1", env=env)
    assert json.loads(r.stdout)["spec"]["nodeName"] == "n1"


def test_annotation_prefix(root_sim: simhost.SimulatedHost) -> None:
    devs = build_inventory(HostRoot.single(root_sim.root)).devices[GPU]
    plugin = ResourcePlugin(
        GPU, devs, "/nonexistent", strategies=("cdi-annotations",),
        annotation_prefix="nvidia.cdi.k8s.io/",
    )  # fmt: skip
    ((key, value),) = plugin.allocate_one([devs[0].id]).annotations.items()
    assert key.startswith("nvidia.cdi.k8s.io/ocihook-k8s_nvidia.com-")
    assert value == f"{KIND}={devs[0].id}"


MPS = """
version: v1
sharing:
  mps:
    renameByDefault: true
    resources:
    - {name: nvidia.com/gpu, replicas: 4}
    - {name: mig-1g.10gb, replicas: 2}
"""


def test_mps_is_refused_in_one_line() -> None:
    """ocihook has no MPS: sharing.mps asking for replicas is refused (not advertised as
    replicas without MPS's limits), naming the key, the resources and what to do
    instead; an MPS section that asks for nothing is only named among the ignored keys."""
    with pytest.raises(ConfigError) as e:
        parse(MPS)
    assert e.value.field == "sharing.mps"
    assert e.value.value == ("nvidia.com/gpu", "mig-1g.10gb")
    assert str(e.value) == (
        "MPS sharing is not implemented by ocihook (it needs NVIDIA's MPS control daemon on "
        "the node); refused rather than advertising replicas without MPS's memory and compute "
        "limits (file config.yaml, field sharing.mps, value 'nvidia.com/gpu, mig-1g.10gb'); "
        "hint: share with sharing.timeSlicing (no memory or compute limits), or keep NVIDIA's "
        "device plugin on the nodes that need MPS"
    )
    # with time-slicing too: still refused (the MPS part would not be done)
    with pytest.raises(ConfigError, match="MPS sharing is not implemented"):
        both = yaml.safe_load(TIME_SLICING)
        both["sharing"]["mps"] = yaml.safe_load(MPS)["sharing"]["mps"]
        parse(yaml.safe_dump(both))
    for empty in ("sharing: {mps: {}}", "sharing: {mps: {resources: []}}",
                  "sharing: {mps: {renameByDefault: true}}"):  # fmt: skip
        assert parse(empty).ignored == ("sharing.mps",)
    assert parse("sharing: {mps: null}").ignored == ()
    with pytest.raises(ConfigError) as e:
        parse("sharing: {mps: {resources: {name: gpu}}}")
    assert (e.value.field, e.value.message) == ("sharing.mps.resources", "must be a list")


def test_cli_refuses_mps(root_sim: simhost.SimulatedHost, tmp_path: Path) -> None:
    """The device plugin and ``k8s features`` given an MPS configuration: exit 10, one
    line, nothing served or printed."""
    roots = ["--driver-root", root_sim.root, "--dev-root", root_sim.root]
    cfg = _write(tmp_path, MPS)
    for command in (["device-plugin", "--list"], ["features"]):
        r = run_cli("k8s", command[0], *roots, "--config-file", cfg, *command[1:])
        assert r.returncode == 10, r.stderr
        assert r.stdout == ""
        assert r.stderr.splitlines() == [
            "ocihook: error[bad-config]: MPS sharing is not implemented by ocihook (it needs "
            "NVIDIA's MPS control daemon on the node); refused rather than advertising "
            f"replicas without MPS's memory and compute limits (file {cfg}, field sharing.mps, "
            "value 'nvidia.com/gpu, mig-1g.10gb'); hint: share with sharing.timeSlicing (no "
            "memory or compute limits), or keep NVIDIA's device plugin on the nodes that need "
            "MPS"
        ]
