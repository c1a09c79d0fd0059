"""Tests for ocihook.sim.elfwrite: the files it writes must satisfy pyelftools, readelf and ldconfig.

The ldconfig tests run the host's real ``ldconfig`` against a throw-away cache (``-C``), with
``-i`` (no auxiliary cache in /var/cache/ldconfig) and ``-X`` (no symbolic links), so they
change nothing outside the temporary directory. What ldconfig accepts depends on the host
architecture: an x86-64 glibc ldconfig (``sysdeps/unix/sysv/linux/x86/readelflib.c``) knows
only EM_X86_64 and EM_386 and reads ``e_type`` in host byte order, so the expectations below
are recorded for x86-64 hosts.
"""

from __future__ import annotations

import io
import os
import platform
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest
from elftools.elf.dynamic import DynamicSection, DynamicSegment
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, StringTableSection
from hypothesis import given, settings
from hypothesis import strategies as st

from ocihook.sim.elfwrite import MACHINES, make_executable, make_shared_object

# (elf_class, machine, endian) for every supported combination.
COMBOS = [(m.elf_class, name, e) for name, m in MACHINES.items() for e in m.endians]

# machine -> (pyelftools e_machine, readelf "Machine:", readelf "Flags:", e_flags; little-endian)
MACHINE_FACTS = {
    "x86_64": ("EM_X86_64", "Advanced Micro Devices X86-64", "0x0", 0),
    "i386": ("EM_386", "Intel 80386", "0x0", 0),
    "aarch64": ("EM_AARCH64", "AArch64", "0x0", 0),
    "arm": ("EM_ARM", "ARM", "0x5000400, Version5 EABI, hard-float ABI", 0x05000400),
    "ppc64le": ("EM_PPC64", "PowerPC64", "0x2, abiv2", 2),
}

NEEDED = ("libm.so.6", "libc.so.6", "libdl.so.2")
TLS_ABI = (2, 3, 99)


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin:/usr/bin:/bin")
    if path is None:
        print(f"{name} not found: skipping")  # shown with pytest -s / in the skip reason
        pytest.skip(f"{name} is not installed")
    return path


def _elf(data: bytes) -> ELFFile:
    return ELFFile(io.BytesIO(data))


def _dyn_tags(dyn: DynamicSection | DynamicSegment) -> tuple[str | None, list[str]]:
    soname = None
    needed = []
    tag: Any
    for tag in dyn.iter_tags():
        if tag.entry.d_tag == "DT_SONAME":
            assert soname is None, "two DT_SONAME entries"
            soname = tag.soname
        elif tag.entry.d_tag == "DT_NEEDED":
            needed.append(tag.needed)
    return soname, needed


