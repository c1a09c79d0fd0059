"""A MIG device's capability files in the container's masked ``/proc/driver/nvidia``: NVML in
the container reads ``capabilities/gpu<N>/mig/gi<G>/access`` and ``.../ci<C>/access`` to find
the ``/dev/nvidia-caps`` node to open (libnvidia-container mounts the same files). With real
runc on the simulated host, in spec mode, hook mode and from a generated CDI spec: the
container sees exactly its instance's two files (their ``DeviceFileMinor`` = its two capability
nodes), not the other instance's, nor ``mig/config`` / ``mig/monitor``.

The machine has no NVIDIA driver, so the container's procfs has no ``/proc/driver/nvidia``:
a prestart hook of the test's puts one there first (``support.fake_proc_hook``, as
``test_e2e_full.py`` does), standing in for the kernel driver."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import fake_proc_hook, need_root_and, packaged_hook

from ocihook.appliers.spec import edit_bundle
from ocihook.core.hostroot import HostRoot
from ocihook.sim.demo import run_container

SCRIPT = r"""
cd /proc/driver/nvidia && find capabilities -type f | sort | while read -r f; do
  echo "CAP $f $(grep DeviceFileMinor $f | tr -d ' ')"
done
for n in /dev/nvidia-caps/*; do echo "NODE $n"; done
echo DONE
"""


def _expected(sim: Any) -> tuple[set[str], set[str]]:
    """The capability files and nodes of MIG device 1:0 (GPU 1's first instance)."""
    from ocihook.discovery.nvidia import discover

    host = discover(HostRoot.single(sim.root))
    gpu = host.gpus[1]
    mig = gpu.mig_devices[0]
    proc = host.root.proc("driver/nvidia") + "/"
    files = set()
    for node, cap in ((mig.gi_node, mig.gi_cap_file), (mig.ci_node, mig.ci_cap_file)):
        assert cap.startswith(proc)
        files.add(f"{cap[len(proc) :]} DeviceFileMinor:{node.minor}")
    return files, {mig.gi_node.path, mig.ci_node.path}


def _run(bundle: str, tmp_path: Path) -> dict[str, set[str]]:
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    hooks = doc.setdefault("hooks", {})
    hooks["prestart"] = [fake_proc_hook(bundle, tmp_path), *hooks.get("prestart", [])]
    cfg.write_text(json.dumps(doc))
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    assert "DONE" in proc.stdout.splitlines(), proc.stdout
    view: dict[str, set[str]] = {"CAP": set(), "NODE": set()}
    for line in proc.stdout.splitlines():
        tag, _, rest = line.partition(" ")
        if tag in view:
            view[tag].add(rest)
    return view


@pytest.mark.parametrize("mode", ["spec", "hook", "cdi"])
def test_mig_capability_files(
    mode: str, sim: Any, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    need_root_and("runc")
    env = ["NVIDIA_DRIVER_CAPABILITIES=utility"]
    env.append("NVIDIA_VISIBLE_DEVICES=" + ("nvidia.com/gpu=1:0" if mode == "cdi" else "1:0"))
    bundle = bundle_factory(["sh", "-c", SCRIPT], env)
    if mode == "spec":
        assert edit_bundle(bundle, HostRoot.single(sim.root)).written
    elif mode == "hook":
        cfg = Path(bundle, "config.json")
        doc = json.loads(cfg.read_text())
        doc["hooks"] = {"prestart": [packaged_hook("prestart", sim.root)]}
        cfg.write_text(json.dumps(doc))
    else:
        spec_dir = tmp_path / "cdi"
        spec_dir.mkdir()
        root = ["--driver-root", sim.root, "--dev-root", sim.root]
        out = ["--output", str(spec_dir / "nvidia.json")]
        ocihook = [sys.executable, "-m", "ocihook"]
        subprocess.run([*ocihook, "cdi", "generate", *root, *out], check=True)
        conf = tmp_path / "config.toml"
        conf.write_text(f'cdi-spec-dirs = ["{spec_dir}"]\n')
        subprocess.run([*ocihook, "edit", "--config", str(conf), "-b", bundle], check=True)
    files, nodes = _expected(sim)
    view = _run(bundle, tmp_path)
    assert view["CAP"] == files
    assert view["NODE"] == nodes
