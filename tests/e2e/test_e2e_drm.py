"""End to end with real runc: AMD (ROCm) and Intel GPUs, spec mode and hook mode.

The container's own view is the oracle: the DRM nodes and ``/dev/kfd`` it has (exactly the
requested GPUs'), ENXIO (allowed by the cgroup, no driver on this machine) on them, EPERM
(denied by the cgroup) on a render node it did not ask for and made itself with mknod,
its supplementary groups, and Intel's ``/dev/dri/by-path`` links.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
from support import (
    PRIVATE_RUN,
    Podman,
    edit_cli,
    edit_with_cdi,
    need_root_and,
    register_hook,
    register_stage_hook,
    run_runtime,
    stage_hook,
)

from ocihook.sim import vendors as simvendors
from ocihook.sim.demo import run_container

SCRIPT = r"""
for n in /dev/kfd /dev/dri/* /dev/nvidia*; do
  [ -c "$n" ] && echo "NODE $n $(stat -c '%t:%T %g %a' $n)"
done
for n in /dev/dri/by-path/*; do [ -L "$n" ] && echo "LINK $n $(readlink $n)"; done
for n in $OPEN; do echo "OPEN $n $(cat $n 2>&1 | head -n 1)"; done
echo "GROUPS $(id -G)"
if [ -n "$OTHER" ]; then
  busybox mknod /tmp/other c 226 $OTHER && echo "OTHER $(cat /tmp/other 2>&1 | head -n 1)"
fi
"""


def _lines(out: str, tag: str) -> list[str]:
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


def _edit_config(bundle: str, change: Callable[[dict[str, Any]], None]) -> None:
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    change(doc)
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


def _with_mknod(doc: dict[str, Any]) -> None:
    for key in ("bounding", "effective", "permitted"):
        doc["process"]["capabilities"][key].append("CAP_MKNOD")


def _nodes(out: str) -> dict[str, str]:
    """``{path: "major:minor gid mode"}`` with decimal numbers, from the NODE lines."""
    nodes = {}
    for line in _lines(out, "NODE"):
        path, numbers, gid, mode = line.split()
        major, minor = (int(x, 16) for x in numbers.split(":"))
        nodes[path] = f"{major}:{minor} {gid} {mode}"
    return nodes


def _run(bundle: str, tmp_path: Any) -> str:
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def _apply(mode: str, bundle: str, root: str) -> None:
    if mode == "spec":
        proc = edit_cli(bundle, root)
        assert proc.returncode == 0, proc.stderr
    else:
        register_hook(bundle, root)


@pytest.fixture(scope="module")
def amd_host(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_amd(str(tmp_path_factory.mktemp("amd")))


@pytest.fixture(scope="module")
def intel_host(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_intel(str(tmp_path_factory.mktemp("intel")))


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_amd_gpus_by_uuid_and_range(
    mode: str,
    amd_host: simvendors.SimDrmHost,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
) -> None:
    need_root_and("runc")
    if not amd_host.dev_nodes:
        pytest.skip("the AMD host was built without /dev nodes")
    gpus = amd_host.amd
    # GPU 1 by UUID and both partitions of the split GPU (indices 3-4) by a range
    wanted = [gpus[1], gpus[3], gpus[4]]
    other = gpus[2]  # renderD129: between the wanted minors, never asked for
    env = [
        f"AMD_VISIBLE_DEVICES={gpus[1].uuid},3-4",
        f"OPEN=/dev/kfd /dev/dri/renderD{gpus[1].render}",
        f"OTHER={other.render}",
    ]
    bundle = bundle_factory(["sh", "-c", SCRIPT], env)
    _edit_config(bundle, _with_mknod)
    _apply(mode, bundle, amd_host.root)
    out = _run(bundle, tmp_path)
    render, card, kfd = simvendors.RENDER_GID, simvendors.CARD_GID, simvendors.KFD_MAJOR
    want = {"/dev/kfd": f"{kfd}:0 {render} 660"}
    for g in wanted:
        want[f"/dev/dri/card{g.card}"] = f"226:{g.card} {card} 660"
        want[f"/dev/dri/renderD{g.render}"] = f"226:{g.render} {render} 660"
    assert _nodes(out) == want, out
    assert _lines(out, "OPEN") == [
        "/dev/kfd cat: can't open '/dev/kfd': No such device or address",
        f"/dev/dri/renderD{gpus[1].render} cat: can't open "
        f"'/dev/dri/renderD{gpus[1].render}': No such device or address",
    ]
    assert _lines(out, "OTHER") == ["cat: can't open '/tmp/other': Operation not permitted"]
    with open(os.path.join(bundle, "config.json")) as f:
        doc = json.load(f)
    if mode == "spec":
        assert doc["process"]["user"]["additionalGids"] == sorted({card, render})
        assert "AMD_VISIBLE_DEVICES=void" in doc["process"]["env"]
        assert set(_lines(out, "GROUPS")[0].split()) == {"0", str(card), str(render)}


def test_amd_non_root_user_gets_the_node_groups(
    amd_host: simvendors.SimDrmHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """A uid-1000 process opens its render node (ENXIO: permitted, no driver) only
    through the render group spec mode adds to process.user.additionalGids."""
    need_root_and("runc")
    if not amd_host.dev_nodes:
        pytest.skip("the AMD host was built without /dev nodes")
    g = amd_host.amd[0]
    env = ["AMD_VISIBLE_DEVICES=0", f"OPEN=/dev/kfd /dev/dri/renderD{g.render}"]

    def as_user(doc: dict[str, Any]) -> None:
        doc["process"]["user"] = {"uid": 1000, "gid": 1000}

    results = {}
    for edited in (True, False):
        bundle = bundle_factory(["sh", "-c", SCRIPT], env)
        _edit_config(bundle, as_user)
        if edited:
            _apply("spec", bundle, amd_host.root)
        else:  # the same devices without the groups
            _apply("spec", bundle, amd_host.root)
            _edit_config(bundle, lambda doc: doc["process"]["user"].pop("additionalGids"))
        results[edited] = _run(bundle, tmp_path)
    groups = {str(simvendors.CARD_GID), str(simvendors.RENDER_GID)}
    assert set(_lines(results[True], "GROUPS")[0].split()) == {"1000", *groups}
    assert all("No such device or address" in x for x in _lines(results[True], "OPEN"))
    assert _lines(results[False], "GROUPS") == ["1000"]
    assert all("Permission denied" in x for x in _lines(results[False], "OPEN"))


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_intel_dgpu_by_pci_address(
    mode: str,
    intel_host: simvendors.SimDrmHost,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
) -> None:
    need_root_and("runc")
    if not intel_host.dev_nodes:
        pytest.skip("the Intel host was built without /dev nodes")
    igpu, dgpu = intel_host.intel
    env = [
        f"INTEL_VISIBLE_DEVICES={dgpu.bus_id}",
        f"OPEN=/dev/dri/renderD{dgpu.render}",
        f"OTHER={igpu.render}",
    ]
    bundle = bundle_factory(["sh", "-c", SCRIPT], env)
    _edit_config(bundle, _with_mknod)
    _apply(mode, bundle, intel_host.root)
    out = _run(bundle, tmp_path)
    assert _nodes(out) == {
        f"/dev/dri/card{dgpu.card}": f"226:{dgpu.card} {simvendors.CARD_GID} 660",
        f"/dev/dri/renderD{dgpu.render}": f"226:{dgpu.render} {simvendors.RENDER_GID} 660",
    }, out
    assert sorted(_lines(out, "LINK")) == [
        f"/dev/dri/by-path/pci-{dgpu.bus_id}-card ../card{dgpu.card}",
        f"/dev/dri/by-path/pci-{dgpu.bus_id}-render ../renderD{dgpu.render}",
    ]
    assert "No such device or address" in _lines(out, "OPEN")[0]
    assert _lines(out, "OTHER") == ["cat: can't open '/tmp/other': Operation not permitted"]


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_mixed_nvidia_and_amd(mode: str, bundle_factory: Callable[..., str], tmp_path: Any) -> None:
    """One container asks for an NVIDIA GPU and an AMD GPU: it gets both vendors'
    nodes and nothing of the other AMD GPU."""
    need_root_and("runc")
    host = simvendors.build_mixed(str(tmp_path / "mixed"))
    if not host.dev_nodes:
        pytest.skip("the mixed host was built without /dev nodes")
    amd0, amd1 = host.amd
    env = [
        "NVIDIA_VISIBLE_DEVICES=0",
        "AMD_VISIBLE_DEVICES=1",
        f"OPEN=/dev/kfd /dev/dri/renderD{amd1.render} /dev/nvidia0",
        f"OTHER={amd0.render}",
    ]
    bundle = bundle_factory(["sh", "-c", SCRIPT], env)
    _edit_config(bundle, _with_mknod)
    _apply(mode, bundle, host.root)
    out = _run(bundle, tmp_path)
    nodes = _nodes(out)
    assert sorted(nodes) == sorted(
        [
            "/dev/kfd",
            f"/dev/dri/card{amd1.card}",
            f"/dev/dri/renderD{amd1.render}",
            "/dev/nvidia0",
            "/dev/nvidiactl",
            "/dev/nvidia-uvm",
            "/dev/nvidia-uvm-tools",
        ]
    ), out
    assert all("No such device or address" in x for x in _lines(out, "OPEN")), out
    assert _lines(out, "OTHER") == ["cat: can't open '/tmp/other': Operation not permitted"]


# -- through a CDI spec that `ocihook cdi generate --vendor amd|intel` wrote ---------------


def _generate(vendor: str, root: str, spec_dir: Any) -> str:
    import subprocess
    import sys

    out = os.path.join(str(spec_dir), f"{vendor}.json")
    args = ["cdi", "generate", "--vendor", vendor, "--driver-root", root, "--dev-root", root]
    subprocess.run([sys.executable, "-m", "ocihook", *args, "--output", out], check=True)
    return out


def test_spec_mode_from_generated_intel_spec(
    intel_host: simvendors.SimDrmHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """INTEL_VISIBLE_DEVICES=intel.com/gpu=card1 resolved from the generated spec: the
    card's nodes and its by-path links (made by the spec's hook), nothing of the iGPU."""

    need_root_and("runc")
    if not intel_host.dev_nodes:
        pytest.skip("the Intel host was built without /dev nodes")
    igpu, dgpu = intel_host.intel
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    _generate("intel", intel_host.root, spec_dir)
    env = [f"INTEL_VISIBLE_DEVICES=intel.com/gpu=card{dgpu.card}", f"OTHER={igpu.render}"]
    bundle = bundle_factory(["sh", "-c", SCRIPT], env)
    _edit_config(bundle, _with_mknod)
    stderr = edit_with_cdi(bundle, spec_dir, tmp_path)
    assert f"intel.com/gpu=card{dgpu.card}" in stderr, stderr
    out = _run(bundle, tmp_path)
    assert _nodes(out) == {
        f"/dev/dri/card{dgpu.card}": f"226:{dgpu.card} {simvendors.CARD_GID} 660",
        f"/dev/dri/renderD{dgpu.render}": f"226:{dgpu.render} {simvendors.RENDER_GID} 660",
    }, out
    assert sorted(_lines(out, "LINK")) == [
        f"/dev/dri/by-path/pci-{dgpu.bus_id}-card ../card{dgpu.card}",
        f"/dev/dri/by-path/pci-{dgpu.bus_id}-render ../renderD{dgpu.render}",
    ]
    assert _lines(out, "OTHER") == ["cat: can't open '/tmp/other': Operation not permitted"]


def test_podman_device_from_generated_amd_spec(
    podman: Podman,
    amd_host: simvendors.SimDrmHost,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
) -> None:
    """Real podman 4 reads the generated amd.com/gpu spec (cdiVersion 0.5.0) and gives
    ``--device amd.com/gpu=2`` exactly /dev/kfd and that GPU's nodes."""
    import subprocess

    need_root_and("podman", "runc", "unshare")
    if not amd_host.dev_nodes:
        pytest.skip("the AMD host was built without /dev nodes")
    spec = _generate("amd", amd_host.root, tmp_path)
    gpu, other = amd_host.amd[2], amd_host.amd[0]
    rootfs = os.path.join(bundle_factory(["true"], []), "rootfs")
    cmd = [*podman.base, "run", "--rm", "--network=none", "--cgroup-parent", podman.cgroup_parent]
    cmd += ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
    cmd += ["--device", "amd.com/gpu=2", "--cap-add", "MKNOD"]
    cmd += ["--env", f"OTHER={other.render}", "--env", f"OPEN=/dev/dri/renderD{gpu.render}"]
    cmd += ["--rootfs", rootfs, "sh", "-c", SCRIPT]
    proc = subprocess.run(
        ["unshare", "--mount", "sh", "-c", PRIVATE_RUN, "sh", *cmd],
        env={**os.environ, "SPEC": spec},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert _nodes(out) == {
        "/dev/kfd": f"{simvendors.KFD_MAJOR}:0 {simvendors.RENDER_GID} 660",
        f"/dev/dri/card{gpu.card}": f"226:{gpu.card} {simvendors.CARD_GID} 660",
        f"/dev/dri/renderD{gpu.render}": f"226:{gpu.render} {simvendors.RENDER_GID} 660",
    }, out
    assert "No such device or address" in _lines(out, "OPEN")[0], out
    assert _lines(out, "OTHER") == ["cat: can't open '/tmp/other': Operation not permitted"]


@pytest.mark.parametrize("runtime", ["runc", "crun"])
@pytest.mark.parametrize("stage", ["prestart", "createRuntime", "createContainer"])
def test_amd_hook_every_stage(
    runtime: str,
    stage: str,
    amd_host: simvendors.SimDrmHost,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
) -> None:
    """The live hook on each stage of runc and crun gives AMD GPU 0 (and /dev/kfd) and
    its device cgroup denies GPU 1's render node."""
    need_root_and(runtime, "unshare")
    if not amd_host.dev_nodes:
        pytest.skip("the AMD host was built without /dev nodes")
    gpu, other = amd_host.amd[0], amd_host.amd[1]
    env = ["AMD_VISIBLE_DEVICES=0", f"OTHER={other.render}", "OPEN=/dev/kfd"]
    bundle = bundle_factory(["sh", "-c", SCRIPT], env)
    _edit_config(bundle, _with_mknod)
    register_stage_hook(bundle, stage, stage_hook(stage, amd_host.root))
    proc = run_runtime(runtime, bundle, str(tmp_path / "state"), f"amd-{runtime}-{stage}")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert sorted(_nodes(out)) == [
        f"/dev/dri/card{gpu.card}",
        f"/dev/dri/renderD{gpu.render}",
        "/dev/kfd",
    ], out
    assert "No such device or address" in _lines(out, "OPEN")[0], out
    assert _lines(out, "OTHER") == ["cat: can't open '/tmp/other': Operation not permitted"]
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()
