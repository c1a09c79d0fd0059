"""``ocihook cdi generate`` and ``cdi transform root``: the spec a host gets, its minimum
version, formats, atomic output, and the hook's view of the devices a spec gave."""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from support import REPO, need_root_and, run_cli

from ocihook.appliers.live import gpu_dirs_of_devices
from ocihook.cdi.generate import generate_spec, spec_bytes, transform_root
from ocihook.cdi.hookargs import hook_data
from ocihook.cdi.inject import inject_devices
from ocihook.cdi.names import CdiError
from ocihook.cdi.registry import Registry
from ocihook.cdi.spec import (
    ContainerEdits,
    Device,
    Mount,
    Spec,
    load_spec,
    minimum_version,
    validate_spec,
)
from ocihook.config.options import cdi_hook_command, hook_program
from ocihook.core.errors import DiscoveryError
from ocihook.core.hostroot import HostRoot
from ocihook.core.version import VERSION
from ocihook.discovery.nvidia import NvidiaHost, discover

with open(os.path.join(REPO, "specs/cdi.schema.json")) as _f:
    VALIDATOR = jsonschema.Draft202012Validator(json.load(_f))


@pytest.fixture(scope="module")
def host(sim: Any) -> NvidiaHost:
    return discover(HostRoot.single(sim.root))


@pytest.fixture(scope="module")
def spec(host: NvidiaHost) -> Spec:
    return generate_spec(host)


def _device(spec: Spec, name: str) -> Any:
    found = [d for d in spec.devices if d.name == name]
    assert len(found) == 1, [d.name for d in spec.devices]
    return found[0].container_edits


def _paths(edits: Any) -> list[str]:
    return [n.path for n in edits.device_nodes]


def test_devices_named_by_index_uuid_mig_and_all(host: NvidiaHost, spec: Spec) -> None:
    expected: list[str] = []
    for g in host.gpus:
        expected += [str(g.index), g.uuid]
        expected += [f"{g.index}:{j}" for j in range(len(g.mig_devices))]
    assert [d.name for d in spec.devices] == [*expected, "all"]
    assert any(g.mig_devices for g in host.gpus), "the simulated host has a MIG-split GPU"
    assert spec.kind == "nvidia.com/gpu"
    validate_spec(spec)
    assert VALIDATOR.is_valid(spec.to_dict())


def test_gpu_device_edits(host: NvidiaHost, spec: Spec) -> None:
    for g in host.gpus:
        by_index, by_uuid = _device(spec, str(g.index)), _device(spec, g.uuid)
        assert by_index == by_uuid
        dri = host.dri[g.bus_id]
        assert _paths(by_index) == [f"/dev/nvidia{g.minor}", *(n.path for n in dri.nodes)]
        node = by_index.device_nodes[0]
        assert (node.type, node.major, node.minor, node.permissions) == ("c", 195, g.minor, "rw")
        assert node.host_path == os.path.join(host.root.dev_root, f"dev/nvidia{g.minor}")
        (hook,) = by_index.hooks
        data = hook_data(hook.args)
        assert data is not None
        assert data[1] == [f"{target}::{link}" for link, target in dri.links]
        assert hook.args[5:9] == ("hook", "cdi", "--ocihook-version", VERSION)
        assert hook.hook_name == "createContainer"


def test_mig_device_edits(host: NvidiaHost, spec: Spec) -> None:
    g = next(g for g in host.gpus if g.mig_devices)
    for j, mig in enumerate(g.mig_devices):
        edits = _device(spec, f"{g.index}:{j}")
        assert _paths(edits) == [f"/dev/nvidia{g.minor}", mig.gi_node.path, mig.ci_node.path]
        assert [n.minor for n in edits.device_nodes[1:]] == [mig.gi_node.minor, mig.ci_node.minor]


def test_all_device_is_the_union(host: NvidiaHost, spec: Spec) -> None:
    union: list[str] = []
    for d in spec.devices[:-1]:
        union += [p for p in _paths(d.container_edits) if p not in union]
    assert _paths(_device(spec, "all")) == union
    assert sum(p.startswith("/dev/nvidia") and p[11:].isdigit() for p in union) == len(host.gpus)


