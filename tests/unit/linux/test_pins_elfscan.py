"""Pins of the start path's ELF reader (ocihook.linux.elfscan) on real libraries built by
``gcc`` and then damaged one field at a time — every bound it keeps, at the bound: the
dynamic section ends at its first ``DT_NULL``; a string table address at the end of a
segment is in no segment; a name offset equal to ``DT_STRSZ`` names nothing; a GNU ABI note
needs 16 descriptor bytes; at most 512 program headers of at least the class's size; a
section-name table index must be a section; the CUDA note must be ``SHT_NOTE``. ``readelf``
(binutils) is the oracle where it reads the same field. The byte order of ``e_machine``
follows ``EI_DATA`` (big-endian AArch64 files are made by :mod:`ocihook.sim.elfwrite`).
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ocihook.linux import elfscan
from ocihook.sim import elfwrite


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"needs {tool}")
    return path


def gcc_library(tmp_path: Path, soname: str = "libpin.so.1", note: bool = False) -> Path:
    """A real x86-64 shared object with ``DT_SONAME`` ``soname``; with ``note``, also a ``.note.cuda.fwd_compatibility`` SHT_NOTE section."""
    gcc = _need("gcc")
    src = tmp_path / "lib.c"
    src.write_text("int pin(void) { return 1; }\n")
    out = tmp_path / "libpin.so"
    subprocess.run(
        [gcc, "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(src)],
        check=True,
    )
    if note:
        desc = b'{"Format": 1, "CUDA Version": "12.9", "Driver": [535, 570]}'
        blob = tmp_path / "note.bin"
        blob.write_bytes(elfwrite.pack_note(b"NVIDIA Corporation", 1, desc))
        subprocess.run(
            [
                _need("objcopy"),
                "--add-section",
                f".note.cuda.fwd_compatibility={blob}",
                "--set-section-flags",
                ".note.cuda.fwd_compatibility=noload,readonly",
                str(out),
            ],
            check=True,
        )
    return out


def _elf(path: Path) -> Any:
    from elftools.elf.elffile import ELFFile

    return ELFFile(io.BytesIO(path.read_bytes()))


def _dynamic(path: Path) -> tuple[int, list[tuple[int, int]]]:
    """(file offset of the dynamic section, its (tag, value) entries up to DT_NULL)."""
    data = path.read_bytes()
    elf = _elf(path)
    seg = next(s for s in elf.iter_segments() if s["p_type"] == "PT_DYNAMIC")
    at = seg["p_offset"]
    entries = []
    for off in range(at, at + seg["p_filesz"], 16):
        tag, value = struct.unpack_from("<qQ", data, off)
        entries.append((tag, value))
        if tag == 0:
            break
    return at, entries


def _set_dynamic(path: Path, tag: int, value: int) -> None:
    at, entries = _dynamic(path)
    data = bytearray(path.read_bytes())
    index = next(i for i, (t, _) in enumerate(entries) if t == tag)
    struct.pack_into("<qQ", data, at + 16 * index, tag, value)
    path.write_bytes(bytes(data))


def readelf_soname(path: Path) -> str | None:
    out = subprocess.run(
        [_need("readelf"), "-d", "-W", str(path)], capture_output=True, text=True
    ).stdout
    for line in out.splitlines():
        if "(SONAME)" in line:
            return line.split("[", 1)[1].rsplit("]", 1)[0]
    return None


def test_dynamic_section_ends_at_the_first_null(tmp_path: Path) -> None:
    """The first entry made ``DT_NULL``: readelf shows no soname, and the reader finds no
    dynamic section worth reading (its string table entry is past the end)."""
    lib = gcc_library(tmp_path)
    assert elfscan.dynamic_names(str(lib)) == ("libpin.so.1", ())
    at, entries = _dynamic(lib)
    assert entries[0][0] != 0
    data = bytearray(lib.read_bytes())
    struct.pack_into("<qQ", data, at, 0, 0)
    lib.write_bytes(bytes(data))
    assert readelf_soname(lib) is None
    assert elfscan.dynamic_names(str(lib)) is None


def test_string_table_at_the_end_of_a_segment_is_in_none(tmp_path: Path) -> None:
    """``DT_STRTAB`` set to the first byte past a PT_LOAD's file image (no other segment
    starts there): it maps to no file offset, so there are no names."""
    lib = gcc_library(tmp_path)
    loads = [s for s in _elf(lib).iter_segments() if s["p_type"] == "PT_LOAD"]
    starts = {s["p_vaddr"] for s in loads}
    end = next(
        s["p_vaddr"] + s["p_filesz"] for s in loads if s["p_vaddr"] + s["p_filesz"] not in starts
    )
    _set_dynamic(lib, 5, end)  # DT_STRTAB
    assert elfscan.dynamic_names(str(lib)) is None


def test_name_offset_equal_to_the_table_size_names_nothing(tmp_path: Path) -> None:
    lib = gcc_library(tmp_path)
    _, entries = _dynamic(lib)
    strsz = dict(entries)[10]  # DT_STRSZ
    _set_dynamic(lib, 14, strsz)  # DT_SONAME
    assert elfscan.dynamic_names(str(lib)) == (None, ())
    _set_dynamic(lib, 14, strsz - 1)  # the table's last byte, its NUL: an empty name
    assert elfscan.dynamic_names(str(lib)) == ("", ())


def test_abi_note_needs_sixteen_descriptor_bytes(tmp_path: Path) -> None:
    """A GNU ABI note (``NT_GNU_ABI_TAG``) whose ``descsz`` is 12: no tag; 16: the tag."""
    data = bytearray(elfwrite.make_shared_object("libnvidia-tls.so.1", abi_tag=(2, 3, 99)))
    path = tmp_path / "tls.so"
    path.write_bytes(bytes(data))
    assert elfscan.abi_tag(str(path)) == (0, 2, 3, 99)
    note = _elf(path)
    seg = next(s for s in note.iter_segments() if s["p_type"] == "PT_NOTE")
    namesz, descsz, ntype = struct.unpack_from("<III", data, seg["p_offset"])
    assert (namesz, descsz, ntype) == (4, 16, 1)
    struct.pack_into("<III", data, seg["p_offset"], namesz, 12, ntype)
    path.write_bytes(bytes(data))
    assert elfscan.abi_tag(str(path)) is None


@pytest.mark.parametrize(("phnum", "readable"), [(512, True), (513, False)])
def test_at_most_512_program_headers(tmp_path: Path, phnum: int, readable: bool) -> None:
    """The program headers moved to the end of the file and padded with empty entries to
    ``phnum``: 512 are read, 513 are refused even though the file holds them."""
    data = bytearray(elfwrite.make_shared_object("libpin.so.1"))
    (phoff,) = struct.unpack_from("<Q", data, 32)
    size, count = struct.unpack_from("<HH", data, 54)
    table = bytes(data[phoff : phoff + size * count])
    data += bytes(-len(data) % 8)
    moved = len(data)
    data += table + bytes(size * (phnum - count))
    struct.pack_into("<Q", data, 32, moved)
    struct.pack_into("<H", data, 56, phnum)
    path = tmp_path / "lib.so"
    path.write_bytes(bytes(data))
    assert elfscan.dynamic_names(str(path)) == (("libpin.so.1", ()) if readable else None)


def test_program_header_entries_smaller_than_the_class_are_refused(tmp_path: Path) -> None:
    data = bytearray(elfwrite.make_shared_object("libpin.so.1"))
    path = tmp_path / "lib.so"
    path.write_bytes(bytes(data))
    assert elfscan.dynamic_names(str(path)) == ("libpin.so.1", ())
    struct.pack_into("<H", data, 54, 32)  # e_phentsize below Elf64_Phdr's 56
    path.write_bytes(bytes(data))
    assert elfscan.dynamic_names(str(path)) is None


def test_section_name_index_must_be_a_section(tmp_path: Path) -> None:
    lib = gcc_library(tmp_path, note=True)
    note = elfscan.cuda_compat_note(str(lib))
    assert note is not None and note.drivers == (535, 570)
    data = bytearray(lib.read_bytes())
    (shnum,) = struct.unpack_from("<H", data, 60)
    struct.pack_into("<H", data, 62, shnum)  # e_shstrndx: one past the last section
    lib.write_bytes(bytes(data))
    assert elfscan.cuda_compat_note(str(lib)) is None


def test_cuda_note_section_must_be_sht_note(tmp_path: Path) -> None:
    lib = gcc_library(tmp_path, note=True)
    section = _elf(lib).get_section_by_name(".note.cuda.fwd_compatibility")
    assert section["sh_type"] == "SHT_NOTE"
    data = bytearray(lib.read_bytes())
    (shoff,) = struct.unpack_from("<Q", data, 40)
    index = next(i for i, s in enumerate(_elf(lib).iter_sections()) if s.name == section.name)
    struct.pack_into("<I", data, shoff + 64 * index + 4, 1)  # SHT_PROGBITS
    lib.write_bytes(bytes(data))
    assert elfscan.cuda_compat_note(str(lib)) is None


@pytest.mark.parametrize(
    ("machine", "endian", "want"),
    [("aarch64", "big", (64, 183)), ("aarch64", "little", (64, 183)), ("arm", "big", (32, 40))],
)
def test_machine_is_read_in_the_file_byte_order(
    tmp_path: Path, machine: str, endian: str, want: tuple[int, int]
) -> None:
    path = tmp_path / "lib.so"
    elf_class = want[0]
    path.write_bytes(
        elfwrite.make_shared_object(
            "libx.so.1", elf_class=elf_class, machine=machine, endian=endian
        )
    )
    assert elfscan.identify(str(path)) == want