def _check_with_pyelftools(
    data: bytes,
    *,
    soname: str | None,
    elf_class: int,
    machine: str,
    endian: str,
    needed: tuple[str, ...] | list[str],
    abi_tag: tuple[int, int, int] | None,
    e_type: str = "ET_DYN",
) -> None:
    """Read ``data`` back with pyelftools and check every field and the layout."""
    elf = _elf(data)
    assert elf.elfclass == elf_class
    assert elf.little_endian == (endian == "little")
    assert elf["e_type"] == e_type
    assert elf["e_machine"] == MACHINE_FACTS[machine][0]
    assert elf["e_ident"]["EI_OSABI"] == "ELFOSABI_SYSV"
    big_flags = 0x00800000 if (machine == "arm" and endian == "big") else 0
    assert elf["e_flags"] == MACHINE_FACTS[machine][3] | big_flags

    # The dynamic section and the PT_DYNAMIC segment (found through DT_STRTAB's address)
    # give the same answer.
    dynamic = elf.get_section_by_name(".dynamic")
    assert isinstance(dynamic, DynamicSection)
    segments: dict[str, Any] = {seg["p_type"]: seg for seg in elf.iter_segments()}
    assert _dyn_tags(dynamic) == (soname, list(needed))
    assert _dyn_tags(segments["PT_DYNAMIC"]) == (soname, list(needed))

    # Layout: one PT_LOAD over the whole file at address 0; PT_DYNAMIC and PT_NOTE match
    # their sections; every section is inside the file and aligned.
    expected_types = ["PT_LOAD", "PT_DYNAMIC"] + (["PT_NOTE"] if abi_tag else [])
    assert [seg["p_type"] for seg in elf.iter_segments()] == expected_types
    load = segments["PT_LOAD"]
    assert (load["p_offset"], load["p_vaddr"], load["p_filesz"]) == (0, 0, len(data))
    assert load["p_memsz"] == load["p_filesz"]
    for sec in elf.iter_sections():
        assert sec["sh_offset"] + sec["sh_size"] <= len(data)
        if sec["sh_addralign"] > 1:
            assert sec["sh_offset"] % sec["sh_addralign"] == 0
        if sec["sh_flags"] & 2:  # SHF_ALLOC: address == offset
            assert sec["sh_addr"] == sec["sh_offset"]
    names = [sec.name for sec in elf.iter_sections()]
    assert names == ["", ".dynstr", ".dynamic"] + ([".note.ABI-tag"] if abi_tag else []) + [
        ".shstrtab"
    ]
    dynstr = elf.get_section_by_name(".dynstr")
    assert isinstance(dynstr, StringTableSection)
    values = {tag.entry.d_tag: tag.entry.d_val for tag in dynamic.iter_tags()}
    assert values["DT_STRTAB"] == dynstr["sh_addr"]
    assert values["DT_STRSZ"] == dynstr["sh_size"]
    assert dynamic["sh_link"] == names.index(".dynstr")
    pt_dyn = segments["PT_DYNAMIC"]
    assert (pt_dyn["p_offset"], pt_dyn["p_filesz"]) == (dynamic["sh_offset"], dynamic["sh_size"])

    note_sec = elf.get_section_by_name(".note.ABI-tag")
    if abi_tag is None:
        assert note_sec is None
        return
    assert isinstance(note_sec, NoteSection)
    pt_note = segments["PT_NOTE"]
    assert (pt_note["p_offset"], pt_note["p_filesz"]) == (note_sec["sh_offset"], 32)
    for notes in (list(note_sec.iter_notes()), list(pt_note.iter_notes())):
        assert len(notes) == 1
        note = notes[0]
        assert (note["n_name"], note["n_type"]) == ("GNU", "NT_GNU_ABI_TAG")
        desc = note["n_desc"]
        assert desc["abi_os"] == "ELF_NOTE_OS_LINUX"
        assert (desc["abi_major"], desc["abi_minor"], desc["abi_tiny"]) == abi_tag


# -- pyelftools ---------------------------------------------------------------------------


def test_supported_combinations() -> None:
    assert sorted(COMBOS) == sorted(
        [
            (64, "x86_64", "little"),
            (32, "i386", "little"),
            (64, "aarch64", "little"),
            (64, "aarch64", "big"),
            (32, "arm", "little"),
            (32, "arm", "big"),
            (64, "ppc64le", "little"),
        ]
    )


@pytest.mark.parametrize(("elf_class", "machine", "endian"), COMBOS)
@pytest.mark.parametrize("abi_tag", [None, TLS_ABI])
def test_pyelftools_reads_back(
    elf_class: int, machine: str, endian: str, abi_tag: tuple[int, int, int] | None
) -> None:
    opts: dict[str, Any] = {"elf_class": elf_class, "machine": machine, "endian": endian}
    data = make_shared_object("libcuda.so.1", needed=NEEDED, abi_tag=abi_tag, **opts)
    assert len(data) < 1024
    _check_with_pyelftools(data, soname="libcuda.so.1", needed=NEEDED, abi_tag=abi_tag, **opts)


@pytest.mark.parametrize(("elf_class", "machine", "endian"), COMBOS)
def test_no_soname_no_needed(elf_class: int, machine: str, endian: str) -> None:
    opts: dict[str, Any] = {"elf_class": elf_class, "machine": machine, "endian": endian}
    data = make_shared_object(None, **opts)
    _check_with_pyelftools(data, soname=None, needed=(), abi_tag=None, **opts)


def test_defaults_are_x86_64_little_endian() -> None:
    elf = _elf(make_shared_object("libnvidia-ml.so.1"))
    assert (elf.elfclass, elf.little_endian, elf["e_machine"]) == (64, True, "EM_X86_64")