def test_common_edits(host: NvidiaHost, spec: Spec) -> None:
    common = spec.container_edits
    assert common.env == ("NVIDIA_VISIBLE_DEVICES=void",)
    assert _paths(common) == ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"] + (
        ["/dev/nvidia-modeset"] if host.modeset is not None else []
    )
    libs = host.libraries_for(sorted({"utility", "compute", "video", "graphics", "ngx"}))
    by_dest = {m.destination: m for m in common.mounts}
    for lib in libs:
        m = by_dest[lib.path]
        assert m.source == lib.host_path and m.options == ("ro", "nosuid", "nodev", "bind")
    (hook,) = common.hooks
    # this interpreter with ocihook's program: no launcher between the runtime and it
    assert hook.path == sys.executable and hook.args[:5] == cdi_hook_command()
    assert hook.env == ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    args = list(hook.args)
    assert args[5:9] == ["hook", "cdi", "--ocihook-version", VERSION]
    data = hook_data(args)
    assert data is not None
    _version, pairs, lib_args = data
    cuda = next(lib for lib in libs if lib.soname == "libcuda.so.1")
    cdir = os.path.dirname(cuda.path)
    assert f"{cuda.name}::{cdir}/libcuda.so.1" in pairs
    assert f"libcuda.so.1::{cdir}/libcuda.so" in pairs
    assert f"{cdir}/libcuda.so.1::0x0303" in lib_args
    # one --links and one --libs per directory (and flags): not one argument per file
    assert args.count("--links") == len({p.split("::")[1].rsplit("/", 1)[0] for p in pairs})
    assert len(args) < 40 < 2 * (len(pairs) + len(lib_args))
    assert args[args.index("--mask-proc") + 1] == host.root.proc("driver/nvidia")
    assert "--proc-gpus-from-devices" in args
    # the host's CUDA version (here from the driver-branch table) rides along for the note rule
    assert host.cuda_version is not None
    compat = f"/usr/local/cuda/compat::{host.driver_version}::{host.cuda_version}"
    assert args[args.index("--cuda-compat") + 1] == compat


def test_realistic_host_files(realistic: dict[str, Any]) -> None:
    """Every library and file discovery finds on the host built from NVIDIA's packages is
    mounted at its driver-root path; binaries read-only, IPC sockets noexec."""
    host = discover(HostRoot.single(realistic["root"]))
    if not host.gpus:
        pytest.skip("the realistic host has no GPU entries")
    spec = generate_spec(host)
    by_dest = {m.destination: m for m in spec.container_edits.mounts}
    every = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")
    assert {lib.path for lib in host.libraries_for(every)} <= set(by_dest)
    files = host.files_for(every)
    assert {f.path for f in files} <= set(by_dest)
    smi = by_dest["/usr/bin/nvidia-smi"]
    assert smi.options == ("ro", "nosuid", "nodev", "bind") and os.path.isfile(smi.source)
    for f in files:
        if f.kind == "ipc":
            assert by_dest[f.path].options == ("nosuid", "nodev", "noexec", "bind")
    assert any(lib.elf_class == 32 for lib in host.libraries_for(every))
    validate_spec(spec)


def _at_root(host: NvidiaHost) -> NvidiaHost:
    """``host`` as if its dev root were ``/`` (no hostPath needed on device nodes)."""

    def same(n: Any) -> Any:
        return n.replace(host_path=n.path)

    return host.replace(
        control_nodes=tuple(same(n) for n in host.control_nodes),
        gpu_nodes={k: same(v) for k, v in host.gpu_nodes.items()},
        modeset=None,
        dri={},
        gpus=tuple(g.replace(mig_devices=()) for g in host.gpus),
    )


@pytest.mark.parametrize(
    ("strategies", "names", "version"),
    [
        (("uuid",), "GPU-", "0.3.0"),
        (("type-index",), "gpu", "0.3.0"),
        (("index",), "", "0.5.0"),  # a device name starting with a digit needs 0.5.0
    ],
)
def test_minimum_version(host: NvidiaHost, strategies: Any, names: str, version: str) -> None:
    spec = generate_spec(_at_root(host), name_strategies=strategies)
    assert spec.version == version == minimum_version(spec)
    assert all(d.name.startswith(names) for d in spec.devices[:-1])
    # hostPath (a dev root other than /) needs 0.5.0 whatever the names
    assert generate_spec(host, name_strategies=strategies).version == "0.5.0"


