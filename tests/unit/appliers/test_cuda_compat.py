"""CUDA forward compatibility: the ``.note.cuda.fwd_compatibility`` note of an image's
compat ``libcuda.so``, the decision rule, and the ``ld.so.cache`` entries that follow.

Notes are written with :func:`ocihook.sim.elfwrite.pack_note` into files from
:func:`~ocihook.sim.elfwrite.make_shared_object`, and into a real shared object made by
``gcc`` and ``objcopy --add-section`` (a library with the usual thirty sections); the
reader is checked against ``readelf``/``objcopy --dump-section`` there.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocihook.appliers import live
from ocihook.commands.cdihook import parse_cuda_compat_arg
from ocihook.core import log
from ocihook.core.errors import ApplyError
from ocihook.linux import elfscan
from ocihook.linux.elfscan import CudaCompatNote, cuda_compat_note, parse_cuda_compat_note
from ocihook.plan.compat import CudaCompat
from ocihook.sim.elfwrite import make_shared_object, pack_note

SECTION = ".note.cuda.fwd_compatibility"
OWNER = b"NVIDIA Corporation"
#: The descriptor of NVIDIA's libcuda.so.575.57.08 (as the toolkit's tests read it).
DESC_575 = {
    "Format": 1,
    "CUDA Version": "12.9",
    "Driver": [535, 550, 560, 565, 570, 575],
    "Device": [1, 2, 7, 8, 9, 10, 11, 12, 13, 14],
}
NOTE_575 = CudaCompatNote(
    1, (12, 9), (535, 550, 560, 565, 570, 575), (1, 2, 7, 8, 9, 10, 11, 12, 13, 14)
)


def _note(desc: object = DESC_575, *, owner: bytes = OWNER, endian: str = "little") -> bytes:
    raw = desc if isinstance(desc, bytes) else json.dumps(desc).encode()
    return pack_note(owner, 1, raw, endian=endian)


def _lib(note: bytes | None, **kwargs: Any) -> bytes:
    sections = [] if note is None else [(SECTION, note)]
    return make_shared_object("libcuda.so.1", note_sections=sections, **kwargs)


# --- the note parser --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("elf_class", "machine", "endian"),
    [(64, "x86_64", "little"), (32, "i386", "little"), (64, "aarch64", "big"), (32, "arm", "big")],
)
def test_note_read_in_every_class_and_byte_order(
    tmp_path: Any, elf_class: int, machine: str, endian: str
) -> None:
    path = tmp_path / "libcuda.so.575.57.08"
    path.write_bytes(
        _lib(_note(endian=endian), elf_class=elf_class, machine=machine, endian=endian)
    )
    assert cuda_compat_note(str(path)) == NOTE_575
    from elftools.elf.elffile import ELFFile  # the writer's section, as pyelftools reads it

    with open(path, "rb") as f:
        section = ELFFile(f).get_section_by_name(SECTION)
        assert section["sh_type"] == "SHT_NOTE"
        assert section.data() == _note(endian=endian)
    # the library is still an ordinary one for the other readers
    assert elfscan.dynamic_names(str(path)) == ("libcuda.so.1", ())


def test_note_absent_or_another_section(tmp_path: Any) -> None:
    plain = tmp_path / "plain"
    plain.write_bytes(_lib(None, abi_tag=(3, 10, 0)))
    assert cuda_compat_note(str(plain)) is None
    other = tmp_path / "other"
    other.write_bytes(
        make_shared_object("libcuda.so.1", note_sections=[(".note.cuda.other", _note())])
    )
    assert cuda_compat_note(str(other)) is None
    not_elf = tmp_path / "text"
    not_elf.write_bytes(b"#!/bin/sh\n" * 20)
    assert cuda_compat_note(str(not_elf)) is None
    assert cuda_compat_note(str(tmp_path / "missing")) is None


@pytest.mark.parametrize(
    ("desc", "owner"),
    [
        (b'{"Format": 1, "Driver": [550', OWNER),  # truncated JSON
        (b"\xff\xfe{}", OWNER),  # not UTF-8
        (b"[535, 550]", OWNER),  # not an object
        ({"Format": "1"}, OWNER),
        ({"Format": 1, "Driver": [550, "560"]}, OWNER),
        ({"Format": 1, "Driver": 550}, OWNER),
        ({"Format": 1, "Driver": [-1]}, OWNER),
        ({"Format": 1, "CUDA Version": 12.9}, OWNER),
        ({"Format": 1, "CUDA Version": "twelve"}, OWNER),
        ({"Format": 1, "CUDA Version": "12"}, OWNER),
        (b"[" * 100_000, OWNER),  # nesting beyond the recursion limit (and the size bound)
        (DESC_575, b"NVIDIA Corp"),  # another owner
        (DESC_575, b"GNU"),
    ],
)
def test_malformed_note_gives_none(tmp_path: Any, desc: object, owner: bytes) -> None:
    path = tmp_path / "lib"
    path.write_bytes(_lib(_note(desc, owner=owner)))
    assert cuda_compat_note(str(path)) is None


def test_truncated_note_never_raises() -> None:
    whole = _note()
    assert parse_cuda_compat_note(whole) == NOTE_575
    for n in range(len(whole)):
        result = parse_cuda_compat_note(whole[:n])
        # the JSON ends before the padding: only cuts inside the padding still parse
        assert result is None or (result == NOTE_575 and n >= len(whole) - 3)


def test_note_sizes_running_past_the_section() -> None:
    good = _note()
    namesz, descsz, kind = struct.unpack_from("<III", good)
    for bad in (
        struct.pack("<III", 0xFFFFFFFF, descsz, kind),
        struct.pack("<III", namesz, 0xFFFFFFFF, kind),
        struct.pack("<III", namesz, len(good), kind),
    ):
        assert parse_cuda_compat_note(bad + good[12:]) is None


def test_second_note_and_eight_byte_alignment() -> None:
    first = pack_note(b"GNU", 3, b"\x01" * 20)
    assert parse_cuda_compat_note(first + _note()) == NOTE_575
    # 8-byte padding (sh_addralign 8): "NVIDIA Corporation\0" is 19 bytes -> 24
    desc = json.dumps(DESC_575).encode()
    note8 = struct.pack("<III", 19, len(desc), 1) + OWNER + b"\0" * 6 + desc
    assert parse_cuda_compat_note(note8, "<", 8) == NOTE_575
    assert parse_cuda_compat_note(note8, "<", 4) is None  # read with 4-padding: garbage
    assert parse_cuda_compat_note(_note(endian="big"), ">") == NOTE_575
    assert parse_cuda_compat_note(_note(), "=") is None


def test_section_headers_out_of_bounds(tmp_path: Any) -> None:
    """A section table past the end of the file, too many sections, a name table index
    past the table, and a note section whose size runs past the file."""
    base = bytearray(_lib(_note()))
    shoff = struct.unpack_from("<Q", base, 40)[0]
    cases = {}
    moved = bytearray(base)
    struct.pack_into("<Q", moved, 40, len(base) + 4096)
    cases["shoff past end"] = moved
    many = bytearray(base)
    struct.pack_into("<H", many, 60, 0xFFFE)
    cases["shnum huge"] = many
    badstr = bytearray(base)
    struct.pack_into("<H", badstr, 62, 200)
    cases["shstrndx past table"] = badstr
    big = bytearray(base)
    note_hdr = shoff + 3 * 64  # null, .dynstr, .dynamic, then the note
    struct.pack_into("<Q", big, note_hdr + 32, 1 << 40)  # sh_size
    cases["note size huge"] = big
    for name, data in cases.items():
        path = tmp_path / name.replace(" ", "_")
        path.write_bytes(bytes(data))
        result = cuda_compat_note(str(path))
        assert result is None or (name == "note size huge" and result == NOTE_575), name
    for n in range(0, len(base), 7):  # every truncation of the file
        path = tmp_path / "cut"
        path.write_bytes(bytes(base[:n]))
        assert cuda_compat_note(str(path)) is None


def test_fifo_is_not_read(tmp_path: Any) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert cuda_compat_note(str(fifo)) is None  # would block if opened for reading


@settings(max_examples=400, deadline=None)
@given(
    data=st.binary(max_size=512),
    order=st.sampled_from(["<", ">"]),
    align=st.sampled_from([0, 1, 4, 8, 16]),
)
def test_parser_on_random_bytes(data: bytes, order: str, align: int) -> None:
    result = parse_cuda_compat_note(data, order, align)
    assert result is None or isinstance(result, CudaCompatNote)


@settings(max_examples=300, deadline=None)
@given(
    desc=st.recursive(
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(
                st.sampled_from(["Format", "CUDA Version", "Driver", "Device", "x"]),
                inner,
                max_size=4,
            )
        ),
        max_leaves=12,
    ),
    namesz_delta=st.integers(-3, 3),
    descsz_delta=st.integers(-3, 3),
)
def test_parser_on_structured_notes(desc: object, namesz_delta: int, descsz_delta: int) -> None:
    """Well-formed notes with arbitrary JSON, and headers whose sizes are a little off:
    a note or None, never an exception; a note only from JSON of the documented shape."""
    raw = json.dumps(desc).encode()
    note = bytearray(_note(raw))
    namesz, descsz, kind = struct.unpack_from("<III", note)
    struct.pack_into(
        "<III", note, 0, max(0, namesz + namesz_delta), max(0, descsz + descsz_delta), kind
    )
    result = parse_cuda_compat_note(bytes(note))
    if result is not None:
        assert isinstance(desc, dict)
        assert result.drivers == tuple(desc.get("Driver", []))


def _gcc_library(tmp_path: Any, note: bytes) -> str | None:
    gcc, objcopy = shutil.which("gcc"), shutil.which("objcopy")
    if gcc is None or objcopy is None:
        return None
    src = tmp_path / "c.c"
    src.write_text("int cuInit(unsigned f) { return (int)f; }\n")
    so = tmp_path / "libcuda.so.575.57.08"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(so), str(src)], check=True
    )
    blob = tmp_path / "note.bin"
    blob.write_bytes(note)
    subprocess.run(
        [
            objcopy,
            "--add-section",
            f"{SECTION}={blob}",
            "--set-section-flags",
            f"{SECTION}=noload,readonly",
            str(so),
        ],
        check=True,
    )
    return str(so)


def test_note_in_a_gcc_library_matches_objcopy(tmp_path: Any) -> None:
    so = _gcc_library(tmp_path, _note())
    if so is None:
        pytest.skip("gcc or objcopy is not installed")
    out = tmp_path / "dumped"
    subprocess.run(
        ["objcopy", "--dump-section", f"{SECTION}={out}", so, str(tmp_path / "x")], check=True
    )
    assert parse_cuda_compat_note(out.read_bytes()) == NOTE_575
    assert cuda_compat_note(so) == NOTE_575
    kinds = subprocess.run(["readelf", "-S", "-W", so], capture_output=True, text=True).stdout
    assert f"{SECTION}" in kinds and "NOTE" in kinds.split(SECTION, 1)[1].splitlines()[0]


# --- the decision ----------------------------------------------------------------------


HOST = CudaCompat(host_major=570, host_driver="570.211.01", host_cuda="12.8")


@pytest.mark.parametrize(
    ("compat", "version", "note", "used", "why"),
    [
        # the note's Driver list, with the host driver version
        (HOST, "575.57.08", NOTE_575, True, "host branch 570 supported"),
        (CudaCompat(host_major=575, host_driver="575.10.10"), "575.57.08", NOTE_575, True, "newer"),
        (
            CudaCompat(host_major=575, host_driver="575.57.08"),
            "575.57.08",
            NOTE_575,
            False,
            "not newer",
        ),
        (
            CudaCompat(host_major=575, host_driver="575.99.99"),
            "575.57.08",
            NOTE_575,
            False,
            "not newer",
        ),
        (
            CudaCompat(host_major=590, host_driver="590.44.01"),
            "575.57.08",
            NOTE_575,
            False,
            "not among",
        ),
        (
            CudaCompat(host_major=525, host_driver="525.1.1"),
            "575.57.08",
            NOTE_575,
            False,
            "not among",
        ),
        # a note without a Driver list: CUDA versions
        (HOST, "575.57.08", CudaCompatNote(1, (12, 9), (), ()), True, "CUDA 12.9 newer"),
        (HOST, "575.57.08", CudaCompatNote(1, (12, 8), (), ()), False, "not newer"),
        (HOST, "575.57.08", CudaCompatNote(1, (12, 7), (), ()), False, "not newer"),
        # only the branch known (a hook registered by an older ocihook): CUDA, then names
        (CudaCompat(host_major=570, host_cuda="12.8"), "575.57.08", NOTE_575, True, "CUDA 12.9"),
        (CudaCompat(host_major=570), "575.57.08", NOTE_575, True, "note gives nothing"),
        # no note: the file-name rule
        (HOST, "575.57.08", None, True, "compat branch 575 > host branch 570"),
        (HOST, "570.300.01", None, False, "compat branch 570 <= host branch 570"),
        (HOST, "565.1.2", None, False, "<= host"),
        (HOST, "575", None, False, "no driver version"),
    ],
)
def test_decide(
    compat: CudaCompat, version: str, note: CudaCompatNote | None, used: bool, why: str
) -> None:
    decided, reason = compat.decide(version, note)
    assert decided is used
    assert why in reason


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("/usr/local/cuda/compat::550", CudaCompat("/usr/local/cuda/compat", 550)),
        ("/c::550.127.05", CudaCompat("/c", 550, "550.127.05")),
        ("/c::550.127.05::12.4", CudaCompat("/c", 550, "550.127.05", "12.4")),
    ],
)
def test_cuda_compat_argument(value: str, want: CudaCompat) -> None:
    assert parse_cuda_compat_arg(value) == want


@pytest.mark.parametrize(
    "value", ["c::550", "/c", "/c::", "/c::x", "/c::550.1::12", "/c::550::abc", "/c::" + "9" * 5000]
)
def test_cuda_compat_argument_refused(value: str) -> None:
    with pytest.raises(ApplyError, match="--cuda-compat"):
        parse_cuda_compat_arg(value)


# --- the ld.so.cache entries of a rootfs ----------------------------------------------------


def _rootfs(tmp_path: Any, version: str, note: bytes | None) -> int:
    compat = tmp_path / "rootfs/usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (compat / f"libcuda.so.{version}").write_bytes(_lib(note))
    os.symlink(f"libcuda.so.{version}", compat / "libcuda.so.1")
    return os.open(tmp_path / "rootfs", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)


def _decided(tmp_path: Any, version: str, note: bytes | None, host: str = "550.127.05") -> bool:
    root = _rootfs(tmp_path, version, note)
    try:
        entries = live.cuda_compat_entries(
            root, CudaCompat(host_major=int(host.split(".")[0]), host_driver=host)
        )
    finally:
        os.close(root)
    if entries:
        assert [(e.soname, e.path) for e in entries] == [
            ("libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.1")
        ]
    return bool(entries)


NOTE_550_560 = {"Format": 1, "CUDA Version": "12.6", "Driver": [535, 550, 560]}


@pytest.mark.parametrize(
    ("version", "desc", "used"),
    [
        # the note decides: host 550.127.05
        ("560.35.03", NOTE_550_560, True),  # newer, host branch listed
        ("550.200.01", NOTE_550_560, True),  # same branch, newer: names alone would say no
        ("550.127.05", NOTE_550_560, False),  # equal
        ("550.54.15", NOTE_550_560, False),  # older
        ("565.57.01", {"Format": 1, "Driver": [560, 565]}, False),  # 550 not supported
        # a malformed or truncated note: the file-name rule
        ("560.35.03", b'{"Driver": [535, 550', True),
        ("550.200.01", b'{"Driver": [535, 550', False),
        ("560.35.03", {"Driver": "550"}, True),
        # no note: the file-name rule
        ("560.35.03", None, True),
        ("550.200.01", None, False),
        ("545.23.08", None, False),
    ],
)
def test_compat_entries(tmp_path: Any, version: str, desc: object, used: bool) -> None:
    note = None if desc is None else _note(desc)
    if isinstance(desc, bytes) and desc.startswith(b'{"Driver": [535'):
        note = _note(desc)[:-8]  # cut inside the descriptor: sizes run past the section
    assert _decided(tmp_path, version, note) is used


def test_compat_decision_is_logged(tmp_path: Any) -> None:
    path = tmp_path / "ocihook.core.log"
    log.configure(str(path), "debug", container="c1")
    try:
        assert _decided(tmp_path, "550.200.01", _note(NOTE_550_560))
    finally:
        log.configure(None)
    line = path.read_text()
    assert "container=c1 cuda compat: used" in line
    assert "host branch 550 supported, compat 550.200.01 newer" in line
    assert "library=/usr/local/cuda/compat/libcuda.so.550.200.01" in line


def test_compat_link_out_of_the_rootfs_is_not_followed(tmp_path: Any) -> None:
    """A ``libcuda.so.<version>`` that is a link (here to a host file with a note that
    would say yes) is not a compat library: only regular files in the image count."""
    host_file = tmp_path / "host-libcuda"
    host_file.write_bytes(_lib(_note(NOTE_550_560)))
    compat = tmp_path / "rootfs/usr/local/cuda/compat"
    compat.mkdir(parents=True)
    os.symlink(str(host_file), compat / "libcuda.so.550.200.01")
    os.symlink("libcuda.so.550.200.01", compat / "libcuda.so.1")
    root = os.open(tmp_path / "rootfs", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        assert (
            live.cuda_compat_entries(root, CudaCompat(host_major=550, host_driver="550.127.05"))
            == []
        )
    finally:
        os.close(root)
