"""Pins of the ``ld.so.cache`` parser's bounds, on caches written by the real ``ldconfig``:
an entry count one past what the file holds is an error, exactly at the bound; a
glibc-hwcaps section that is misaligned (offset or length not a multiple of 4) is ignored
as glibc's ``cache_extension_verify`` ignores it — ``ldconfig -p`` is the oracle.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ocihook.core.errors import LdCacheError
from ocihook.linux import ldcache

HWCAP_EXTENSION = 1 << 62


def _ldconfig() -> str:
    ldconfig = shutil.which("ldconfig") or "/usr/sbin/ldconfig"
    if shutil.which("gcc") is None or not os.path.exists(ldconfig):
        pytest.skip("needs gcc and ldconfig (the real ldconfig is the oracle here)")
    return ldconfig


def real_cache(root: Path, fmt: str = "new") -> bytes:
    """The bytes of a cache ``ldconfig -c <fmt>`` writes for a tree of two real libraries,
    one of them also in ``glibc-hwcaps/x86-64-v3``."""
    ldconfig = _ldconfig()
    hw = root / "lib/glibc-hwcaps/x86-64-v3"
    hw.mkdir(parents=True)
    (root / "etc").mkdir()
    src = root / "a.c"
    src.write_text("int f(void) { return 1; }\n")
    for name, soname in (("libgpu.so.1.0", "libgpu.so.1"), ("libother.so.2.1", "libother.so.2")):
        out = str(root / "lib" / name)
        subprocess.run(
            ["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", out, str(src)], check=True
        )
    shutil.copy(root / "lib/libgpu.so.1.0", hw)
    (root / "etc/ld.so.conf").write_text("/lib\n")
    subprocess.run([ldconfig, "-c", fmt, "-r", str(root), "-C", "/etc/ld.so.cache"], check=True)
    return (root / "etc/ld.so.cache").read_bytes()


def ldconfig_p(path: Path) -> list[str]:
    """The entry lines ``ldconfig -p`` prints of the cache at ``path``."""
    out = subprocess.run(
        [_ldconfig(), "-p", "-C", str(path)], check=True, capture_output=True, text=True
    )
    return [line.strip() for line in out.stdout.splitlines() if line.startswith("\t")]


@pytest.fixture(scope="module")
def new_cache(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return real_cache(tmp_path_factory.mktemp("new"))


@pytest.fixture(scope="module")
def old_cache(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return real_cache(tmp_path_factory.mktemp("old"), "old")


def _with_new_count(data: bytes, pad: int, nlibs: int) -> bytes:
    out = bytearray(data + bytes(pad))
    struct.pack_into("<I", out, 20, nlibs)
    return bytes(out)


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pad=st.integers(0, 47))
def test_new_format_entry_count_bound_is_exact(new_cache: bytes, pad: int) -> None:
    """Header 48 bytes, entries 24: a count of ``(size - 48) // 24 + 1`` is refused at the
    count's offset (20); ``(size - 48) // 24`` passes the bound (the entries it then reads
    are strings of the file, so the parse may still fail, but never on the count)."""
    size = len(new_cache) + pad
    room = (size - 48) // 24
    with pytest.raises(LdCacheError) as err:
        ldcache.parse(_with_new_count(new_cache, pad, room + 1))
    assert err.value.offset == 20
    assert err.value.message.startswith(f"entry count {room + 1} does not fit in the file")
    try:
        ldcache.parse(_with_new_count(new_cache, pad, room))
    except LdCacheError as e:
        assert "entry count" not in e.message and e.offset != 20


def test_new_format_count_that_fits_exactly_parses(new_cache: bytes) -> None:
    """A file that ends with its last entry (no strings after it: the names are read from
    the header) parses; one entry more is refused."""
    header = bytearray(new_cache[:48])
    struct.pack_into("<I", header, 20, 2)
    struct.pack_into("<I", header, 32, 0)  # no extension directory
    entry = struct.pack("<iIIIQ", 0x0303, 0, 0, 0, 0)  # both names: the magic, "glibc-..."
    entries = ldcache.parse(bytes(header) + entry * 2)
    assert [(e.soname, e.flags) for e in entries] == [("glibc-ld.so.cache1.1\x02", 0x0303)] * 2
    struct.pack_into("<I", header, 20, 3)
    with pytest.raises(LdCacheError, match="entry count 3 does not fit"):
        ldcache.parse(bytes(header) + entry * 2)


@settings(max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pad=st.integers(0, 11))
def test_old_format_entry_count_bound_is_exact(old_cache: bytes, pad: int) -> None:
    """Old header 16 bytes, entries 12: ``(size - 16) // 12 + 1`` is refused at offset 12."""
    assert old_cache.startswith(b"ld.so-1.7.0\0")
    data = bytearray(old_cache + bytes(pad))
    room = (len(data) - 16) // 12
    struct.pack_into("<I", data, 12, room + 1)
    with pytest.raises(LdCacheError) as err:
        ldcache.parse(bytes(data))
    assert err.value.offset == 12
    assert err.value.message.startswith(f"old-format entry count {room + 1} does not fit")
    struct.pack_into("<I", data, 12, room)
    try:
        ldcache.parse(bytes(data))
    except LdCacheError as e:
        assert "entry count" not in e.message