def test_type_index_names_mig(host: NvidiaHost) -> None:
    spec = generate_spec(host, name_strategies=("type-index",))
    names = [d.name for d in spec.devices]
    g = next(g for g in host.gpus if g.mig_devices)
    assert f"gpu{g.index}" in names and f"mig{g.index}:0" in names and names[-1] == "all"


def test_errors(host: NvidiaHost) -> None:
    with pytest.raises(CdiError, match="unknown device name strategy"):
        generate_spec(host, name_strategies=("serial",))
    with pytest.raises(CdiError):
        generate_spec(host, vendor="-bad")
    with pytest.raises(DiscoveryError, match="no NVIDIA GPU"):
        generate_spec(host.replace(gpus=()))


def test_formats_round_trip(spec: Spec) -> None:
    for fmt in ("json", "yaml"):
        data = spec_bytes(spec, fmt)
        assert load_spec(data, path=f"nvidia.{fmt}") == spec
    assert yaml.safe_load(spec_bytes(spec, "yaml")) == json.loads(spec_bytes(spec, "json"))
    with pytest.raises(ValueError):
        spec_bytes(spec, "toml")


def test_injection_of_generated_spec(host: NvidiaHost, spec: Spec, tmp_path: Path) -> None:
    """What a runtime gets for nvidia.com/gpu=1 from the generated spec: the common edits
    and GPU 1's, nothing of the others."""
    (tmp_path / "nvidia.json").write_bytes(spec_bytes(spec, "json"))
    registry = Registry.load([str(tmp_path)])
    assert not registry.errors
    doc = inject_devices({"process": {"env": ["A=1"]}}, registry, ["nvidia.com/gpu=1"])
    g = host.gpus[1]
    paths = [d["path"] for d in doc["linux"]["devices"]]
    assert f"/dev/nvidia{g.minor}" in paths
    assert not [p for p in paths if p.startswith("/dev/nvidia") and p[11:].isdigit()][1:]
    assert doc["process"]["env"] == ["A=1", "NVIDIA_VISIBLE_DEVICES=void"]
    # the common hook (libraries, links, mask), then the GPU's /dev/dri/by-path links
    hooks = doc["hooks"]["createContainer"]
    assert [h["args"][5:7] for h in hooks] == [["hook", "cdi"]] * 2
    assert "--libs" in hooks[0]["args"] and "--libs" not in hooks[1]["args"]


def test_cli_generate_output_atomic(sim: Any, tmp_path: Path) -> None:
    out = tmp_path / "nvidia.yaml"
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    r = run_cli("cdi", "generate", *root, "--output", str(out), text=False)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes().startswith(b"---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\n")
    assert oct(out.stat().st_mode & 0o777) == "0o644"
    spec = load_spec(out.read_bytes(), path=str(out))
    assert spec == generate_spec(discover(HostRoot.single(sim.root)))
    # JSON to stdout; the yaml file stays as it was
    before = out.read_bytes()
    r = run_cli(
        "cdi", "generate", *root, "--format", "json", "--device-name-strategy", "uuid", text=False
    )
    assert r.returncode == 0
    data = json.loads(r.stdout)
    assert data["cdiVersion"] == "0.5.0" and data["devices"][0]["name"].startswith("GPU-")
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["nvidia.yaml"]  # no temporary left
    # an unwritable destination (below a file): exit 11, nothing written
    r = run_cli("cdi", "generate", *root, "--output", str(out / "x.json"), text=False)
    assert r.returncode == 11 and b"cannot write the CDI spec" in r.stderr
    assert out.read_bytes() == before
    # a host without a driver: exit 6
    r = run_cli(
        "cdi", "generate", "--driver-root", str(tmp_path), "--dev-root", str(tmp_path), text=False
    )
    assert r.returncode == 6, r.stderr
    # the file validates with the validate command
    r = run_cli("cdi", "validate", str(out), text=False)
    assert r.returncode == 0 and b"minimum 0.5.0" in r.stdout


