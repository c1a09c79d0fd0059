"""``ocihook.linux.elf.check_library`` (pyelftools) and ``ocihook list --check``.

Oracle: binutils' ``readelf`` (``-h`` for class, type and machine, ``-d`` for DT_SONAME and
DT_NEEDED) on real files — the simulated host's libraries, NVIDIA's 535.261.03 libraries of
the realistic host, and this machine's own libc — and hand-made broken files
(``ocihook.sim.elfwrite``) for each problem the check reports.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import realistic_dir

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.linux import elf, elfscan
from ocihook.linux.elf import check_library, read_elf_info
from ocihook.sim import elfwrite
from ocihook.sim import host as simhost

BINDIR = os.path.dirname(sys.executable)
READELF_MACHINES = {
    "Advanced Micro Devices X86-64": "EM_X86_64",
    "Intel 80386": "EM_386",
    "AArch64": "EM_AARCH64",
}


def readelf(path: str) -> dict[str, Any]:
    """Class, type, machine, DT_SONAME and DT_NEEDED as ``readelf -h -d -W`` prints them."""
    if shutil.which("readelf") is None:
        pytest.skip("needs readelf (apt-get install binutils)")
    out = subprocess.run(
        ["readelf", "-h", "-d", "-W", path], capture_output=True, text=True, check=True
    ).stdout
    header = dict(re.findall(r"^\s+(Class|Type|Machine):\s+(.*?)\s*$", out, re.M))
    sonames = re.findall(r"\(SONAME\)\s+Library soname: \[(.*)\]", out)
    return {
        "class": {"ELF64": 64, "ELF32": 32}[header["Class"]],
        "type": header["Type"].split()[0],
        "machine": READELF_MACHINES[header["Machine"]],
        "soname": sonames[0] if sonames else None,
        "needed": tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out)),
    }


def assert_matches_readelf(path: str) -> None:
    info, oracle = read_elf_info(path), readelf(path)
    assert (info.elf_class, info.machine, info.soname, info.needed) == (
        oracle["class"],
        oracle["machine"],
        oracle["soname"],
        oracle["needed"],
    ), path
    assert info.elf_type == "ET_" + oracle["type"], path


def check_host(root: str) -> list[Any]:
    """Each library of the host at ``root`` (64- and 32-bit), read with readelf and checked
    against its discovery record; the libraries checked."""
    libraries = discover(HostRoot.single(root)).libraries
    for lib in libraries:
        assert_matches_readelf(lib.host_path)
        problems = check_library(
            lib.host_path, elf_class=lib.elf_class, soname=lib.soname, abi_flags=lib.abi_flags
        )
        assert problems == [], (lib.host_path, problems)
    return list(libraries)


def test_simulated_host_libraries(sim: simhost.SimulatedHost) -> None:
    libraries = check_host(sim.root)
    assert {lib.soname for lib in libraries} >= {"libcuda.so.1", "libnvidia-ml.so.1"}


def test_realistic_nvidia_libraries(realistic: dict[str, Any]) -> None:
    """NVIDIA's real 535.261.03 libraries: every one passes, and pyelftools reads what
    readelf reads (libcuda.so.535.261.03: DT_SONAME libcuda.so.1 and five DT_NEEDED)."""
    libraries = check_host(realistic["root"])
    assert len(libraries) >= 40
    assert {lib.elf_class for lib in libraries} == {32, 64}
    (cuda,) = [lib for lib in libraries if lib.soname == "libcuda.so.1" and lib.elf_class == 64]
    info = read_elf_info(cuda.host_path)
    assert cuda.name == "libcuda.so.535.261.03"
    assert info.needed == ("libm.so.6", "libc.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")


def test_this_machines_libc() -> None:
    path = "/lib/x86_64-linux-gnu/libc.so.6"
    if not os.path.exists(path):
        pytest.skip(f"no {path} on this machine")
    assert_matches_readelf(path)
    assert check_library(path, elf_class=64, machine="EM_X86_64", soname="libc.so.6") == []


# --- each problem, on a file made for it ----------------------------------------------------


def write(tmp_path: Path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_a_good_generated_library(tmp_path: Path) -> None:
    path = write(tmp_path, "libgood.so.1", elfwrite.make_shared_object("libgood.so.1"))
    assert check_library(path, elf_class=64, machine="EM_X86_64", soname="libgood.so.1") == []
    assert check_library(path, abi_flags=0x0303) == []
    assert check_library(path, abi_flags=0x0301) == []  # FLAG_ELF: a library without libc


def test_not_an_elf_file(tmp_path: Path) -> None:
    path = write(tmp_path, "libtext.so.1", b"INPUT(libc.so.6)\n")  # a linker script
    assert check_library(path) == ["not a valid ELF file: Magic number does not match"]
    truncated = elfwrite.make_shared_object("libcut.so.1")[:70]
    (problem,) = check_library(write(tmp_path, "libcut.so.1", truncated))
    assert problem.startswith("not a valid ELF file")
    assert check_library(str(tmp_path / "missing.so")) == [
        "cannot read ELF file: No such file or directory"
    ]


def test_wrong_class_machine_and_abi(tmp_path: Path) -> None:
    i386 = write(
        tmp_path,
        "lib32.so.1",
        elfwrite.make_shared_object("lib32.so.1", elf_class=32, machine="i386"),
    )
    assert check_library(i386, elf_class=64, machine="EM_X86_64", abi_flags=0x0303) == [
        "ELF class 32, expected 64",
        "machine EM_386, expected EM_X86_64",
        "ld.so.cache flags 0x0303 name another ABI than the file's 32-bit EM_386 (0x0003)",
    ]
    arm64 = write(
        tmp_path, "libarm.so.1", elfwrite.make_shared_object("libarm.so.1", machine="aarch64")
    )
    assert check_library(arm64, elf_class=64, abi_flags=0x0A03) == []
    assert check_library(arm64, machine="EM_X86_64") == ["machine EM_AARCH64, expected EM_X86_64"]


def test_not_a_shared_object_and_soname(tmp_path: Path) -> None:
    exe = write(tmp_path, "tool", elfwrite.make_executable(needed=["libc.so.6"]))
    assert check_library(exe) == ["not a shared object: e_type ET_EXEC", "no DT_SONAME"]
    other = write(tmp_path, "libcuda.so.1", elfwrite.make_shared_object("libcuda.so.2"))
    assert check_library(other, soname="libcuda.so.1") == [
        "DT_SONAME libcuda.so.2, expected libcuda.so.1"
    ]


def test_needed_path(tmp_path: Path) -> None:
    data = elfwrite.make_shared_object("libx.so.1", needed=["libc.so.6", "/tmp/evil.so"])
    path = write(tmp_path, "libx.so.1", data)
    assert check_library(path) == ["DT_NEEDED /tmp/evil.so is a path, not a library name"]


def test_the_start_path_reader_disagreeing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A difference between elfscan (the start path's reader) and pyelftools is reported."""
    path = write(
        tmp_path, "liby.so.1", elfwrite.make_shared_object("liby.so.1", needed=["libc.so.6"])
    )
    assert elfscan.dynamic_names(path) == ("liby.so.1", ("libc.so.6",))
    monkeypatch.setattr(elfscan, "dynamic_names", lambda p: ("liby.so.1", ()))
    assert check_library(path) == [
        "the start path's ELF reader reads DT_SONAME liby.so.1 and DT_NEEDED (none); "
        "pyelftools DT_SONAME liby.so.1 and DT_NEEDED libc.so.6"
    ]
    monkeypatch.setattr(elfscan, "dynamic_names", lambda p: None)
    assert check_library(path) == ["the start path's ELF reader finds no dynamic section"]