def _hwcaps_section(data: bytes) -> tuple[int, int, int]:
    """(file offset of the glibc-hwcaps section record, its offset, its length)."""
    (ext,) = struct.unpack_from("<I", data, 32)
    magic, count = struct.unpack_from("<II", data, ext)
    assert magic == 0xEAA42174
    for i in range(count):
        at = ext + 8 + 16 * i
        tag, _flags, offset, length = struct.unpack_from("<IIII", data, at)
        if tag == 1:
            return at, offset, length
    raise AssertionError("ldconfig wrote no glibc-hwcaps section")


@pytest.mark.parametrize(("shift", "length"), [(2, 4), (1, 4), (0, 6), (0, 0)])
def test_misaligned_or_empty_glibc_hwcaps_section_is_ignored(
    new_cache: bytes, tmp_path: Path, shift: int, length: int
) -> None:
    """The section is moved to a copy of its name-offset array appended to the file, at an
    offset ``shift`` past a multiple of 4 with ``length`` bytes: ``ldconfig -p`` then prints
    the raw hwcap (``0x4000000000000000``) instead of the subdirectory, and so does the
    parser (no subdirectory, the extension bit kept)."""
    at, offset, _ = _hwcaps_section(new_cache)
    (name_offset,) = struct.unpack_from("<I", new_cache, offset)
    aligned = bytearray(new_cache + bytes(-len(new_cache) % 4))
    moved = len(aligned) + shift
    aligned += bytes(shift) + struct.pack("<I", name_offset) + bytes(4)
    struct.pack_into("<I", aligned, at + 8, moved)
    struct.pack_into("<I", aligned, at + 12, length)
    path = tmp_path / "moved.cache"
    path.write_bytes(bytes(aligned))
    printed = [line for line in ldconfig_p(path) if line.startswith("libgpu.so.1 ")]
    gpu = [e for e in ldcache.parse(bytes(aligned)) if e.soname == "libgpu.so.1"]
    assert [(e.hwcaps_subdir, e.hwcap) for e in gpu] == [(None, HWCAP_EXTENSION), (None, 0)]
    assert printed[0].startswith("libgpu.so.1 (libc6,x86-64, hwcap: 0x4000000000000000) => ")


def test_aligned_moved_glibc_hwcaps_section_is_read(new_cache: bytes, tmp_path: Path) -> None:
    """The counterpart: the same move to an aligned offset keeps the subdirectory name."""
    at, offset, _ = _hwcaps_section(new_cache)
    (name_offset,) = struct.unpack_from("<I", new_cache, offset)
    aligned = bytearray(new_cache + bytes(-len(new_cache) % 4))
    moved = len(aligned)
    aligned += struct.pack("<I", name_offset)
    struct.pack_into("<I", aligned, at + 8, moved)
    struct.pack_into("<I", aligned, at + 12, 4)
    path = tmp_path / "moved.cache"
    path.write_bytes(bytes(aligned))
    gpu = [e for e in ldcache.parse(bytes(aligned)) if e.soname == "libgpu.so.1"]
    assert [(e.hwcaps_subdir, e.hwcap) for e in gpu] == [("x86-64-v3", HWCAP_EXTENSION), (None, 0)]
    printed = [line for line in ldconfig_p(path) if line.startswith("libgpu.so.1 ")]
    assert printed[0].startswith('libgpu.so.1 (libc6,x86-64, hwcap: "x86-64-v3") => ')


