"""Pins of driver-file discovery: a soname read from the driver root (its ``ld.so.cache`` or
a library's ``DT_SONAME``) that is not a plain file name never becomes a library's soname,
and files of another machine or ELF class are never taken as the driver's.

The libraries are built by the real ``gcc`` and the caches written by the real
``ldconfig -r <root>``; the 32-bit driver file is Debian's i386 ``libnvidia-tls`` from the
realistic host.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ocihook.core.errors import DiscoveryError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.driverfiles import find_binaries, find_libraries
from ocihook.sim import elfwrite

V = "535.261.03"
LIBDIR = "usr/lib/x86_64-linux-gnu"


def _tools() -> tuple[str, str]:
    gcc, ldconfig = shutil.which("gcc"), shutil.which("ldconfig") or "/usr/sbin/ldconfig"
    if gcc is None or not os.path.exists(ldconfig):
        pytest.skip("needs gcc and ldconfig (the real toolchain is the oracle here)")
    return gcc, ldconfig


def gcc_library(path: Path, soname: str) -> None:
    """A real x86-64 shared object at ``path`` whose ``DT_SONAME`` is ``soname``."""
    gcc, _ = _tools()
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / "lib.c"
    src.write_text("int nv_probe(void) { return 1; }\n")
    subprocess.run(
        [gcc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(path), str(src)], check=True
    )
    src.unlink()


def ldconfig_cache(root: Path, *dirs: str, links: bool = True) -> list[str]:
    """Write ``<root>/etc/ld.so.cache`` with the real ``ldconfig -r <root>`` over ``dirs``
    (making the soname links in them unless ``links`` is false); returns what
    ``ldconfig -p`` prints of it."""
    _, ldconfig = _tools()
    (root / "etc").mkdir(exist_ok=True)
    (root / "etc/ld.so.conf").write_text("".join(f"/{d}\n" for d in dirs))
    no_links = [] if links else ["-X"]
    subprocess.run([ldconfig, *no_links, "-r", str(root), "-C", "/etc/ld.so.cache"], check=True)
    out = subprocess.run(
        [ldconfig, "-p", "-C", str(root / "etc/ld.so.cache")], check=True, capture_output=True
    )
    return out.stdout.decode().splitlines()


def compute(root: Path, machine: str = "x86_64", **kw: Any) -> tuple[Any, list[str]]:
    return find_libraries(
        HostRoot(driver_root=str(root)), V, machine=machine, capabilities=["compute"], **kw
    )


def test_cache_soname_with_a_slash_is_never_taken(tmp_path: Path) -> None:
    """ldconfig records a ``DT_SONAME`` holding ``/..`` as it is, keyed by that string, with
    the path ``<dir>/<soname>``; that entry resolves (inside the root) to a real driver file
    elsewhere. The entry is skipped: the library is the one the directory search finds, known
    by its file name, and no soname holds a ``/``."""
    evil = f"libcuda.so.1/../../../../../opt/libcuda.so.{V}"
    gcc_library(tmp_path / LIBDIR / f"libcuda.so.{V}", evil)
    (tmp_path / "opt").mkdir()
    shutil.copy(tmp_path / LIBDIR / f"libcuda.so.{V}", tmp_path / "opt")
    printed = ldconfig_cache(tmp_path, LIBDIR, links=False)
    assert f"\t{evil} (libc6,x86-64) => /{LIBDIR}/{evil}" in printed
    libs, _ = compute(tmp_path)
    assert [(lib.soname, lib.host_path) for lib in libs] == [
        (f"libcuda.so.{V}", str(tmp_path / LIBDIR / f"libcuda.so.{V}"))
    ]


@pytest.mark.parametrize("soname", ["..", ".", "../../../etc/libcuda.so.1", "libcuda.so.1/x"])
def test_dt_soname_that_is_not_a_file_name_is_never_the_soname(tmp_path: Path, soname: str) -> None:
    """Without a cache the soname of a library found by directory search comes from its
    ``DT_SONAME`` — unless that is not a plain file name: then it is the file's name."""
    gcc_library(tmp_path / LIBDIR / f"libcuda.so.{V}", soname)
    libs, warnings = compute(tmp_path)
    assert [lib.soname for lib in libs] == [f"libcuda.so.{V}"]
    assert [lib.path for lib in libs] == [f"/{LIBDIR}/libcuda.so.{V}"]
    assert len(warnings) == 1 and "no ld.so.cache in the driver root" in warnings[0]