def test_repeated_names_are_stored_once() -> None:
    data = make_shared_object("libfoo.so.1", needed=["libfoo.so.1", "libc.so.6", "libc.so.6"])
    dynstr = _elf(data).get_section_by_name(".dynstr")
    assert isinstance(dynstr, StringTableSection)
    assert dynstr.data() == b"\x00libfoo.so.1\x00libc.so.6\x00"
    _check_with_pyelftools(
        data,
        soname="libfoo.so.1",
        needed=["libfoo.so.1", "libc.so.6", "libc.so.6"],
        abi_tag=None,
        elf_class=64,
        machine="x86_64",
        endian="little",
    )


@pytest.mark.parametrize(("elf_class", "machine", "endian"), COMBOS)
def test_padding_grows_the_file_exactly(elf_class: int, machine: str, endian: str) -> None:
    opts: dict[str, Any] = {"elf_class": elf_class, "machine": machine, "endian": endian}
    base = make_shared_object("libcuda.so.1", **opts)
    for padding in (1, 3, 4096, 1 << 20):
        data = make_shared_object("libcuda.so.1", padding=padding, **opts)
        assert len(data) == len(base) + padding
        assert data[len(base) :] == bytes(padding)
        _check_with_pyelftools(data, soname="libcuda.so.1", needed=(), abi_tag=None, **opts)


def test_executable() -> None:
    data = make_executable(needed=["libc.so.6"])
    _check_with_pyelftools(
        data,
        soname=None,
        needed=["libc.so.6"],
        abi_tag=None,
        e_type="ET_EXEC",
        elf_class=64,
        machine="x86_64",
        endian="little",
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"machine": "sparc"}, "unknown machine"),
        ({"machine": "x86_64", "elf_class": 32}, "elf_class 64"),
        ({"machine": "i386", "elf_class": 64}, "elf_class 32"),
        ({"machine": "arm", "elf_class": 64}, "elf_class 32"),
        ({"machine": "aarch64", "elf_class": 32}, "elf_class 64"),
        ({"machine": "ppc64le", "elf_class": 32}, "elf_class 64"),
        ({"elf_class": 16}, "elf_class 64"),
        ({"machine": "x86_64", "endian": "big"}, "endian"),
        ({"machine": "ppc64le", "endian": "big"}, "endian"),
        ({"machine": "aarch64", "endian": "middle"}, "endian"),
        ({"soname": ""}, "soname"),
        ({"soname": "lib\x00x.so"}, "soname"),
        ({"needed": ["libc.so.6", ""]}, "needed"),
        ({"needed": "libc.so.6"}, "needed"),
        ({"abi_tag": (2, 3)}, "abi_tag"),
        ({"abi_tag": (2, 3, -1)}, "abi_tag"),
        ({"abi_tag": (2, 3, 2**32)}, "abi_tag"),
        ({"padding": -1}, "padding"),
        ({"machine": "i386", "elf_class": 32, "padding": 2**32}, "does not fit"),
    ],
)
def test_bad_arguments(kwargs: dict[str, Any], message: str) -> None:
    soname = kwargs.pop("soname", "libx.so.1")
    with pytest.raises(ValueError, match=message):
        make_shared_object(soname, **kwargs)


_names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x00"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(
    combo=st.sampled_from(COMBOS),
    soname=st.none() | _names,
    needed=st.lists(_names, max_size=8),
    abi_tag=st.none() | st.tuples(*[st.integers(0, 2**32 - 1)] * 3),
    padding=st.integers(0, 100),
)
def test_round_trip_property(
    combo: tuple[int, str, str],
    soname: str | None,
    needed: list[str],
    abi_tag: tuple[int, int, int] | None,
    padding: int,
) -> None:
    elf_class, machine, endian = combo
    opts: dict[str, Any] = {"elf_class": elf_class, "machine": machine, "endian": endian}
    data = make_shared_object(soname, needed=needed, abi_tag=abi_tag, padding=padding, **opts)
    _check_with_pyelftools(data, soname=soname, needed=needed, abi_tag=abi_tag, **opts)


# -- readelf ------------------------------------------------------------------------------