def test_cli_transform_root(sim: Any, tmp_path: Path) -> None:
    src = tmp_path / "in.json"
    r = run_cli(
        "cdi",
        "generate",
        "--driver-root",
        sim.root,
        "--dev-root",
        sim.root,
        "--output",
        str(src),
        text=False,
    )
    assert r.returncode == 0
    out = tmp_path / "out.json"
    r = run_cli(
        "cdi",
        "transform",
        "root",
        "--from",
        sim.root,
        "--to",
        "/",
        "--input",
        str(src),
        "--output",
        str(out),
        text=False,
    )
    assert r.returncode == 0, r.stderr
    spec = load_spec(out.read_bytes(), path=str(out))
    hosts = [m.source for m in spec.container_edits.mounts]
    assert hosts == [m.destination for m in spec.container_edits.mounts]
    assert all(not n.host_path for d in spec.devices for n in d.container_edits.device_nodes)
    hook = spec.container_edits.hooks[0]
    assert hook.args[list(hook.args).index("--mask-proc") + 1] == "/proc/driver/nvidia"
    assert spec.version == "0.5.0"  # kept: index names still need it
    # from stdin, relative paths refused with exit 11
    r = run_cli(
        "cdi", "transform", "root", "--from", "x", "--to", "/", stdin=src.read_bytes(), text=False
    )
    assert r.returncode == 11 and b"--from" in r.stderr


ROOTS = st.sampled_from(["/", "/run/nvidia/driver", "/host", "/a/b"])
PATHS = st.lists(
    st.sampled_from(["usr", "lib", "dev", "nvidia0", "run", "nvidia", "driver", "a", "b", "host"]),
    min_size=1,
    max_size=5,
).map(lambda parts: "/" + "/".join(parts))


@given(old=ROOTS, new=ROOTS, path=PATHS)
def test_transform_round_trip(old: str, new: str, path: str) -> None:
    """Moving a spec's host paths from one root to another and back gives the spec back
    (its paths were all under the first root)."""
    host_path = path if old == "/" else old + path
    from ocihook.cdi.spec import ContainerEdits, Device, Mount

    spec = Spec(
        "0.3.0",
        "nvidia.com/gpu",
        (Device("gpu0", ContainerEdits(mounts=(Mount(host_path, path, (), ""),))),),
    )
    there = transform_root(spec, old, new)
    moved = there.devices[0].container_edits.mounts[0].source
    assert moved == (path if new == "/" else new + path)
    assert transform_root(there, new, old) == spec


def test_transform_moves_the_hook_program_directory() -> None:
    """Host paths moved: the interpreter and the directory ocihook's program imports from
    move together (``--mask-proc`` too); container paths moved: neither does."""
    from ocihook.cdi.spec import ContainerEdits, Device, DeviceNode, Hook

    def spec_of(prefix: str) -> Spec:
        program = hook_program([prefix + "/usr/lib/python3/dist-packages"])
        args = (f"{prefix}/usr/bin/python3", "-I", "-S", "-c", program, "hook", "cdi")
        args += ("--mask-proc", f"{prefix}/proc/driver/nvidia")
        hook = Hook("createContainer", f"{prefix}/usr/bin/python3", args)
        dev = Device("gpu0", ContainerEdits(device_nodes=(DeviceNode("/dev/nvidia0"),)))
        return Spec("0.5.0", "nvidia.com/gpu", (dev,), ContainerEdits(hooks=(hook,)))

    moved = transform_root(spec_of("/host"), "/host", "/")
    (hook,) = moved.container_edits.hooks
    want = spec_of("").container_edits.hooks[0]
    assert hook.path == want.path and hook.args[1:] == want.args[1:]
    assert transform_root(spec_of("/host"), "/host", "/", relative_to="container") == spec_of(
        "/host"
    )


def test_transform_whole_components() -> None:
    from ocihook.cdi.spec import ContainerEdits, Device, Mount

    m = Mount("/run/nvidia/driverX/lib", "/lib", (), "")
    spec = Spec("0.3.0", "nvidia.com/gpu", (Device("gpu0", ContainerEdits(mounts=(m,))),))
    assert transform_root(spec, "/run/nvidia/driver", "/") == spec
    assert (
        transform_root(spec, "/lib", "/usr/lib", relative_to="container")
        .devices[0]
        .container_edits.mounts[0]
        .destination
        == "/usr/lib"
    )