def test_plain_dt_soname_is_the_soname(tmp_path: Path) -> None:
    """The counterpart: a plain ``DT_SONAME`` is used as it is."""
    gcc_library(tmp_path / LIBDIR / f"libcuda.so.{V}", "libcuda.so.1")
    libs, _ = compute(tmp_path)
    assert [lib.soname for lib in libs] == ["libcuda.so.1"]


def test_library_of_another_machine_in_the_directories_is_skipped(tmp_path: Path) -> None:
    """A real x86-64 library in the directories of an aarch64 host (same class, another
    ``e_machine``) is not the driver's: a graphics library is skipped with a warning naming
    it; with the core libraries foreign too, discovery fails (the driver root is wrong)."""
    libdir = tmp_path / "usr/lib/aarch64-linux-gnu"
    gcc_library(libdir / f"libnvidia-glcore.so.{V}", f"libnvidia-glcore.so.{V}")
    root = HostRoot(driver_root=str(tmp_path))
    libs, warnings = find_libraries(root, V, machine="aarch64", capabilities=["graphics"])
    assert libs == ()
    assert f"{libdir}/libnvidia-glcore.so.{V} is not a 64-bit aarch64 ELF file; skipped" in warnings
    gcc_library(libdir / f"libcuda.so.{V}", "libcuda.so.1")
    with pytest.raises(DiscoveryError, match=f"no NVIDIA {V} driver library is in"):
        compute(tmp_path, machine="aarch64")
    assert [lib.soname for lib in compute(tmp_path, machine="x86_64")[0]] == ["libcuda.so.1"]


def test_library_replaced_by_another_machine_after_ldconfig_is_skipped(tmp_path: Path) -> None:
    """The cache lists a real x86-64 library; the file is then replaced by an aarch64 one
    (the cache is stale): the cache's flags say x86-64, the file does not, so it is skipped."""
    lib = tmp_path / LIBDIR / f"libcuda.so.{V}"
    gcc_library(lib, "libcuda.so.1")
    assert any("libcuda.so.1 (libc6,x86-64)" in line for line in ldconfig_cache(tmp_path, LIBDIR))
    lib.write_bytes(elfwrite.make_shared_object("libcuda.so.1", machine="aarch64"))
    libs, warnings = compute(tmp_path)
    assert libs == ()
    assert f"{lib} is not a 64-bit x86_64 ELF file; skipped" in warnings


def test_32_bit_library_in_a_64_bit_entry_is_skipped(
    tmp_path: Path, realistic: dict[str, Any]
) -> None:
    """Debian's real i386 ``libnvidia-tls`` put where the cache lists the 64-bit one (the
    cache is stale) is skipped for its class and machine."""
    i386 = Path(realistic["root"], "usr/lib/i386-linux-gnu", f"libnvidia-tls.so.{V}")
    lib = tmp_path / LIBDIR / f"libnvidia-tls.so.{V}"
    gcc_library(lib, "libnvidia-tls.so.535.261.03")
    ldconfig_cache(tmp_path, LIBDIR)
    shutil.copy(i386, lib)
    libs, warnings = find_libraries(
        HostRoot(driver_root=str(tmp_path)), V, machine="x86_64", capabilities=["graphics"]
    )
    assert [lib.name for lib in libs if lib.name.startswith("libnvidia-tls")] == []
    assert f"{lib} is not a 64-bit x86_64 ELF file; skipped" in warnings


def test_binary_of_another_machine_is_skipped(tmp_path: Path) -> None:
    """A real x86-64 executable as ``nvidia-smi`` in an aarch64 driver root is skipped (never
    run: it is only read); on x86-64 the same file is found."""
    true = shutil.which("true")
    assert true is not None
    (tmp_path / "usr/bin").mkdir(parents=True)
    shutil.copy(true, tmp_path / "usr/bin/nvidia-smi")
    root = HostRoot(driver_root=str(tmp_path))
    found, warnings = find_binaries(root, machine="aarch64", capabilities=["utility"])
    assert found == ()
    assert warnings == [f"{tmp_path}/usr/bin/nvidia-smi is not a aarch64 ELF binary; skipped"]
    found, warnings = find_binaries(root, machine="x86_64", capabilities=["utility"])
    assert [(f.path, f.elf_class) for f in found] == [("/usr/bin/nvidia-smi", 64)] and not warnings


