"""The CUDA probe (:mod:`ocihook.doctor.probe`) against a stand-in driver API, and as the
module file doctor ships into the container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ocihook import doctor

REPO = Path(__file__).resolve().parents[3]


def fake_libcuda(dest: Path) -> Path:
    """tests/doubles/fake_libcuda.c built as ``dest`` (soname libcuda.so.1); skips without cc."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler for the libcuda stand-in (apt-get install gcc)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    src = REPO / "tests/doubles/fake_libcuda.c"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(dest), str(src)], check=True
    )
    return dest


@pytest.mark.parametrize("corrupt", [False, True])
def test_probe_against_the_driver_api(tmp_path: Path, corrupt: bool) -> None:
    """The probe's ctypes calls marshal what the C API expects: a stand-in libcuda that
    implements it on host memory sees the right pointers, sizes and kernel parameters, and
    a word corrupted on the way back is caught."""
    fake_libcuda(tmp_path / "lib/libcuda.so.1")
    (tmp_path / "probe.py").write_text(doctor.PROBE)
    env = {"LD_LIBRARY_PATH": str(tmp_path / "lib"), "PATH": os.environ.get("PATH", "")}
    if corrupt:
        env["FAKE_CUDA_CORRUPT"] = "1"
    r = subprocess.run(
        [sys.executable, "-I", str(tmp_path / "probe.py")], capture_output=True, text=True, env=env
    )
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("PROBE "))
    result = json.loads(line[6:])
    assert result["name"] == "Fake GPU"
    assert result["uuid"] == "GPU-00112233-4455-6677-8899-aabbccddeeff"
    assert result["cudaVersion"] == "12.4" and result["bytes"] == 64 << 20
    if corrupt:
        assert r.returncode == 1 and result["ok"] is False
        assert result["error"] == "1 words read back wrong"
    else:
        assert r.returncode == 0 and result["ok"] is True and result["wrongWords"] == 0


def test_probe_is_the_module_file_and_importing_it_runs_nothing() -> None:
    """What doctor copies into the container is ``ocihook/doctor/probe.py`` itself; the
    module runs only as a program (importing it neither loads libcuda nor exits)."""
    import importlib

    assert (REPO / "ocihook/doctor/probe.py").read_text() == doctor.PROBE
    probe = importlib.import_module("ocihook.doctor.probe")
    assert callable(probe.main) and probe.WORDS * 4 == 64 << 20
    assert "libcuda.so.1" not in Path("/proc/self/maps").read_text()