def test_importing_elf_loads_no_pyelftools() -> None:
    """check_library is off the start path, and pyelftools is imported on first use."""
    from support import modules_after

    assert "elftools" not in modules_after("import ocihook.linux.elf")
    assert elf.check_library is check_library


# --- ocihook list --check ---------------------------------------------------------------------


def ocihook(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.path.join(BINDIR, "ocihook"), *args], capture_output=True, text=True, timeout=120
    )


def test_list_check_on_the_realistic_host() -> None:
    root = realistic_dir()
    if not os.path.exists(os.path.join(root, ".ocihook-fixture.json")):
        pytest.skip(f"realistic host not built at {root}: run python fixtures/realistic/build.py")
    out = ocihook("list", "-l", "--compat32", "--check", "--driver-root", root, "--dev-root", root)
    assert out.returncode == 0, out.stderr
    assert "check:" not in out.stderr
    assert f"{root}/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.535.261.03" in out.stdout


def test_list_check_reports_a_broken_library(tmp_path: Path) -> None:
    """A simulated host whose libcuda says DT_SONAME libcuda.so.2 and needs a path, and
    whose libnvidia-ml is an executable: each problem is one line naming the file, exit 6;
    without --check the listing is the same and exits 0. (A file of the wrong class is
    not listed at all: discovery skips it with a warning.)"""
    sim = simhost.build(str(tmp_path / "host"), gpus=1, make_dev_nodes=False)
    libraries = discover(HostRoot.single(sim.root)).libraries
    cuda = next(lib for lib in libraries if lib.soname == "libcuda.so.1")
    ml = next(lib for lib in libraries if lib.soname == "libnvidia-ml.so.1")
    Path(cuda.host_path).write_bytes(
        elfwrite.make_shared_object("libcuda.so.2", needed=["libc.so.6", "/opt/x/libx.so"])
    )
    Path(ml.host_path).write_bytes(elfwrite.make_executable(needed=["libc.so.6"]))
    roots = ("--driver-root", sim.root, "--dev-root", sim.root)
    plain = ocihook("list", "-l", *roots)
    assert plain.returncode == 0, plain.stderr
    assert cuda.host_path in plain.stdout and ml.host_path in plain.stdout
    out = ocihook("list", "-l", "--check", *roots)
    assert out.returncode == 6, out.stderr
    assert out.stdout == plain.stdout
    assert out.stderr.splitlines() == [
        f"ocihook: check: {ml.host_path}: not a shared object: e_type ET_EXEC",
        f"ocihook: check: {ml.host_path}: no DT_SONAME",
        f"ocihook: check: {cuda.host_path}: DT_SONAME libcuda.so.2, expected libcuda.so.1",
        f"ocihook: check: {cuda.host_path}: DT_NEEDED /opt/x/libx.so is a path, not a library name",
        "ocihook: error[host-discovery]: 2 driver libraries failed the ELF check (listed above) "
        f"(file {sim.root})",
    ]


def test_aarch64_libraries(tmp_path: Path) -> None:
    """The simulated host built for aarch64: its libraries are EM_AARCH64 (readelf agrees)
    and pass with the cache flags ldconfig gives aarch64 (0x0a03)."""
    sim = simhost.build(str(tmp_path / "host"), gpus=1, make_dev_nodes=False, machine="aarch64")
    libdir = Path(sim.root, "usr/lib/aarch64-linux-gnu")
    files = sorted(p for p in libdir.glob("lib*.so.*.*") if p.is_file() and not p.is_symlink())
    assert len(files) >= 5
    for path in files:
        assert_matches_readelf(str(path))
        assert check_library(str(path), elf_class=64, machine="EM_AARCH64", abi_flags=0x0A03) == []
