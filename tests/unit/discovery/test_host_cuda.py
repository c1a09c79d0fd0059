"""The CUDA version discovery records for a host, and where it came from
(:func:`ocihook.discovery.nvidia.host_cuda_version`): NVML first, then the
``.note.cuda.fwd_compatibility`` note of the driver's own ``libcuda.so``, then the
driver-branch table; cached with the rest of discovery.

The note path uses a real shared object: ``gcc -shared`` and ``objcopy --add-section``
put the note into a library with the toolchain's usual sections, and ``readelf`` reads it
back, independently of ocihook's reader.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support import CUDA_NOTE_SECTION, REPO, cuda_note, load_pynvml_double, put_libcuda, sim_nvml

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover, discover_cached, host_cuda_version
from ocihook.sim import host as simhost

SECTION = CUDA_NOTE_SECTION
_note = cuda_note


def _host(tmp: Path, driver: str, note: bytes | None, *, name: str = "root") -> HostRoot:
    """A simulated host of driver ``driver`` whose 64-bit libcuda is a gcc library with
    ``note`` (or none)."""
    sim = simhost.build(str(tmp / name), driver_version=driver, gpus=2, make_dev_nodes=False)
    root = HostRoot.single(sim.root)
    put_libcuda(root, tmp / f"{name}-gcc", note)
    return root


def test_the_note_of_the_drivers_libcuda_gives_the_cuda_version(tmp_path: Path) -> None:
    """A 590 driver whose libcuda carries the note: 13.1 from the note, as ``readelf -p``
    shows the note's text."""
    root = _host(tmp_path, "590.44.01", _note("13.1", [535, 550, 570, 575, 580, 590]))
    host = discover(root)
    assert (host.cuda_version, host.cuda_source) == ("13.1", "elf-note")
    lib = next(x for x in host.libraries if x.soname == "libcuda.so.1" and x.elf_class == 64)
    dump = subprocess.run(
        ["readelf", "-p", SECTION, lib.host_path], capture_output=True, text=True, check=True
    ).stdout
    assert '"CUDA Version": "13.1"' in dump


def test_the_note_comes_before_the_table(tmp_path: Path) -> None:
    """Where the note and the table differ (a 580 driver, table 13.0; a note written to
    say 12.9), the note is what is recorded."""
    host = discover(_host(tmp_path, "580.95.05", _note("12.9", [580])))
    assert (host.cuda_version, host.cuda_source) == ("12.9", "elf-note")


def test_without_note_the_driver_branch_table(tmp_path: Path) -> None:
    root = _host(tmp_path, "550.127.05", None)
    host = discover(root)
    assert (host.cuda_version, host.cuda_source) == ("12.4", "driver-branch")


@pytest.mark.parametrize("note", [None, b"not a note at all", "malformed"])
def test_outside_the_table_and_without_a_usable_note_it_is_unknown(
    tmp_path: Path, note: bytes | str | None
) -> None:
    raw = _note("12", [600]) if note == "malformed" else note  # "12" is no M.m version
    assert raw is None or isinstance(raw, bytes)
    host = discover(_host(tmp_path, "600.10.01", raw))
    assert (host.cuda_version, host.cuda_source) == (None, None)


def test_a_discovery_without_compute_libraries_uses_the_table(tmp_path: Path) -> None:
    """``utility`` alone discovers no libcuda: the table, never a guess from elsewhere."""
    root = _host(tmp_path, "590.44.01", _note("13.1", [590]))
    host = discover(root, capabilities=["utility"])
    assert not [lib for lib in host.libraries if lib.soname == "libcuda.so.1"]
    assert (host.cuda_version, host.cuda_source) == ("13.1", "driver-branch")


def test_nvml_comes_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the NVML backend (the pynvml double), NVML's CUDA version is used even where
    the library has a note that says otherwise."""
    sim = simhost.build(str(tmp_path / "root"), gpus=2, make_dev_nodes=False)
    root = HostRoot.single(sim.root)
    nvml = load_pynvml_double()
    nvml.load(sim_nvml(sim, cuda_version=12060))
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    host = discover(root, gpu_backend="nvml")
    assert (host.cuda_version, host.cuda_source) == ("12.6", "nvml")


def test_host_cuda_version_order() -> None:
    assert host_cuda_version("535.261.03", (), "12.2") == ("12.2", "nvml")
    assert host_cuda_version("535.261.03", ()) == ("12.2", "driver-branch")
    assert host_cuda_version("700.1", ()) == (None, None)
    assert host_cuda_version("", ()) == (None, None)


def test_the_note_is_cached_with_discovery(tmp_path: Path) -> None:
    """A warm discovery cache gives the CUDA version and its source without reading the
    library again: a fresh interpreter that finds the entry loads neither the ELF reader
    nor the table."""
    root = _host(tmp_path, "590.44.01", _note("13.1", [590]))
    cache_dir = tmp_path / "cache"
    # the key holds the identity of ocihook's discovery directory: a first interpreter
    # writing its __pycache__ there (a test run with PYTHONDONTWRITEBYTECODE wrote none)
    # would change it, as it does once on a host whose install has no byte code
    warm = f"import sys; sys.path.insert(0, {REPO!r}); import ocihook.discovery.nvidia"
    subprocess.run([sys.executable, "-I", "-c", warm], check=True)
    stored = discover_cached(root, cache_dir=str(cache_dir), warm=True)
    assert (stored.cuda_version, stored.cuda_source) == ("13.1", "elf-note")
    code = (
        "import sys\n"
        f"sys.path.insert(0, {REPO!r})\n"
        "from ocihook.core.hostroot import HostRoot\n"
        "from ocihook.discovery.nvidia import discover_cached\n"
        f"h = discover_cached(HostRoot.single({root.driver_root!r}), cache_dir={str(cache_dir)!r})\n"
        "print(h.cuda_version, h.cuda_source,"
        " 'ocihook.linux.elfscan' in sys.modules, 'ocihook.core.cudaversion' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["13.1", "elf-note", "False", "False"]
