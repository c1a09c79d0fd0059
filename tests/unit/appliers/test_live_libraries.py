"""Hook mode's container ``ld.so.cache`` (ocihook.appliers.live.libraries.write_ldcache) on
real libraries built by ``gcc`` in a temporary rootfs, with the real ``ldconfig -p`` reading
what was written: a library whose ``DT_SONAME`` is a path, or of a machine the cache has no
flags for, is refused before anything is written; a known entry must name a file; an
implausibly large cache is refused; a damaged glibc-hwcaps entry of the image's cache is
dropped, the rest kept."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocihook.appliers.live.libraries import MAX_LDCACHE_BYTES, write_ldcache
from ocihook.core.errors import ApplyError
from ocihook.linux import ldcache, pathsafe

LIBDIR = "usr/lib64"


def _ldconfig() -> str:
    ldconfig = shutil.which("ldconfig") or "/usr/sbin/ldconfig"
    if shutil.which("gcc") is None or not os.path.exists(ldconfig):
        pytest.skip("needs gcc and ldconfig")
    return ldconfig


def gcc_library(path: Path, soname: str) -> None:
    _ldconfig()
    path.parent.mkdir(parents=True, exist_ok=True)
    src = path.parent / "lib.c"
    src.write_text("int f(void) { return 1; }\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(path), str(src)], check=True
    )
    src.unlink()


def ldconfig_p(cache: Path) -> list[str]:
    out = subprocess.run(
        [_ldconfig(), "-p", "-C", str(cache)], check=True, capture_output=True, text=True
    )
    return [line.strip() for line in out.stdout.splitlines() if line.startswith("\t")]


@pytest.fixture
def rootfs(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    fd = pathsafe.open_root(str(root))
    try:
        yield root, fd
    finally:
        os.close(fd)


def test_library_is_entered_as_ldconfig_reads_it(rootfs: tuple[Path, int]) -> None:
    root, fd = rootfs
    gcc_library(root / LIBDIR / "libcuda.so.535.261.03", "libcuda.so.1")
    assert write_ldcache(fd, [f"/{LIBDIR}/libcuda.so.535.261.03"]) is None
    assert ldconfig_p(root / "etc/ld.so.cache") == [
        f"libcuda.so.1 (libc6,x86-64) => /{LIBDIR}/libcuda.so.1"
    ]


@pytest.mark.parametrize("soname", ["../../etc/libcuda.so.1", "..", "x/libcuda.so.1"])
def test_soname_that_is_a_path_is_refused(rootfs: tuple[Path, int], soname: str) -> None:
    """The entry would be named ``<dir>/<soname>``: a path out of the library directory.
    Refused with the library and the soname; no cache is written."""
    root, fd = rootfs
    gcc_library(root / LIBDIR / "libcuda.so.535.261.03", soname)
    with pytest.raises(ApplyError) as err:
        write_ldcache(fd, [f"/{LIBDIR}/libcuda.so.535.261.03"])
    assert err.value.message == "the library's soname is not a file name"
    assert (err.value.path, err.value.value) == (f"/{LIBDIR}/libcuda.so.535.261.03", soname)
    assert not (root / "etc/ld.so.cache").exists()


def test_library_of_an_unknown_machine_is_refused(rootfs: tuple[Path, int]) -> None:
    """A real library with ``e_machine`` set to RISC-V (243), a machine ocihook has no
    cache flags for: refused, nothing written."""
    root, fd = rootfs
    lib = root / LIBDIR / "libcuda.so.535.261.03"
    gcc_library(lib, "libcuda.so.1")
    data = bytearray(lib.read_bytes())
    struct.pack_into("<H", data, 18, 243)
    lib.write_bytes(bytes(data))
    with pytest.raises(ApplyError, match="not an ELF library of a known machine"):
        write_ldcache(fd, [f"/{LIBDIR}/libcuda.so.535.261.03"])
    assert not (root / "etc/ld.so.cache").exists()


@pytest.mark.parametrize("path", [f"/{LIBDIR}/..", f"/{LIBDIR}/.", f"/{LIBDIR}/", "lib.so"])
def test_known_entry_must_name_a_file(rootfs: tuple[Path, int], path: str) -> None:
    _, fd = rootfs
    with pytest.raises(ApplyError, match="not a library path"):
        write_ldcache(fd, [path], known={path: 0x0303})


def test_known_entry_is_entered_without_reading(rootfs: tuple[Path, int]) -> None:
    root, fd = rootfs
    write_ldcache(fd, [f"/{LIBDIR}/libcuda.so.1"], known={f"/{LIBDIR}/libcuda.so.1": 0x0303})
    assert ldconfig_p(root / "etc/ld.so.cache") == [
        f"libcuda.so.1 (libc6,x86-64) => /{LIBDIR}/libcuda.so.1"
    ]


def test_implausibly_large_cache_is_refused(rootfs: tuple[Path, int]) -> None:
    """A sparse ``/etc/ld.so.cache`` one byte over the bound: refused with its size."""
    root, fd = rootfs
    with open(root / "etc/ld.so.cache", "wb") as f:
        f.truncate(MAX_LDCACHE_BYTES + 1)
    with pytest.raises(ApplyError) as err:
        write_ldcache(fd, [f"/{LIBDIR}/libcuda.so.1"], known={f"/{LIBDIR}/libcuda.so.1": 0x0303})
    assert err.value.message == "the container's ld.so.cache is implausibly large"
    assert err.value.value == MAX_LDCACHE_BYTES + 1
    assert os.path.getsize(root / "etc/ld.so.cache") == MAX_LDCACHE_BYTES + 1


def test_damaged_hwcaps_entry_of_the_image_is_dropped(rootfs: tuple[Path, int]) -> None:
    """The image's cache, written by ``ldconfig`` with a glibc-hwcaps entry, then damaged
    (its glibc-hwcaps section misaligned: the entry keeps the extension bit but names no
    subdirectory, which no cache writer can write back). The new cache keeps the image's
    plain entry, adds the driver's library and drops the damaged one."""
    root, fd = rootfs
    hw = root / "lib/glibc-hwcaps/x86-64-v3"
    gcc_library(root / "lib/libgpu.so.1.0", "libgpu.so.1")
    hw.mkdir(parents=True)
    shutil.copy(root / "lib/libgpu.so.1.0", hw)
    (root / "etc/ld.so.conf").write_text("/lib\n")
    subprocess.run([_ldconfig(), "-r", str(root), "-C", "/etc/ld.so.cache"], check=True)
    data = bytearray((root / "etc/ld.so.cache").read_bytes())
    (ext,) = struct.unpack_from("<I", data, 32)
    (count,) = struct.unpack_from("<I", data, ext + 4)
    for at in range(ext + 8, ext + 8 + 16 * count, 16):
        tag, flags, offset, length = struct.unpack_from("<IIII", data, at)
        if tag == 1:
            struct.pack_into("<IIII", data, at, tag, flags, offset + 2, length)
    (root / "etc/ld.so.cache").write_bytes(bytes(data))
    damaged = [e for e in ldcache.parse(bytes(data)) if e.hwcap]
    assert [(e.hwcap, e.hwcaps_subdir) for e in damaged] == [(1 << 62, None)]
    write_ldcache(fd, [f"/{LIBDIR}/libcuda.so.1"], known={f"/{LIBDIR}/libcuda.so.1": 0x0303})
    assert ldconfig_p(root / "etc/ld.so.cache") == [
        "libgpu.so.1 (libc6,x86-64) => /lib/libgpu.so.1",
        f"libcuda.so.1 (libc6,x86-64) => /{LIBDIR}/libcuda.so.1",
    ]


def test_include_pattern_whose_ends_overlap_matches_as_fnmatch(rootfs: tuple[Path, int]) -> None:
    """``include /etc/ld.so.conf.d/x.conf*.conf``: ``x.conf`` starts with the pattern's head
    and ends with its tail but is too short for both (``fnmatch`` says no); the file
    ``x.conf.local.conf`` matches."""
    import fnmatch

    from ocihook.appliers.live.libraries import ld_so_conf_dirs

    root, fd = rootfs
    (root / "etc/ld.so.conf.d").mkdir()
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/x.conf*.conf\n")
    (root / "etc/ld.so.conf.d/x.conf").write_text("/opt/short\n")
    (root / "etc/ld.so.conf.d/x.conf.local.conf").write_text("/opt/long\n")
    assert not fnmatch.fnmatchcase("x.conf", "x.conf*.conf")
    assert ld_so_conf_dirs(fd) == {"/opt/long"}
