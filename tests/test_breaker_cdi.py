"""Adversarial review of the CDI generator, the YAML loader, the fast ``cdi generate``
command line, ``cdi transform root``, the hook's ``--proc-gpus-from-devices`` and CDI
injection's copy of config.json. Each test shows one defect: it fails until the defect is
fixed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ocihook.appliers.live import gpu_dirs_of_devices
from ocihook.cdi.generate import transform_root
from ocihook.cdi.names import CdiError
from ocihook.cdi.registry import Registry
from ocihook.cdi.spec import ContainerEdits, Device, Mount, Spec, load_spec
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import NvidiaHost, discover

GOOD_YAML = """\
cdiVersion: 0.3.0
kind: example.com/gpu
devices:
- name: gpu0
  containerEdits:
    env: [A=1]
"""


@pytest.fixture(scope="module")
def host(sim: Any) -> NvidiaHost:
    return discover(HostRoot.single(sim.root))


def _generate(sim: Any, *args: str) -> subprocess.CompletedProcess[str]:
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    return subprocess.run(
        [sys.executable, "-m", "ocihook", "cdi", "generate", *root, *args],
        capture_output=True,
        text=True,
        check=False,
    )


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if not ln.startswith("ocihook: warning:")]


# -- load_spec: an out-of-range integer too long to print -------------------------------


def test_load_spec_huge_yaml_integer_is_a_cdi_error() -> None:
    """YAML reads ``0x`` + 5000 hex digits as one int; the out-of-range error then puts the
    value in its message, and ``repr`` of an int of more than 4300 decimal digits raises
    ValueError (CPython's int_max_str_digits). load_spec must raise CdiError only."""
    text = GOOD_YAML.replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/x, major: 0x" + "f" * 5000 + "}]"
    )
    with pytest.raises(CdiError, match="out of range"):
        load_spec(text, path="big.yaml")


def test_registry_survives_a_spec_with_a_huge_integer(tmp_path: Path) -> None:
    """One broken file in a spec dir goes to Registry.errors; the other specs still load
    (CDI pkg/cdi/cache.go). A huge integer made Registry.load raise ValueError instead, so
    every CDI request on the host failed with a traceback."""
    (tmp_path / "a-good.yaml").write_text(GOOD_YAML)
    bad = GOOD_YAML.replace("example.com/gpu", "other.com/gpu").replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/x, minor: 0b" + "1" * 20000 + "}]"
    )
    (tmp_path / "b-bad.yaml").write_text(bad)
    registry = Registry.load([str(tmp_path)])
    assert registry.list_devices() == ["example.com/gpu=gpu0"]
    assert list(registry.errors) == [str(tmp_path / "b-bad.yaml")]


# -- cdi generate: the fast command line ------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--format", "xml"), ("--device-name-strategy", "serial"), ("--gpu-backend", "cuda")],
)
def test_generate_bad_choice_is_usage_error(sim: Any, flag: str, value: str) -> None:
    """A value outside an option's choices is bad command-line usage: exit 2 (README "Exit
    codes"), as the click command gave before cdi generate became a fast command; the
    fast command now exits 11 ("a CDI spec file ... is malformed")."""
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
    r = subprocess.run(
        [sys.executable, "-m", "ocihook", "cdi", "generate", *root, "--output="],
        capture_output=True,
        text=True,
        check=False,
        cwd=work,
    )
    assert r.returncode in (2, 11)
    errors = _errors(r.stderr)
    assert len(errors) == 1 and "--output" in errors[0], r.stderr


# -- cdi transform root -----------------------------------------------------------------


def test_transform_from_slash_leaves_non_path_sources() -> None:
    """``--from / --to /host`` prefixes every host path, also a mount's hostPath that is
    not a path at all (a tmpfs source "tmpfs" becomes "/hosttmpfs"): _swap_prefix with
    old == "/" takes any string, absolute or not, and glues ``new`` to it."""
    tmpfs = Mount("tmpfs", "/dev/shm", ("nosuid", "size=64m"), "tmpfs")
    lib = Mount("/usr/lib/libcuda.so.1", "/usr/lib/libcuda.so.1", ("ro", "bind"))
    spec = Spec("0.4.0", "nvidia.com/gpu", (Device("gpu0", ContainerEdits(mounts=(tmpfs, lib))),))
    out = transform_root(spec, "/", "/host").devices[0].container_edits.mounts
    assert out[1].host_path == "/host/usr/lib/libcuda.so.1"
    assert out[0].host_path == "tmpfs"


# -- hook create-container --proc-gpus-from-devices -------------------------------------


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


# -- CDI injection's copy of config.json ------------------------------------------------


def test_cdi_edit_of_deeply_nested_config_is_no_traceback(tmp_path: Path) -> None:
    """A config.json that json.loads accepts (an unknown field nested 600 deep) goes
    through spec mode's host-discovery path fine, but a CDI request copies the document
    with the recursive _copy_json (two frames a level with the list comprehension) and
    dies with RecursionError: exit 1 and a traceback instead of a result or exit 3."""
    from ocihook.sim.demo import default_config

    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "gpu.yaml").write_text(
        GOOD_YAML.replace("example.com", "nvidia.com")
        .replace("name: gpu0", "name: '0'")
        .replace("0.3.0", "0.5.0")
    )
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    doc = default_config(["sh"], ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"])
    depth = 600
    text = json.dumps(doc)[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    (bundle / "config.json").write_text(text)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'cdi-spec-dirs = ["{spec_dir}"]\n')
    r = subprocess.run(
        [sys.executable, "-m", "ocihook", "edit", "--config", str(cfg), "-b", str(bundle)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert "Traceback" not in r.stderr, r.stderr[-600:]
    assert r.returncode in (0, 3), r.stderr
    if r.returncode == 0:
        out = json.loads((bundle / "config.json").read_text())
        assert "A=1" in out["process"]["env"]
    else:
        assert (bundle / "config.json").read_text() == text


def test_generate_option_missing_its_value_is_usage_error(sim: Any, tmp_path: Path) -> None:
    """``--output --verbose``: argparse says "argument --output: expected one argument"
    (exit 2), but the table-driven fast parser takes the next option as the value and
    writes the spec to a file named ``--verbose`` in the working directory, exit 0."""
    root = ["--driver-root", sim.root, "--dev-root", sim.root]
    r = subprocess.run(
        [sys.executable, "-m", "ocihook", "cdi", "generate", *root, "--output", "--verbose"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr
    assert "--output" in r.stderr
    assert os.listdir(tmp_path) == []


def test_unquoted_mig_style_name_reads_as_the_reference_does() -> None:
    """``name: 1:0`` unquoted (a MIG device by index, written by hand) is the string "1:0"
    for the reference parser (sigs.k8s.io/yaml on go-yaml, which leaves YAML 1.1 base-60
    numbers out on purpose: go-yaml resolve.go), so podman and containerd accept the
    spec. PyYAML's YAML 1.1 resolver makes it the integer 60, and load_spec rejects the
    whole file ("expected a string, found int"), dropping every device in it."""
    text = GOOD_YAML.replace("0.3.0", "0.5.0").replace("name: gpu0", "name: 1:0")
    spec = load_spec(text, path="mig.yaml")
    assert [d.name for d in spec.devices] == ["1:0"]
