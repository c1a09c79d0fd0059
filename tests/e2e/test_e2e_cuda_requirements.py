"""``NVIDIA_REQUIRE_CUDA`` with real runc on the realistic 535.261.03 host (no NVML: CUDA
12.2 from the driver-branch table), in hook mode (ocihook's packaged prestart hook) and in
spec mode (``ocihook edit``, then ``runc run``): an image that needs CUDA 13.0 never
starts, one that needs 12.0 starts with its GPU.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import OCIHOOK, need_root_and, register_hook, with_mknod_cap

from ocihook.sim.demo import run_container

#: The container's check: the GPU's node and the driver's libcuda are there.
SCRIPT = "test -c /dev/nvidia0 && test -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 && echo GPU-OK"


def _root(realistic: dict[str, Any]) -> str:
    if not realistic.get("device_nodes", {}).get("created"):
        pytest.skip("the realistic host was built without /dev nodes (not root)")
    return str(realistic["root"])


def _start(mode: str, bundle: str, root: str, state: Path) -> subprocess.CompletedProcess[str]:
    """Start the bundle's container in ``mode``: the ``ocihook edit`` refusal when spec
    mode refuses, else what ``runc run`` did."""
    if mode == "spec":
        argv = [*OCIHOOK, "edit", "-b", bundle, "--driver-root", root, "--dev-root", root]
        edit = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if edit.returncode != 0:
            return edit
    else:
        register_hook(bundle, root)
    return run_container(bundle, state_root=str(state))


@pytest.mark.parametrize("mode", ["hook", "spec"])
def test_an_image_needing_a_newer_cuda_never_starts(
    mode: str,
    realistic: dict[str, Any],
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    need_root_and("runc")
    root = _root(realistic)
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"]
    bundle = bundle_factory(["sh", "-c", SCRIPT], env, debian=True)
    with_mknod_cap(bundle)
    config = Path(bundle, "config.json")
    before = config.read_bytes()
    proc = _start(mode, bundle, root, tmp_path / "runc")
    assert proc.returncode != 0
    assert "GPU-OK" not in proc.stdout
    assert "error[bad-request]: NVIDIA_REQUIRE_CUDA not met" in proc.stderr, proc.stderr
    assert "the host has cuda=12.2" in proc.stderr
    if mode == "spec":
        assert proc.returncode == 5 and config.read_bytes() == before
    libcuda = Path(bundle, "rootfs/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    assert not os.path.lexists(libcuda)
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()


@pytest.mark.parametrize("mode", ["hook", "spec"])
def test_an_image_needing_cuda_12_starts_with_its_gpu(
    mode: str,
    realistic: dict[str, Any],
    bundle_factory: Callable[..., str],
    tmp_path: Path,
) -> None:
    need_root_and("runc")
    root = _root(realistic)
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.0", "CUDA_VERSION=12.2.2"]
    bundle = bundle_factory(["sh", "-c", SCRIPT], env, debian=True)
    with_mknod_cap(bundle)
    proc = _start(mode, bundle, root, tmp_path / "runc")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["GPU-OK"]
