"""``ocihook cdi generate`` with the options of ``nvidia-ctk cdi generate``: ``--device-id``,
``--no-all-device``, ``--disable-hook``/``--enable-hook`` and ``--mode``, on the simulated
host (8 GPUs; GPU 1 split in MIG devices 1:0 and 1:1; GPU 2 is /dev/nvidia3), its WSL2
variant and the realistic host."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import load_pynvml_double, run_cli, sim_nvml

from ocihook.cdi.generate import generate_drm_spec, generate_spec
from ocihook.cdi.hookargs import hook_data
from ocihook.cdi.names import CdiError
from ocihook.cdi.spec import Spec, validate_spec
from ocihook.cdi.toolkitopts import (
    DEFAULT_HOOKS,
    OTHER_TOOLKIT_MODES,
    SPEC_HOOKS,
    check_mode,
    parse_device_ids,
    resolve_hooks,
)
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.drm import discover_vendor
from ocihook.discovery.nvidia import NvidiaHost, discover
from ocihook.sim import vendors as simvendors
from ocihook.sim import wsl as simwsl

#: The hook arguments each of the toolkit's hook names stands for in ocihook's spec.
FLAGS = {
    "update-ldcache": {"--libs", "--ld-so-conf"},
    "enable-cuda-compat": {"--cuda-compat"},
    "disable-device-node-modification": {"--mask-proc", "--proc-gpus-from-devices"},
}


@pytest.fixture(scope="module")
def host(sim: Any) -> NvidiaHost:
    return discover(HostRoot.single(sim.root), gpu_backend="procfs")


def _names(spec: Spec) -> list[str]:
    return [d.name for d in spec.devices]


def _device(spec: Spec, name: str) -> Any:
    (found,) = [d.container_edits for d in spec.devices if d.name == name]
    return found


def _paths(edits: Any) -> list[str]:
    return [n.path for n in edits.device_nodes]


def _flags(args: Any) -> set[str]:
    return {a for a in args if a.startswith("--")} - {"--ocihook-version"}


def _roots(root: str) -> list[str]:
    return ["--driver-root", root, "--dev-root", root]


def _generate(root: str, *args: str) -> Any:
    return run_cli("cdi", "generate", "--format", "json", *_roots(root), *args)


# --- --device-id: reading the list --------------------------------------------------------


def test_device_ids_read_as_the_toolkit_reads_them() -> None:
    uuid = "GPU-3c4a4330-83d3-6797-364b-dad1344e8807"
    assert parse_device_ids([]) is None
    assert parse_device_ids(["all"]) is None
    assert parse_device_ids(["0", "1,all"]) is None  # all anywhere: every device
    assert parse_device_ids(["1", "0:1, 2", f" {uuid}", "1"]) == ("1", "0:1", "2", uuid)
    mig = "MIG-GPU-e63d4e2e-156f-7999-7026-e507355cd5de/1/0"
    assert parse_device_ids([mig, "MIG-0b56e86c-1b1f-5b4c-9a1b-8a1d5d2e6f70"]) == (
        mig,
        "MIG-0b56e86c-1b1f-5b4c-9a1b-8a1d5d2e6f70",
    )
    assert parse_device_ids(["007"]) == ("007",)  # decimal, as Go's ParseUint reads it


@pytest.mark.parametrize(
    ("value", "bad"),
    [
        ("none", "none"),  # the toolkit's empty spec: a CDI spec needs a device
        ("0,", ""),
        ("-1", "-1"),
        ("+1", "+1"),
        ("0:1:2", "0:1:2"),
        ("GPU-3c4a4330", "GPU-3c4a4330"),
        ("0000:07:00.0", "0000:07:00.0"),  # a PCI address: NVIDIA_VISIBLE_DEVICES only
        ("nvidia.com/gpu=0", "nvidia.com/gpu=0"),
        ("\uff11", "\uff11"),  # a fullwidth digit is not ASCII
    ],
)
def test_malformed_device_ids_are_refused(value: str, bad: str) -> None:
    with pytest.raises(CdiError) as e:
        parse_device_ids(["0", value])
    assert (e.value.field, e.value.value) == ("--device-id", bad)


HEX = "0123456789abcdef"
UUIDS = st.uuids().map(str)
VALID_IDS = st.one_of(
    st.integers(0, 10**12).map(str),
    st.tuples(st.integers(0, 99), st.integers(0, 99)).map(lambda t: f"{t[0]}:{t[1]}"),
    UUIDS.map(lambda u: "GPU-" + u),
    UUIDS.map(lambda u: "MIG-" + u),
    st.tuples(UUIDS, st.integers(0, 14), st.integers(0, 7)).map(
        lambda t: f"MIG-GPU-{t[0]}/{t[1]}/{t[2]}"
    ),
)


@given(
    ids=st.lists(st.one_of(VALID_IDS, st.just("all")), min_size=1, max_size=12),
    cuts=st.lists(st.booleans(), min_size=12, max_size=12),
    blanks=st.lists(st.sampled_from(["", " ", "\t"]), min_size=24, max_size=24),
)
def test_device_id_lists_split_at_commas_and_options(
    ids: list[str], cuts: list[bool], blanks: list[str]
) -> None:
    """However the ids are spread over options and commas, with blanks around them, the
    result is each id once in order, or every device when all is among them."""
    values: list[str] = []
    for i, item in enumerate(ids):
        text = blanks[2 * i] + item + blanks[2 * i + 1]
        if values and not cuts[i]:
            values[-1] += "," + text
        else:
            values.append(text)
    expected = None if "all" in ids else tuple(dict.fromkeys(ids))
    assert parse_device_ids(values) == expected


@given(st.lists(st.text(alphabet=HEX + "GPUMI-:/, alnx0", max_size=40), max_size=4))
def test_device_id_parsing_never_fails_otherwise(values: list[str]) -> None:
    """Any text gives the ids (each a whole, comma-free id that reads back as itself) or
    CdiError naming --device-id; never another exception."""
    try:
        ids = parse_device_ids(values)
    except CdiError as e:
        assert e.field == "--device-id"
        return
    for item in ids or ():
        assert "," not in item and item == item.strip() and item not in ("", "all")
        assert parse_device_ids([item]) == (item,)


# --- --device-id and --no-all-device: the spec ----------------------------------------------


def test_one_gpu_by_index_is_that_gpu_alone(host: NvidiaHost) -> None:
    """GPU 1 by index: its two names and all, without its MIG devices (the toolkit names
    them by their own ids); GPU 2 is /dev/nvidia3."""
    g1, g2 = host.gpus[1], host.gpus[2]
    spec = generate_spec(host, device_ids=["1"])
    assert _names(spec) == ["1", g1.uuid, "all"]
    dri = host.dri[g1.bus_id]
    assert _paths(_device(spec, "1")) == ["/dev/nvidia1", *(n.path for n in dri.nodes)]
    assert _device(spec, "all") == _device(spec, "1")
    validate_spec(spec)
    spec = generate_spec(host, device_ids=[g2.uuid.lower()])  # a UUID in any case
    assert _names(spec) == ["2", g2.uuid, "all"]
    assert _paths(_device(spec, "2"))[0] == "/dev/nvidia3"


def test_mig_devices_and_gpus_keep_the_host_order(host: NvidiaHost) -> None:
    g1, g3 = host.gpus[1], host.gpus[3]
    mig = g1.mig_devices[1]
    spec = generate_spec(host, device_ids=[g3.uuid, "1:1"])
    assert _names(spec) == ["1:1", "3", g3.uuid, "all"]
    assert _paths(_device(spec, "1:1")) == ["/dev/nvidia1", mig.gi_node.path, mig.ci_node.path]
    assert "1" not in _names(spec) and "1:0" not in _names(spec)
    dri = host.dri[g3.bus_id]
    assert _paths(_device(spec, "all")) == [
        "/dev/nvidia1",
        mig.gi_node.path,
        mig.ci_node.path,
        "/dev/nvidia2",  # GPU 3's minor
        *(n.path for n in dri.nodes),
    ]
    # the older MIG UUID form names the parent GPU and the instance ids
    older = f"MIG-{g1.uuid}/{mig.gi}/{mig.ci}"
    assert _names(generate_spec(host, device_ids=[older])) == ["1:1", "all"]


def test_no_all_device(host: NvidiaHost) -> None:
    spec = generate_spec(host, all_device=False)
    assert "all" not in _names(spec)
    assert _names(spec) == _names(generate_spec(host))[:-1]
    spec = generate_spec(host, device_ids=["0"], all_device=False, name_strategies=["index"])
    assert _names(spec) == ["0"]
    validate_spec(spec)


def test_an_id_the_host_lacks_names_what_it_has(host: NvidiaHost) -> None:
    for missing in ("8", "1:2", "0:0", "GPU-00000000-0000-0000-0000-000000000000"):
        with pytest.raises(CdiError) as e:
            generate_spec(host, device_ids=["0", missing])
        assert (e.value.field, e.value.value) == ("--device-id", missing)
        assert e.value.hint is not None and "MIG devices 1:0, 1:1" in e.value.hint


def test_a_selection_without_names_is_refused(host: NvidiaHost) -> None:
    """procfs knows no MIG UUID: MIG 1:0 has no name under the uuid strategy, and an
    empty device all is no device either."""
    for all_device in (True, False):
        with pytest.raises(CdiError, match="no device to write") as e:
            generate_spec(host, device_ids=["1:0"], name_strategies=["uuid"], all_device=all_device)
        assert (e.value.field, e.value.value) == ("--device-id", "1:0")
    spec = generate_spec(host, device_ids=["1", "1:0"], name_strategies=["uuid"])
    assert _names(spec) == [host.gpus[1].uuid, "all"]


def test_cli_device_ids_and_no_all_device(sim: Any) -> None:
    r = _generate(sim.root, "--device-id", "2", "--devices", "1:0,1:1", "--no-all-device")
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    spec = json.loads(r.stdout)
    g2 = discover(HostRoot.single(sim.root), gpu_backend="procfs").gpus[2]
    assert [d["name"] for d in spec["devices"]] == ["1:0", "1:1", "2", g2.uuid]
    r = _generate(sim.root, "--device-ids", "0", "--device", "all")
    assert [d["name"] for d in json.loads(r.stdout)["devices"]][-1] == "all"
    assert len(json.loads(r.stdout)["devices"]) == 8 * 2 + 2 + 1


@pytest.mark.parametrize(
    ("value", "code", "words"),
    [
        ("none", 2, "a CDI spec needs at least one"),
        ("0,,1", 2, "not a device id"),
        ("3b:00.0", 2, "not a device id"),
        ("9", 11, "no such GPU"),
    ],
)
def test_cli_device_id_errors(sim: Any, value: str, code: int, words: str) -> None:
    r = _generate(sim.root, "--device-id", value)
    assert r.returncode == code, r.stderr
    (line,) = r.stderr.splitlines()
    assert words in line and "--device-id" in line and r.stdout == ""


# --- --disable-hook / --enable-hook -----------------------------------------------------------


def test_hook_names_resolve_as_the_toolkit_resolves_them() -> None:
    every = frozenset(SPEC_HOOKS)
    assert every == DEFAULT_HOOKS
    assert resolve_hooks([]) == (every, ())
    assert resolve_hooks(["all"]) == (frozenset(), ())
    kept, notes = resolve_hooks(["create-symlinks,enable-cuda-compat"])
    assert kept == every - {"create-symlinks", "enable-cuda-compat"} and notes == ()
    # an enabled hook stays whatever is disabled
    kept, _ = resolve_hooks(["all"], ["update-ldcache", "enable-cuda-compat"])
    assert kept == {"update-ldcache", "enable-cuda-compat"}
    assert resolve_hooks(["update-ldcache"], ["update-ldcache"])[0] == every
    # CUDA compat goes through the ld.so.cache: without it, a note says so
    kept, notes = resolve_hooks(["update-ldcache"])
    assert "enable-cuda-compat" in kept
    assert notes == (
        "enable-cuda-compat has no effect without update-ldcache: ocihook brings the compat "
        "libraries in through the container's ld.so.cache",
    )


@pytest.mark.parametrize("name", ["chmod", "update-application-profile"])
@pytest.mark.parametrize("flag", ["--disable-hook", "--enable-hook"])
def test_hooks_without_an_equivalent_are_a_note(flag: str, name: str) -> None:
    args = ([name], []) if flag == "--disable-hook" else ([], [name])
    kept, notes = resolve_hooks(*args)
    assert kept == DEFAULT_HOOKS
    (note,) = notes
    assert note.startswith(f"{flag} {name} has no effect: ocihook's spec ")


@pytest.mark.parametrize(
    ("disabled", "enabled", "field", "value"),
    [
        (["create-symlink"], [], "--disable-hook", "create-symlink"),
        (["update-ldcache,"], [], "--disable-hook", ""),
        ([], ["all"], "--enable-hook", "all"),
        ([], ["Update-LDCache"], "--enable-hook", "Update-LDCache"),
    ],
)
def test_unknown_hook_names_are_refused(
    disabled: list[str], enabled: list[str], field: str, value: str
) -> None:
    with pytest.raises(CdiError) as e:
        resolve_hooks(disabled, enabled)
    assert (e.value.field, e.value.value) == (field, value)


def test_each_hook_disabled_leaves_the_others(host: NvidiaHost) -> None:
    full = generate_spec(host)
    (hook,) = full.container_edits.hooks
    every = _flags(hook.args)
    assert every == {"--links", *set().union(*FLAGS.values())}
    libs = host.libraries_for(["compute"])
    cuda = next(lib for lib in libs if lib.soname == "libcuda.so.1")
    cdir = os.path.dirname(cuda.path)
    soname = f"{cuda.name}::{cdir}/libcuda.so.1"  # ldconfig's link in the toolkit
    development = f"libcuda.so.1::{cdir}/libcuda.so"  # the toolkit's create-symlinks
    for name in SPEC_HOOKS:
        spec = generate_spec(host, hooks=DEFAULT_HOOKS - {name})
        (hook,) = spec.container_edits.hooks
        data = hook_data(hook.args)
        assert data is not None
        _version, links, lib_args = data
        gone = FLAGS.get(name, set())
        if name == "update-ldcache":  # compat goes through the ld.so.cache
            gone = gone | FLAGS["enable-cuda-compat"]
        assert _flags(hook.args) == every - gone, name
        assert (soname in links) == (name != "update-ldcache")
        assert (development in links) == (name != "create-symlinks")
        assert (f"{cdir}/libcuda.so.1::0x0303" in lib_args) == (name != "update-ldcache")
        # the GPUs' /dev/dri/by-path links are create-symlinks' too
        gpu_hooks = _device(spec, "0").hooks
        assert len(gpu_hooks) == (0 if name == "create-symlinks" else 1)
        assert len(_device(spec, "all").hooks) == len(gpu_hooks)
        validate_spec(spec)
        assert spec.container_edits.mounts == full.container_edits.mounts
        assert spec.container_edits.device_nodes == full.container_edits.device_nodes


def test_every_hook_disabled_means_no_hook(host: NvidiaHost) -> None:
    spec = generate_spec(host, hooks=())
    assert not [e.hooks for e in (spec.container_edits, *(d.container_edits for d in spec.devices))
                if e.hooks]  # fmt: skip
    assert spec.container_edits.mounts == generate_spec(host).container_edits.mounts
    validate_spec(spec)
    # the mask alone: the hook has something to do, so it stays
    (hook,) = generate_spec(host, hooks={"disable-device-node-modification"}).container_edits.hooks
    assert _flags(hook.args) == FLAGS["disable-device-node-modification"]
    # compat without the ld.so.cache does nothing, and is left out
    assert not generate_spec(host, hooks={"enable-cuda-compat"}).container_edits.hooks
    with pytest.raises(CdiError):
        generate_spec(host, hooks={"chmod"})


def test_cli_hooks(sim: Any) -> None:
    r = _generate(sim.root, "--disable-hook", "all", "--enable-hooks", "update-ldcache")
    assert (r.returncode, r.stderr) == (0, "")
    spec = json.loads(r.stdout)
    (hook,) = spec["containerEdits"]["hooks"]
    assert _flags(hook["args"]) == {"--links", "--libs", "--ld-so-conf"}
    assert not [d for d in spec["devices"] if d["containerEdits"].get("hooks")]
    r = _generate(sim.root, "--disable-hooks", "all")
    assert "hooks" not in json.loads(r.stdout)["containerEdits"]
    # a name without an equivalent: the spec is the default one, and one note says why
    default = _generate(sim.root).stdout
    r = _generate(sim.root, "--disable-hook", "chmod")
    assert (r.returncode, r.stdout) == (0, default)
    (line,) = r.stderr.splitlines()
    assert line.startswith("ocihook: note: --disable-hook chmod has no effect: ")
    r = _generate(sim.root, "--disable-hook", "ldcache")
    assert (r.returncode, r.stdout) == (2, "")
    (line,) = r.stderr.splitlines()
    assert line.startswith("ocihook: error[usage]: unknown hook name (field --disable-hook, ")
    assert "update-ldcache" in line  # the names there are
    r = _generate(sim.root, "--enable-hook", "all")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1


def test_realistic_host_hooks(realistic: dict[str, Any]) -> None:
    """On the host built from NVIDIA's packages: create-symlinks off keeps every soname
    link and drops the development and GLVND links; update-ldcache off the reverse."""
    host = discover(HostRoot.single(realistic["root"]))
    if not host.gpus:
        pytest.skip("the realistic host has no GPU entries")
    every = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")
    libs = host.libraries_for(every)
    sonames = {
        f"{lib.name}::{os.path.dirname(lib.path)}/{lib.soname}"
        for lib in libs
        if lib.soname != lib.name
    }

    def links(hooks: frozenset[str]) -> set[str]:
        (hook,) = generate_spec(host, hooks=hooks).container_edits.hooks
        data = hook_data(hook.args)
        assert data is not None
        return set(data[1])

    full = links(DEFAULT_HOOKS)
    assert sonames < full
    without_symlinks = links(DEFAULT_HOOKS - {"create-symlinks"})
    assert without_symlinks == sonames
    extra = full - sonames
    assert any(link.endswith("/libcuda.so") for link in extra)
    assert links(DEFAULT_HOOKS - {"update-ldcache"}) == extra


# --- --mode -------------------------------------------------------------------------------------


def test_modes() -> None:
    assert [check_mode(m) for m in ("auto", "NVML", "Wsl")] == ["auto", "nvml", "wsl"]
    assert set(OTHER_TOOLKIT_MODES) == {
        "csv", "management", "gds", "mofed", "imex", "nvswitch", "gdrcopy",
    }  # fmt: skip


@pytest.mark.parametrize("mode", [*OTHER_TOOLKIT_MODES, "GDS", "bogus"])
def test_cli_modes_ocihook_does_not_generate(sim: Any, mode: str) -> None:
    r = _generate(sim.root, "--mode", mode)
    assert (r.returncode, r.stdout) == (2, "")
    (line,) = r.stderr.splitlines()
    assert line.startswith("ocihook: error[usage]: ")
    assert f"field --mode, value {mode!r}" in line
    assert line.endswith("hint: ocihook generates auto, nvml, wsl")
    if mode.lower() in OTHER_TOOLKIT_MODES:
        assert f"the toolkit's {mode.lower()} mode is not generated by ocihook" in line


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    module = load_pynvml_double()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    yield module


def test_cli_mode_nvml_is_the_nvml_backend(sim: Any, fake_nvml: Any) -> None:
    fake_nvml.load(sim_nvml(sim))
    r = _generate(sim.root, "--discovery-mode", "nvml")
    assert r.returncode == 0, r.stderr
    assert r.stdout == _generate(sim.root, "--gpu-backend", "nvml").stdout
    names = [d["name"] for d in json.loads(r.stdout)["devices"]]
    mig = sim.gpus[1].mig_devices[0]
    assert mig.uuid in names  # NVML knows MIG UUIDs; procfs does not
    assert mig.uuid not in _generate(sim.root, "--gpu-backend", "procfs").stdout
    r = _generate(sim.root, "--mode", "nvml", "--gpu-backend", "procfs")
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 1


def test_cli_mode_wsl_on_another_host(sim: Any) -> None:
    r = _generate(sim.root, "--mode", "wsl")
    assert r.returncode == 6
    (line,) = r.stderr.splitlines()
    assert "this host is not WSL2" in line


@pytest.fixture
def wsl_host(tmp_path: Path) -> simwsl.SimulatedWslHost:
    if os.geteuid() != 0:
        pytest.skip("making /dev/dxg needs root (mknod)")
    return simwsl.build(str(tmp_path / "wsl"))


def test_wsl_spec_with_toolkit_options(wsl_host: simwsl.SimulatedWslHost) -> None:
    store = f"/usr/lib/wsl/drivers/{simwsl.STORE}"
    r = _generate(wsl_host.root, "--mode", "wsl", "--disable-hook", "update-ldcache")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)
    assert [d["name"] for d in spec["devices"]] == ["all"]
    (hook,) = spec["containerEdits"]["hooks"]
    data = hook_data(hook["args"])
    assert data is not None
    assert data[1] == [f"{store}/nvidia-smi::/usr/bin/nvidia-smi"]  # no soname links
    assert data[2] == [] and "--cuda-compat" not in hook["args"]
    r = _generate(wsl_host.root, "--disable-hook", "create-symlinks,update-ldcache")
    assert "hooks" not in json.loads(r.stdout)["containerEdits"]
    # one device, all, is /dev/dxg for every GPU: a note says the options change nothing
    r = _generate(wsl_host.root, "--device-id", "0", "--no-all-device")
    assert r.returncode == 0
    assert [d["name"] for d in json.loads(r.stdout)["devices"]] == ["all"]
    (line,) = r.stderr.splitlines()
    assert line.startswith("ocihook: note: --device-id and --no-all-device have no effect on WSL2")


# --- AMD and Intel --------------------------------------------------------------------------------


def test_cli_cdi_vendor_and_class_aliases(sim: Any) -> None:
    r = _generate(sim.root, "--cdi-vendor", "example.com", "--cdi-class", "accel")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kind"] == "example.com/accel"
    r = _generate(sim.root, "--cdi-class", "_bad")
    assert r.returncode == 11 and "--class" in r.stderr


def test_drm_specs(tmp_path: Path) -> None:
    amd = simvendors.build_amd(str(tmp_path / "amd"))
    host = discover_vendor("amd", HostRoot.single(amd.root))
    names = [d.name for d in generate_drm_spec(host, all_device=False).devices]
    assert names == [str(i) for i in range(len(host.gpus))]
    r = run_cli("cdi", "generate", "--vendor", "amd", *_roots(amd.root), "--no-all-device")
    assert r.returncode == 0, r.stderr
    assert "name: all" not in r.stdout
    r = run_cli("cdi", "generate", "--vendor", "amd", *_roots(amd.root), "--device-id", "0")
    assert r.returncode == 11
    (line,) = r.stderr.splitlines()
    assert "field --device-id" in line