def _ldconfig_run(tmp_path: Path, data: bytes) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "edited.cache"
    path.write_bytes(data)
    return subprocess.run([_ldconfig(), "-p", "-C", str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("over", [0, 1])
def test_extension_section_bound_is_exact(new_cache: bytes, tmp_path: Path, over: int) -> None:
    """The first extension section (the generator string) made to end exactly at the end
    of the file is read; one byte further, the file is malformed for ``ldconfig -p``
    ("Malformed extension data") and for the parser, at the section's record."""
    (ext,) = struct.unpack_from("<I", new_cache, 32)
    record = ext + 8
    tag, flags, offset, _ = struct.unpack_from("<IIII", new_cache, record)
    data = bytearray(new_cache)
    struct.pack_into("<IIII", data, record, tag, flags, offset, len(data) - offset + over)
    run = _ldconfig_run(tmp_path, bytes(data))
    if over:
        assert run.returncode != 0 and "Malformed extension data" in run.stderr
        with pytest.raises(LdCacheError) as err:
            ldcache.parse(bytes(data))
        assert err.value.offset == record
        assert err.value.message.startswith("extension section 0 extends past the end")
    else:
        assert run.returncode == 0
        gpu = [e for e in ldcache.parse(bytes(data)) if e.soname == "libgpu.so.1"]
        assert [e.hwcaps_subdir for e in gpu] == ["x86-64-v3", None]


def test_hwcaps_index_one_past_the_names_has_no_subdirectory(
    new_cache: bytes, tmp_path: Path
) -> None:
    """An entry's glibc-hwcaps index equal to the number of names: ``ldconfig -p`` prints
    the raw hwcap (``0x4000000000000001``), the parser gives no subdirectory and keeps it."""
    data = bytearray(new_cache)
    entries = ldcache.parse(new_cache)
    at = next(48 + 24 * i for i, e in enumerate(entries) if e.hwcaps_subdir is not None)
    flags, key, value, osversion, hwcap = struct.unpack_from("<iIIIQ", data, at)
    _, _, length = _hwcaps_section(new_cache)
    struct.pack_into("<iIIIQ", data, at, flags, key, value, osversion, hwcap | length // 4)
    run = _ldconfig_run(tmp_path, bytes(data))
    assert "libgpu.so.1 (libc6,x86-64, hwcap: 0x4000000000000001) => " in run.stdout
    gpu = [e for e in ldcache.parse(bytes(data)) if e.soname == "libgpu.so.1"]
    assert [(e.hwcaps_subdir, e.hwcap) for e in gpu] == [(None, HWCAP_EXTENSION | 1), (None, 0)]


def test_hwcaps_name_at_the_end_of_the_file_is_none(new_cache: bytes, tmp_path: Path) -> None:
    """A subdirectory name offset equal to the file size names nothing (``ldconfig -p``
    prints the raw hwcap); one inside the file is read."""
    _, offset, _ = _hwcaps_section(new_cache)
    data = bytearray(new_cache)
    struct.pack_into("<I", data, offset, len(data))
    run = _ldconfig_run(tmp_path, bytes(data))
    assert "libgpu.so.1 (libc6,x86-64, hwcap: 0x4000000000000000) => " in run.stdout
    gpu = [e for e in ldcache.parse(bytes(data)) if e.soname == "libgpu.so.1"]
    assert [(e.hwcaps_subdir, e.hwcap) for e in gpu] == [(None, HWCAP_EXTENSION), (None, 0)]