def test_a_path_the_hook_cannot_be_given_is_refused(host: NvidiaHost, spec: Spec) -> None:
    """``::`` separates the fields of the hook's ``--lib PATH::FLAGS`` and ``--link
    TARGET::LINK``: a library path with it, or a ``transform root`` to such a directory,
    is an error when the spec is made, not at every container start (where the hook
    would refuse the spec's arguments)."""
    lib = host.libraries[0]
    odd = lib.replace(path="/opt/nv::535/" + lib.path.rsplit("/", 1)[1])
    with pytest.raises(CdiError, match="cannot contain '::'") as info:
        generate_spec(host.replace(libraries=(odd, *host.libraries[1:])))
    assert info.value.path == odd.path
    with pytest.raises(CdiError, match="cannot contain '::'") as info:
        transform_root(spec, "/usr/lib", "/opt/nv::535", relative_to="container")
    assert info.value.field == "--to"
    # host paths carry no hook field: a host directory with '::' is not refused there
    assert transform_root(spec, "/usr/lib", "/opt/nv::535", relative_to="host").devices


def test_gpu_dirs_of_devices(sim: Any, host: NvidiaHost) -> None:
    """The hook shows the /proc/driver/nvidia/gpus entries of exactly the GPUs whose nodes
    config.json lists; junk in linux.devices is ignored."""
    proc = host.root.proc("driver/nvidia")
    g0, g3 = host.gpus[0], host.gpus[3]
    config = {
        "linux": {
            "devices": [
                {"path": f"/dev/nvidia{g3.minor}", "type": "c"},
                {"path": "/dev/nvidiactl", "type": "c"},
                {"path": f"/dev/nvidia{g0.minor}", "type": "c"},
                {"path": "/dev/nvidia99"},
                {"path": "/dev/nvidia1", "type": "b"},
                "junk",
                {"path": 5},
            ]
        }
    }
    got = gpu_dirs_of_devices(proc, config)
    assert got == tuple(sorted(os.path.basename(g.proc_dir) for g in (g0, g3)))
    assert gpu_dirs_of_devices(proc, {}) == ()
    assert gpu_dirs_of_devices(str(Path(proc) / "missing"), config) == ()


def test_capability_files_by_device_minor(tmp_path: Path) -> None:
    """The MIG capability files whose DeviceFileMinor is one of the container's
    nvidia-caps nodes; links are not followed, junk is skipped."""
    from ocihook.appliers.live import capability_files, caps_minors
    from ocihook.appliers.live.procmask import read_proc_files

    proc = tmp_path / "nvidia"
    gi = proc / "capabilities/gpu0/mig/gi1"
    (gi / "ci0").mkdir(parents=True)
    (gi / "access").write_text("DeviceFileMinor: 12\nDeviceFileMode: 292\n")
    (gi / "ci0/access").write_text("DeviceFileMinor: 13\n")
    (proc / "capabilities/mig").mkdir()
    (proc / "capabilities/mig/config").write_text("DeviceFileMinor: 1\n")
    (proc / "capabilities/mig/junk").write_text("DeviceFileMinor: x\n" + "y" * 70000)
    secret = tmp_path / "secret"
    secret.write_text("DeviceFileMinor: 13\n")
    (proc / "capabilities/link").symlink_to(secret)
    (proc / "params").write_text("ModifyDeviceFiles: 1\n")
    got = capability_files(str(proc), {12, 13})
    assert got == {
        "capabilities/gpu0/mig/gi1/access": b"DeviceFileMinor: 12\nDeviceFileMode: 292\n",
        "capabilities/gpu0/mig/gi1/ci0/access": b"DeviceFileMinor: 13\n",
    }
    assert capability_files(str(proc), set()) == {}
    assert list(capability_files(str(proc), {1})) == ["capabilities/mig/config"]
    files = read_proc_files(str(proc), {1})
    assert files == {
        "params": b"ModifyDeviceFiles: 0\n",
        "capabilities/mig/config": b"DeviceFileMinor: 1\n",
    }
    pairs: list[tuple[object, object]] = [
        ("/dev/nvidia-caps/nvidia-cap12", None),
        ("/dev/nvidia-caps/nvidia-cap99", 13),
        ("/dev/nvidia-caps/nvidia-cap" + "9" * 50, None),
        ("/dev/nvidia0", 0),
        (None, 5),
        ("/dev/nvidia-caps/nvidia-capX", None),
    ]
    assert caps_minors(pairs) == {12, 13}


# --- malformed and hostile input to the CDI generator and loader ----------------------------------