def test_directory_search_passes_over_a_file_of_the_other_class(
    tmp_path: Path, realistic: dict[str, Any]
) -> None:
    """No cache: Debian's real i386 ``libcuda`` in ``/usr/lib64`` (searched first for 64-bit
    libraries) is passed over, and the real x86-64 one in ``/usr/lib/x86_64-linux-gnu``
    (searched later) is the library — without a warning."""
    i386 = Path(realistic["root"], "usr/lib/i386-linux-gnu/nvidia/current", f"libcuda.so.{V}")
    (tmp_path / "usr/lib64").mkdir(parents=True)
    shutil.copy(i386, tmp_path / "usr/lib64")
    gcc_library(tmp_path / LIBDIR / f"libcuda.so.{V}", "libcuda.so.1")
    libs, warnings = compute(tmp_path, elf_classes=(64,))
    assert [(lib.path, lib.elf_class) for lib in libs] == [(f"/{LIBDIR}/libcuda.so.{V}", 64)]
    assert not any("not a 64-bit" in w for w in warnings)


def test_cache_name_that_only_starts_like_a_driver_library_is_not_it(tmp_path: Path) -> None:
    """A cache key ``libcuda.so_compat.1`` starts with ``libcuda.so`` but is another
    library: not taken as ``libcuda``; the real one beside it is."""
    gcc_library(tmp_path / LIBDIR / f"libcuda.so_compat.{V}", "libcuda.so_compat.1")
    ldconfig_cache(tmp_path, LIBDIR)
    assert compute(tmp_path)[0] == ()
    gcc_library(tmp_path / LIBDIR / f"libcuda.so.{V}", "libcuda.so.1")
    ldconfig_cache(tmp_path, LIBDIR)
    libs, _ = compute(tmp_path)
    assert [(lib.soname, lib.name) for lib in libs] == [("libcuda.so.1", f"libcuda.so.{V}")]


@pytest.mark.parametrize(("endian", "taken"), [("little", True), ("big", False)])
def test_big_endian_library_is_not_an_aarch64_hosts(
    tmp_path: Path, endian: str, taken: bool
) -> None:
    """aarch64 hosts are little-endian: a big-endian AArch64 library (``aarch64_be``, same
    ``e_machine``) in their directories cannot be loaded there and is not the driver's."""
    libdir = tmp_path / "usr/lib/aarch64-linux-gnu"
    libdir.mkdir(parents=True)
    data = elfwrite.make_shared_object("libnvidia-glcore.so.1", machine="aarch64", endian=endian)
    (libdir / f"libnvidia-glcore.so.{V}").write_bytes(data)
    root = HostRoot(driver_root=str(tmp_path))
    libs, _ = find_libraries(root, V, machine="aarch64", capabilities=["graphics"])
    assert [lib.abi_flags for lib in libs] == ([0x0A03] if taken else [])


def test_soname_is_the_versioned_key_that_is_not_the_file_name(tmp_path: Path) -> None:
    """A cache (written by ocihook's writer, read back by the real ``ldconfig -p``) with two
    keys for the driver file, its soname and its own file name: the soname is the one that
    is not the file name, whatever their order in the file."""
    from ocihook.linux import ldcache

    gcc_library(tmp_path / LIBDIR / f"libcuda.so.{V}", "libcuda.so.1")
    path = f"/{LIBDIR}/libcuda.so.{V}"
    entries = [
        ldcache.CacheEntry(f"libcuda.so.{V}", path, 0x0303),
        ldcache.CacheEntry("libcuda.so.1", path, 0x0303),
    ]
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/ld.so.cache").write_bytes(ldcache.build(entries))
    _, ldconfig = _tools()
    printed = subprocess.run(
        [ldconfig, "-p", "-C", str(tmp_path / "etc/ld.so.cache")], capture_output=True, text=True
    ).stdout
    assert f"\tlibcuda.so.1 (libc6,x86-64) => {path}" in printed
    assert f"\tlibcuda.so.{V} (libc6,x86-64) => {path}" in printed
    libs, _ = compute(tmp_path)
    assert [(lib.soname, lib.name) for lib in libs] == [("libcuda.so.1", f"libcuda.so.{V}")]