def _readelf(path: Path) -> str:
    result = subprocess.run(
        [_tool("readelf"), "-W", "-h", "-l", "-S", "-d", "-n", str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LC_ALL": "C"},
    )
    assert result.stderr == "", result.stderr  # readelf warns on stderr about bad layouts
    return result.stdout


def _field(text: str, name: str) -> str:
    match = re.search(rf"^\s*{re.escape(name)}:\s+(.*?)\s*$", text, re.M)
    assert match, f"{name} missing in readelf output"
    return match.group(1)


@pytest.mark.parametrize(("elf_class", "machine", "endian"), COMBOS)
@pytest.mark.parametrize("soname", [None, "libnvidia-tls.so.1"])
def test_readelf_agrees(
    tmp_path: Path, elf_class: int, machine: str, endian: str, soname: str | None
) -> None:
    path = tmp_path / "libnvidia-tls.so.550.127.05"
    path.write_bytes(
        make_shared_object(
            soname,
            elf_class=elf_class,
            machine=machine,
            endian=endian,
            needed=NEEDED,
            abi_tag=TLS_ABI,
        )
    )
    out = _readelf(path)
    assert _field(out, "Class") == f"ELF{elf_class}"
    assert _field(out, "Data") == f"2's complement, {endian} endian"
    assert _field(out, "Type") == "DYN (Shared object file)"
    assert _field(out, "Machine") == MACHINE_FACTS[machine][1]
    flags = _field(out, "Flags")
    if machine == "arm" and endian == "big":
        assert flags == "0x5800400, Version5 EABI, hard-float ABI, BE8"
    else:
        assert flags == MACHINE_FACTS[machine][2]
    assert re.findall(r"\(NEEDED\)\s+Shared library: \[(.*)\]", out) == list(NEEDED)
    assert re.findall(r"\(SONAME\)\s+Library soname: \[(.*)\]", out) == (
        [] if soname is None else [soname]
    )
    assert "NT_GNU_ABI_TAG (ABI version tag)" in out
    assert "OS: Linux, ABI: 2.3.99" in out
    assert re.search(r"^\s*LOAD\s+0x0+ 0x0+ 0x0+ ", out, re.M)
    assert re.search(r"^\s*DYNAMIC\s", out, re.M)
    assert re.search(r"^\s*NOTE\s", out, re.M)


# -- ldconfig -----------------------------------------------------------------------------

_CACHE_MAGIC = b"glibc-ld.so.cache1.1"
_CACHE_HEADER = struct.Struct("<20sII")  # magic+version, nlibs, len_strings (dl-cache.h)
_CACHE_HEADER_SIZE = 48  # struct cache_file_new
_CACHE_ENTRY = struct.Struct("<iIIIQ")  # flags, key, value, osversion_unused, hwcap


def _cache_flags(cache: bytes) -> dict[str, tuple[str, int]]:
    """path -> (soname, flags) from a new-format ld.so.cache (glibc ``dl-cache.h``)."""
    magic, nlibs, _ = _CACHE_HEADER.unpack_from(cache)
    assert magic == _CACHE_MAGIC

    def text(offset: int) -> str:
        return cache[offset : cache.index(b"\x00", offset)].decode()

    result = {}
    for i in range(nlibs):
        at = _CACHE_HEADER_SIZE + i * _CACHE_ENTRY.size
        flags, key, value, _, _ = _CACHE_ENTRY.unpack_from(cache, at)
        result[text(value)] = (text(key), flags)
    return result


def _run_ldconfig(tmp_path: Path, dirs: list[Path]) -> tuple[dict[str, tuple[str, str]], str]:
    """Build a cache over ``dirs``; return path -> (soname, annotation) for them, and stderr.

    ``-v`` because glibc 2.36 reports a file for an unknown machine only when verbose.

    ``ldconfig -p`` prints one line per entry: ``<TAB>SONAME (ANNOTATION) => PATH``.
    """
    ldconfig = _tool("ldconfig")
    conf = tmp_path / "ld.so.conf"
    conf.write_text("".join(f"{d}\n" for d in dirs))
    cache = tmp_path / "ld.so.cache"
    env = {**os.environ, "LC_ALL": "C"}
    built = subprocess.run(
        [ldconfig, "-v", "-i", "-X", "-C", str(cache), "-f", str(conf)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert built.returncode == 0, built.stderr
    printed = subprocess.run(
        [ldconfig, "-p", "-C", str(cache)], capture_output=True, text=True, check=True, env=env
    ).stdout
    entries = {}
    for line in printed.splitlines():
        match = re.match(r"^\s+(\S+) \((.*)\) => (.+)$", line)
        if match and Path(match.group(3)).parent in dirs:
            entries[match.group(3)] = (match.group(1), match.group(2))
    return entries, built.stderr


@pytest.fixture
def x86_64_host() -> None:
    _tool("ldconfig")
    if platform.machine() != "x86_64":
        reason = f"ldconfig expectations are recorded for x86_64 hosts, not {platform.machine()}"
        print(reason)
        pytest.skip(reason)


@pytest.mark.usefixtures("x86_64_host")
def test_ldconfig_classifies_what_an_x86_64_host_knows(tmp_path: Path) -> None:
    lib64, lib32, foreign = tmp_path / "lib64", tmp_path / "lib32", tmp_path / "foreign"
    ver = "550.127.05"
    files = {
        lib64 / f"libcuda.so.{ver}": make_shared_object("libcuda.so.1", needed=NEEDED),
        lib64 / f"libnvidia-ml.so.{ver}": make_shared_object("libnvidia-ml.so.1"),
        lib64 / f"libnvidia-tls.so.{ver}": make_shared_object(
            "libnvidia-tls.so.1", abi_tag=TLS_ABI, padding=5000
        ),
        lib64 / "libnosoname.so.7": make_shared_object(None),
        lib64 / "libexec.so.1": make_executable(needed=["libc.so.6"]),
        lib32 / f"libcuda.so.{ver}": make_shared_object(
            "libcuda.so.1", elf_class=32, machine="i386", needed=NEEDED
        ),
        # No DT_NEEDED on libc.so.6 or libm.so.6, and no PT_INTERP: for a 32-bit file the
        # generic readelflib.c then cannot tell libc6 from plain "ELF".
        lib32 / f"libnvidia-tls.so.{ver}": make_shared_object(
            "libnvidia-tls.so.1", elf_class=32, machine="i386", abi_tag=TLS_ABI
        ),
    }
    for elf_class, machine, endian in COMBOS:
        if machine not in ("x86_64", "i386"):
            name = f"lib{machine}{endian}.so.1"
            files[foreign / f"{name}.0"] = make_shared_object(
                name, elf_class=elf_class, machine=machine, endian=endian, needed=["libc.so.6"]
            )
    for path, data in files.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)

    entries, stderr = _run_ldconfig(tmp_path, [lib64, lib32, foreign])
    flags = _cache_flags((tmp_path / "ld.so.cache").read_bytes())

    # path -> (soname, ldconfig -p annotation, cache flags). With -X no link is made, but the
    # cache still names DIR/SONAME, the link ldconfig would have made; a file without
    # DT_SONAME is entered under its own name. Flags: FLAG_ELF 0x0001, FLAG_ELF_LIBC6
    # 0x0003, FLAG_X8664_LIB64 0x0300 (glibc ldconfig.h).
    expected = {
        f"{lib64}/libcuda.so.1": ("libcuda.so.1", "libc6,x86-64", 0x0303),
        f"{lib64}/libnvidia-ml.so.1": ("libnvidia-ml.so.1", "libc6,x86-64", 0x0303),
        f"{lib64}/libnvidia-tls.so.1": ("libnvidia-tls.so.1", "libc6,x86-64", 0x0303),
        f"{lib64}/libnosoname.so.7": ("libnosoname.so.7", "libc6,x86-64", 0x0303),
        f"{lib32}/libcuda.so.1": ("libcuda.so.1", "libc6", 0x0003),
        f"{lib32}/libnvidia-tls.so.1": ("libnvidia-tls.so.1", "ELF", 0x0001),
    }
    assert {p: (s, a, flags[p][1]) for p, (s, a) in entries.items()} == expected
    assert all(flags[p][0] == expected[p][0] for p in expected)

    # The x86 readelflib.c rejects other machines, naming e_machine; big-endian files are
    # skipped silently (process_file reads e_type in host byte order: 0x0300, not ET_DYN);
    # so is the ET_EXEC file.
    rejected = sorted(re.findall(r"(\S+) is for unknown machine (\d+)\.", stderr))
    assert rejected == sorted(
        [
            (f"{foreign}/libaarch64little.so.1.0", "183"),
            (f"{foreign}/libarmlittle.so.1.0", "40"),
            (f"{foreign}/libppc64lelittle.so.1.0", "21"),
        ]
    )
    assert "big" not in stderr
    assert "libexec" not in stderr
    assert not [p for d in (lib64, lib32, foreign) for p in d.iterdir() if p.is_symlink()]