def _generate(sim: Any, *args: str) -> subprocess.CompletedProcess[str]:
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    return run_cli("cdi", "generate", *root, *args)


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if not ln.startswith("ocihook: warning:")]


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--format", "xml"), ("--device-name-strategy", "serial"), ("--gpu-backend", "cuda")],
)
def test_generate_bad_choice_is_usage_error(sim: Any, flag: str, value: str) -> None:
    """A value outside an option's choices is bad command-line usage: exit 2
    (docs/reference/exit-codes.md), not 11 ("a CDI spec file ... is malformed"): the fast parser checks choices
    as click does."""
    r = _generate(sim, flag, value)
    assert r.returncode == 2, r.stderr
    assert flag in r.stderr


@pytest.mark.parametrize(("flag", "value"), [("--class", "_bad"), ("--vendor", "")])
def test_generate_bad_kind_names_the_flag(sim: Any, flag: str, value: str) -> None:
    """A malformed --class / --vendor is reported without saying which flag was wrong
    ("invalid class: must start with ... (value '_bad')")."""
    r = _generate(sim, flag, value)
    assert r.returncode != 0
    errors = _errors(r.stderr)
    assert len(errors) == 1 and flag in errors[0], r.stderr


def test_generate_empty_output_names_the_flag(sim: Any, tmp_path: Path) -> None:
    """``--output=`` (an empty path) reports "cannot write the CDI spec: No such file or
    directory (file )" -- neither the flag nor a file -- after making and removing a
    temporary file in the *parent* of the working directory (abspath('') is the cwd)."""
    work = tmp_path / "cwd"
    work.mkdir()
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    r = run_cli("cdi", "generate", *root, "--output=", cwd=work)
    assert r.returncode == 11  # CdiError: the value of --output is not a file name
    errors = _errors(r.stderr)
    assert len(errors) == 1 and "--output" in errors[0], r.stderr


