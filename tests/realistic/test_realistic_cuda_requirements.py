"""``NVIDIA_REQUIRE_CUDA`` and the legacy ``CUDA_VERSION`` requirement on the realistic
535.261.03 host, without NVML: the CUDA version comes from the driver-branch table (Debian's
535 ``libcuda.so`` has no ``.note.cuda.fwd_compatibility``, as ``readelf -S`` shows), so
CUDA 12.2.

``ocihook edit`` runs as a process (the installed command); a refused bundle keeps its
``config.json`` byte for byte and its rootfs entry for entry.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import OCIHOOK, busybox_bundle

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover

pytestmark = pytest.mark.realistic


def _tree(rootfs: str) -> list[tuple[str, int, int]]:
    """Every entry under ``rootfs``: (relative path, mode, size)."""
    out = []
    for top, dirs, files in os.walk(rootfs):
        for name in sorted(dirs + files):
            st = os.lstat(os.path.join(top, name))
            out.append((os.path.relpath(os.path.join(top, name), rootfs), st.st_mode, st.st_size))
    return sorted(out)


def _edit(bundle: str, root: str) -> subprocess.CompletedProcess[str]:
    argv = [*OCIHOOK, "edit", "-b", bundle, "--driver-root", root, "--dev-root", root]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_the_realistic_libcuda_has_no_cuda_note_and_the_table_says_12_2(
    realistic: dict[str, Any],
) -> None:
    host = discover(HostRoot.single(realistic["root"]))
    lib = next(x for x in host.libraries if x.soname == "libcuda.so.1" and x.elf_class == 64)
    sections = subprocess.run(
        ["readelf", "-S", "-W", lib.host_path], capture_output=True, text=True, check=True
    ).stdout
    assert ".note.gnu.build-id" in sections  # readelf read it
    assert ".note.cuda.fwd_compatibility" not in sections
    assert (host.cuda_version, host.cuda_source) == ("12.2", "driver-branch")


@pytest.mark.parametrize(
    ("env", "unmet"),
    [
        (["NVIDIA_REQUIRE_CUDA=cuda>=13.0"], "NVIDIA_REQUIRE_CUDA not met"),
        (["NVIDIA_REQUIRE_CUDA=cuda>=12.3 brand=tesla,cuda>=12.4"], "NVIDIA_REQUIRE_CUDA not met"),
        (["CUDA_VERSION=12.4.1"], "legacy CUDA image"),
        (["NVIDIA_REQUIRE_CUDA=cuda>=12.0", "NVIDIA_REQUIRE_DRIVER=cuda>=12.8"], "REQUIRE_DRIVER"),
    ],
)
def test_an_unmet_cuda_requirement_is_refused_and_nothing_changes(
    realistic: dict[str, Any], tmp_path: Path, env: list[str], unmet: str
) -> None:
    bundle = busybox_bundle(tmp_path / "b", ["true"], ["NVIDIA_VISIBLE_DEVICES=all", *env])
    config = Path(bundle, "config.json")
    before, tree = config.read_bytes(), _tree(os.path.join(bundle, "rootfs"))
    proc = _edit(bundle, realistic["root"])
    assert proc.returncode == 5, proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("ocihook: error[bad-request]: ") and unmet in line, line
    assert "the host has cuda=12.2" in line and str(config) in line
    assert config.read_bytes() == before
    assert _tree(os.path.join(bundle, "rootfs")) == tree


@pytest.mark.parametrize(
    "env",
    [
        ["NVIDIA_REQUIRE_CUDA=cuda>=12.0"],
        ["NVIDIA_REQUIRE_CUDA=cuda>=12.2 driver>=999"],
        ["NVIDIA_REQUIRE_CUDA=cuda>=13.0", "NVIDIA_DISABLE_REQUIRE=true"],
        ["CUDA_VERSION=12.2.2"],
        ["CUDA_VERSION=13.0.0", "NVIDIA_REQUIRE_CUDA=cuda>=11.8"],  # not legacy: the variable
    ],
)
def test_a_met_cuda_requirement_passes(
    realistic: dict[str, Any], tmp_path: Path, env: list[str]
) -> None:
    bundle = busybox_bundle(tmp_path / "b", ["true"], ["NVIDIA_VISIBLE_DEVICES=all", *env])
    proc = _edit(bundle, realistic["root"])
    assert proc.returncode == 0, proc.stderr
    assert "written" in proc.stderr and "warning" not in proc.stderr
    doc = json.loads(Path(bundle, "config.json").read_text())
    assert "/dev/nvidia0" in [d["path"] for d in doc["linux"]["devices"]]
