"""A GKE/COS-like driver tree made of NVIDIA's real 535.261.03 files:
``/home/kubernetes/bin/nvidia`` with ``lib64/`` and ``bin/``, no ``ld.so.cache``, no soname
links. Discovery must find the same 64-bit libraries as on the Debian layout, their
sonames read from the real files' ``DT_SONAME``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover


def _place(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst)  # the cache and tmp_path share a file system here: no copy
    except OSError:
        shutil.copy2(src, dst)


def test_cos_tree_from_real_files(realistic: dict[str, Any], tmp_path: Path) -> None:
    root = realistic["root"]
    debian = discover(HostRoot.single(root))
    libs64 = [lib for lib in debian.libraries if lib.elf_class == 64]
    assert len(libs64) > 20
    cos = str(tmp_path / "home/kubernetes/bin/nvidia")
    for lib in libs64:
        _place(lib.host_path, os.path.join(cos, "lib64", lib.name))
    smi = next(f for f in debian.files if f.path.endswith("/nvidia-smi"))
    _place(smi.host_path, os.path.join(cos, "bin/nvidia-smi"))
    h = discover(HostRoot(driver_root=cos, dev_root=root))
    assert h.driver_version == realistic["driver_version"]
    assert len(h.gpus) == len(realistic["gpus"])
    got = {(lib.soname, lib.name, lib.elf_class) for lib in h.libraries}
    assert got == {(lib.soname, lib.name, 64) for lib in libs64}
    assert all(lib.path == f"/lib64/{lib.name}" for lib in h.libraries)
    assert "/bin/nvidia-smi" in {f.path for f in h.files if f.kind == "binary"}
    assert len([w for w in h.warnings if "no ld.so.cache in the driver root" in w]) == 1