def test_generate_option_missing_its_value_is_usage_error(sim: Any, tmp_path: Path) -> None:
    """``--output --verbose``: argparse says "argument --output: expected one argument"
    (exit 2), but the table-driven fast parser takes the next option as the value and
    writes the spec to a file named ``--verbose`` in the working directory, exit 0."""
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    r = run_cli("cdi", "generate", *root, "--output", "--verbose", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "--output" in r.stderr
    assert os.listdir(tmp_path) == []


def test_transform_from_slash_leaves_non_path_sources() -> None:
    """``--from / --to /host`` prefixes every host path, also a mount's hostPath that is
    not a path at all (a tmpfs source "tmpfs" becomes "/hosttmpfs"): _swap_prefix with
    old == "/" takes any string, absolute or not, and glues ``new`` to it."""
    tmpfs = Mount("tmpfs", "/dev/shm", ("nosuid", "size=64m"), "tmpfs")
    lib = Mount("/usr/lib/libcuda.so.1", "/usr/lib/libcuda.so.1", ("ro", "bind"))
    spec = Spec("0.4.0", "nvidia.com/gpu", (Device("gpu0", ContainerEdits(mounts=(tmpfs, lib))),))
    out = transform_root(spec, "/", "/host").devices[0].container_edits.mounts
    assert out[1].source == "/host/usr/lib/libcuda.so.1"
    assert out[0].source == "tmpfs"


def test_gpu_dirs_of_devices_never_raises_on_a_huge_minor(host: NvidiaHost) -> None:
    """The docstring promises malformed linux.devices items are skipped, never raised; a
    device path ``/dev/nvidia`` + 5000 digits (``podman --device /dev/null:/dev/nvidia1...``
    puts any path there) makes ``int()`` raise ValueError, and the createContainer hook
    exits 1 with a traceback."""
    proc = host.root.proc("driver/nvidia")
    g0 = host.gpus[0]
    config = {
        "linux": {
            "devices": [
                {"path": "/dev/nvidia" + "1" * 5000, "type": "c", "major": 1, "minor": 3},
                {"path": f"/dev/nvidia{g0.minor}", "type": "c", "major": 195, "minor": g0.minor},
            ]
        }
    }
    assert gpu_dirs_of_devices(proc, config) == (os.path.basename(g0.proc_dir),)


def test_gpu_dirs_of_devices_matches_the_node_number_not_its_name(host: NvidiaHost) -> None:
    """A container may get a GPU's node under another name (CDI ``path`` vs ``hostPath``,
    ``--device /dev/nvidia3:/dev/nvidia0``): linux.devices then says path /dev/nvidia0,
    major 195, minor 3. The node is GPU 3's, so GPU 3's gpus/ entry is the one to show;
    the name-based match shows GPU 0's (another GPU's UUID and bus id) and hides GPU 3's."""
    proc = host.root.proc("driver/nvidia")
    g0, g3 = host.gpus[0], host.gpus[3]
    assert g0.minor != g3.minor
    config = {
        "linux": {
            "devices": [
                {"path": f"/dev/nvidia{g0.minor}", "type": "c", "major": 195, "minor": g3.minor}
            ]
        }
    }
    assert gpu_dirs_of_devices(proc, config) == (os.path.basename(g3.proc_dir),)


# --- the masked /proc/driver/nvidia holds every capability file read ------------------------------


MASK_SCRIPT = """
import json, os, sys
from ocihook.appliers.live.procmask import mask_proc_driver, read_proc_files
host, rootfs, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
files = read_proc_files(host, set(range(n)))
fd = os.open(rootfs, os.O_RDONLY | os.O_DIRECTORY)
try:
    done = mask_proc_driver(fd, files, {}, [])
    seen = sum(len(f) for _d, _s, f in os.walk(os.path.join(rootfs, "proc/driver/nvidia")))
    print(json.dumps({"ok": done, "files": len(files), "seen": seen}))
except Exception as e:
    print(json.dumps({"ok": False, "files": len(files), "error": str(e)}))
"""


def test_mask_holds_every_capability_file_read(tmp_path: Path) -> None:
    """``capability_files`` reads up to 4096 entries, but the mask is a ``size=1m`` tmpfs:
    each file takes a page, so about 250 capability files fill it and the whole mask fails
    with ENOSPC (the container does not start). 300 matching files here (a host with many
    MIG instances, or a config.json listing many nvidia-caps nodes): read, then lost.
    (A real 8-GPU host has at most ~114; severity low, but the two limits disagree.)"""
    need_root_and("unshare")
    host = tmp_path / "host"
    n = 300
    for i in range(n):
        d = host / f"capabilities/gpu{i // 14}/mig/gi{i % 14}"
        d.mkdir(parents=True)
        (d / "access").write_text(f"DeviceFileMinor: {i}\nDeviceFileMode: 292\n")
    (host / "params").write_text("ModifyDeviceFiles: 1\n")
    rootfs = tmp_path / "rootfs"
    (rootfs / "proc/driver/nvidia").mkdir(parents=True)
    script = tmp_path / "mask.py"
    script.write_text(MASK_SCRIPT)
    unshare = ["unshare", "-m", "--propagation", "private"]
    proc = subprocess.run(
        [*unshare, sys.executable, "-I", str(script), str(host), str(rootfs), str(n)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["files"] == n + 1
    assert got["ok"] is True, got
    assert got["seen"] == n + 1


def test_generate_discovers_afresh_after_a_warm_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``cdi generate`` is the refresh: it never answers from the discovery cache, so an
    MPS daemon started after the boot unit is in the next spec (and ``--warm-cache``
    replaces the start path's entries)."""
    from ocihook._main import main
    from ocihook.discovery.nvidia import discover_cached
    from ocihook.linux import cachestore
    from ocihook.sim import host as simhost

    monkeypatch.setattr(cachestore, "DEFAULT_DIR", str(tmp_path / "cache"))
    sim = simhost.build(str(tmp_path / "root"), make_dev_nodes=False)
    root = HostRoot(driver_root=sim.root, dev_root=sim.root)
    discover_cached(root, warm=True)  # the entry a cache-reading generate would use
    for entry in Path(tmp_path / "cache").glob("discovery-*.entry"):
        # a change no key sees (the driver version, the host record's second field)
        form, key_text, dirs, (tag, name, fields) = marshal.loads(entry.read_bytes())
        fields = (fields[0], "1.2.3", *fields[2:])
        entry.write_bytes(marshal.dumps((form, key_text, dirs, (tag, name, fields))))
        entry.chmod(0o600)
    assert discover_cached(root).driver_version == "1.2.3"  # the start path would see it
    Path(sim.root, "tmp/nvidia-mps").mkdir(parents=True)  # an MPS daemon started since
    argv = ["cdi", "generate", "--driver-root", sim.root, "--dev-root", sim.root]
    assert main([*argv, "--gpu-backend", "procfs", "--format", "json"]) == 0
    out = capsys.readouterr().out
    assert "1.2.3" not in out and f"::{sim.driver_version}" in out
    paths = [m["containerPath"] for m in json.loads(out)["containerEdits"]["mounts"]]
    assert "/tmp/nvidia-mps" in paths


# -- the hook-free spec ----------------------------------------------------------------------


def test_hook_free_spec(sim: Any, tmp_path: Path) -> None:
    """``--hook-free``: no hook anywhere; each 64-bit library mounted as its real file at
    /usr/lib/<soname> and /usr/lib64/<soname> (read-only, nosuid, nodev), no 32-bit
    library; the other files (binaries, sockets, firmware) as in the default spec."""
    from ocihook.discovery.nvidia import discover

    host = discover(HostRoot.single(sim.root))
    out = tmp_path / "free.json"
    r = run_cli(
        "cdi",
        "generate",
        "--driver-root",
        sim.root,
        "--dev-root",
        sim.root,
        "--hook-free",
        "--output",
        str(out),
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    edits = [doc["containerEdits"], *(d["containerEdits"] for d in doc["devices"])]
    assert not [h for e in edits for h in e.get("hooks", [])]
    libs = [lib for lib in host.libraries if lib.elf_class == 64]
    want = {
        (lib.host_path, f"{d}/{lib.soname}") for lib in libs for d in ("/usr/lib", "/usr/lib64")
    }
    got = {(m["hostPath"], m["containerPath"]) for m in doc["containerEdits"]["mounts"]}
    assert want <= got
    assert all(
        m["options"] == ["ro", "nosuid", "nodev", "bind"]
        for m in doc["containerEdits"]["mounts"]
        if m["containerPath"].startswith(("/usr/lib/", "/usr/lib64/"))
    )
    assert not {lib.path for lib in host.libraries if lib.elf_class == 32} & {c for _, c in got}
    files = {(f.host_path, f.path) for f in host.files}
    assert files <= got
    # and the directories are the caller's to choose
    r = run_cli(
        "cdi",
        "generate",
        "--driver-root",
        sim.root,
        "--dev-root",
        sim.root,
        "--hook-free-dir",
        "/usr/local/nvidia/lib64",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    mounts = json.loads(r.stdout)["containerEdits"]["mounts"]
    assert {m["containerPath"] for m in mounts} >= {
        f"/usr/local/nvidia/lib64/{lib.soname}" for lib in libs
    }
    bad = run_cli(
        "cdi",
        "generate",
        "--driver-root",
        sim.root,
        "--dev-root",
        sim.root,
        "--hook-free-dir",
        "relative/dir",
    )
    assert bad.returncode == 11 and "not an absolute directory" in bad.stderr


def test_warm_cache_stores_the_configuration_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--warm-cache`` (the boot unit) also stores the configuration file's parse, so the
    first container start after boot reads it from the store: a fresh interpreter loading
    the same file then never imports tomllib."""
    if os.geteuid() != 0:
        pytest.skip("--warm-cache caches only as root (the store is root's)")
    from ocihook._main import main
    from ocihook.linux import cachestore
    from ocihook.sim import host as simhost

    cache = tmp_path / "cache"
    monkeypatch.setattr(cachestore, "DEFAULT_DIR", str(cache))
    sim = simhost.build(str(tmp_path / "root"), make_dev_nodes=False)
    config = tmp_path / "config.toml"
    config.write_text(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\nlog-level = "debug"\n')
    argv = ["cdi", "generate", "--config", str(config), "--warm-cache", "--format", "json"]
    assert main([*argv, "--gpu-backend", "procfs"]) == 0
    capsys.readouterr()
    assert len(list(cache.glob("config-*.entry"))) == 1
    assert len(list(cache.glob("modules-*.img"))) == 1  # the start path's module image
    code = (  # tomllib imported: the audit hook's import events (a parse drops it again)
        "import sys\n"
        "imported = []\n"
        "sys.addaudithook(lambda e, a: imported.append(a[0]) if e == 'import' else None)\n"
        "from ocihook.linux import cachestore\n"
        f"cachestore.DEFAULT_DIR = {str(cache)!r}\n"
        "from ocihook.config.load import load_config\n"
        f"cfg = load_config({str(config)!r})\n"
        "print(cfg.log_level, cfg.driver_root, 'tomllib' in imported)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["debug", sim.root, "False"]
    config.write_text(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')  # changed
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["info", sim.root, "True"]  # parsed afresh, never stale
