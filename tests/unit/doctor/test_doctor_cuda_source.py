"""doctor's CUDA check takes the version discovery read from the driver's ``libcuda``
note, and names that source (the table is :mod:`ocihook.core.cudaversion`'s, tested
there)."""

from __future__ import annotations

from pathlib import Path

from support import cuda_note, put_libcuda

from ocihook import doctor
from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost


def test_the_libcuda_note_is_doctors_source(tmp_path: Path) -> None:
    sim = simhost.build(str(tmp_path / "root"), driver_version="590.44.01", gpus=2)
    root = HostRoot.single(sim.root)
    put_libcuda(root, tmp_path / "gcc", cuda_note("13.1", [580, 590]))
    report = doctor.run_doctor(
        root, config_root=str(tmp_path / "no-etc"), containers=False, gpu_backend="procfs"
    )
    (cuda,) = [c for c in report.checks if c.layer == "host" and c.name == "CUDA driver version"]
    assert (cuda.status, cuda.evidence) == ("PASS", "CUDA 13.1 (libcuda ELF note)")
    assert (report.facts["cudaVersion"], report.facts["cudaSource"]) == ("13.1", "elf-note")
