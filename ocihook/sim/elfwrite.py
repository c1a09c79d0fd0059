"""Write tiny, valid ELF shared objects for the simulated GPU host and the tests.

The simulated host's driver libraries (``libcuda.so.550.127.05`` with ``DT_SONAME``
``libcuda.so.1``, ...) are never loaded or executed, but the tools that inspect them must
accept them: pyelftools, ``readelf -d`` and the real ``ldconfig``, which reads
``DT_SONAME`` and classifies each file by ELF class and machine before putting it into
``ld.so.cache``. :func:`make_shared_object` builds such a file in memory (a few hundred
bytes); it does no I/O.

File layout (addresses equal file offsets, base address 0)::

    ELF header
    program headers  PT_LOAD (whole file), PT_DYNAMIC, PT_NOTE (only with abi_tag)
    .dynstr          NUL, then each distinct name once
    .dynamic         DT_NEEDED..., DT_SONAME, DT_STRTAB, DT_STRSZ, DT_NULL
    .note.ABI-tag    only with abi_tag
    extra notes      ``note_sections``: SHT_NOTE sections not in any segment, 4-aligned
    .shstrtab
    section headers  null, .dynstr, .dynamic, [.note.ABI-tag], [extra notes], .shstrtab
    padding          ``padding`` zero bytes, still inside PT_LOAD

Sources: the System V ABI / ELF gABI (header, program and section header, dynamic and
note layouts), the per-architecture psABIs (machine numbers, ``e_flags``), glibc
``elf/readelflib.c`` and its ``sysdeps/unix/sysv/linux/{x86,arm,aarch64}/readelflib.c``
(what ``ldconfig`` reads: ``e_type == ET_DYN``, the first PT_LOAD's ``p_vaddr -
p_offset``, PT_DYNAMIC, ``DT_STRTAB``/``DT_SONAME``/``DT_NEEDED``, the GNU ABI note, and
``e_flags`` for ARM hard-float), and glibc ``csu/abi-note.S`` for ``.note.ABI-tag``.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

__all__ = ["MACHINES", "make_executable", "make_shared_object", "pack_note"]

# e_ident and e_type values (gABI).
_ELFMAG = b"\x7fELF"
_ELFCLASS = {32: 1, 64: 2}
_ELFDATA = {"little": 1, "big": 2}
_EV_CURRENT = 1
_ELFOSABI_SYSV = 0
_ET_EXEC = 2
_ET_DYN = 3

# Program header types and flags (gABI).
_PT_LOAD = 1
_PT_DYNAMIC = 2
_PT_NOTE = 4
_PF_W = 2
_PF_R = 4

# Section header types and flags (gABI).
_SHT_STRTAB = 3
_SHT_DYNAMIC = 6
_SHT_NOTE = 7
_SHF_WRITE = 1
_SHF_ALLOC = 2

# Dynamic tags (gABI).
_DT_NULL = 0
_DT_NEEDED = 1
_DT_STRTAB = 5
_DT_STRSZ = 10
_DT_SONAME = 14

# The GNU ABI note (glibc csu/abi-note.S): owner "GNU", type NT_GNU_ABI_TAG, four words
# of description: the OS (0 = Linux) and the earliest kernel version (major, minor, patch).
_NT_GNU_ABI_TAG = 1
_ELF_NOTE_OS_LINUX = 0
_NOTE_OWNER = b"GNU\x00"

# ARM EABI e_flags (ARM "ELF for the Arm Architecture"; glibc elf.h): EABI version 5 and
# the hard-float marker that arm/readelflib.c turns into ldconfig's "hard-float" flag;
# BE8 marks big-endian EABI objects with little-endian code.
_EF_ARM_EABI_VER5 = 0x05000000
_EF_ARM_ABI_FLOAT_HARD = 0x00000400
_EF_ARM_BE8 = 0x00800000
# ppc64 e_flags (64-bit ELF V2 ABI for Power): ABI version 2, used by every ppc64le object.
_EF_PPC64_ABI_V2 = 2

_PAGE = 0x1000


@dataclass(frozen=True)
class _Machine:
    """One supported architecture: ELF ``e_machine``, class, byte orders and ``e_flags``."""

    e_machine: int
    elf_class: int
    endians: tuple[str, ...]
    e_flags: int = 0
    big_e_flags: int = 0  # extra e_flags when written big-endian


#: The supported ``machine`` names. Each has one ELF class; ``endian="big"`` is accepted
#: only where the architecture has a big-endian Linux ABI (aarch64_be, armeb).
MACHINES: dict[str, _Machine] = {
    "x86_64": _Machine(e_machine=62, elf_class=64, endians=("little",)),
    "i386": _Machine(e_machine=3, elf_class=32, endians=("little",)),
    "aarch64": _Machine(e_machine=183, elf_class=64, endians=("little", "big")),
    "arm": _Machine(
        e_machine=40,
        elf_class=32,
        endians=("little", "big"),
        e_flags=_EF_ARM_EABI_VER5 | _EF_ARM_ABI_FLOAT_HARD,
        big_e_flags=_EF_ARM_BE8,
    ),
    "ppc64le": _Machine(e_machine=21, elf_class=64, endians=("little",), e_flags=_EF_PPC64_ABI_V2),
}


@dataclass(frozen=True)
class _Layouts:
    """The on-disk structures for one ELF class and byte order (gABI "ELF Header" etc.)."""

    word: int  # address size in bytes: 4 or 8
    ehdr: struct.Struct  # Elf{32,64}_Ehdr
    phdr: struct.Struct  # Elf{32,64}_Phdr; field order differs between the classes
    shdr: struct.Struct  # Elf{32,64}_Shdr
    dyn: struct.Struct  # Elf{32,64}_Dyn: d_tag (signed), d_val
    note_words: struct.Struct  # Elf_Nhdr plus the 4-byte owner and 4-word ABI-tag desc


# The layouts, declared once per class, byte order prefix left out.
_FORMATS = {
    #     ehdr                 phdr        shdr          dyn
    32: ("16sHHIIIIIHHHHHH", "IIIIIIII", "IIIIIIIIII", "iI"),
    64: ("16sHHIQQQIHHHHHH", "IIQQQQQQ", "IIQQQQIIQQ", "qQ"),
}


@cache
def _layouts(elf_class: int, endian: str) -> _Layouts:
    """The structures for ``elf_class`` (32 or 64) and ``endian`` ("little" or "big")."""
    prefix = "<" if endian == "little" else ">"
    ehdr, phdr, shdr, dyn = (struct.Struct(prefix + f) for f in _FORMATS[elf_class])
    return _Layouts(elf_class // 8, ehdr, phdr, shdr, dyn, struct.Struct(prefix + "III4sIIII"))


def _pack_phdr(lay: _Layouts, p_type: int, flags: int, offset: int, size: int, align: int) -> bytes:
    """One program header with ``p_vaddr == p_paddr == p_offset`` and memsz == filesz."""
    if lay.word == 4:
        return lay.phdr.pack(p_type, offset, offset, offset, size, size, flags, align)
    return lay.phdr.pack(p_type, flags, offset, offset, offset, size, size, align)


class _StringTable:
    """An ELF string table (gABI "String Table"): NUL first, each distinct string once."""

    def __init__(self) -> None:
        self.data = bytearray(b"\x00")
        self._index: dict[bytes, int] = {b"": 0}

    def add(self, text: str) -> int:
        """Return the offset of ``text`` (UTF-8, NUL-terminated), adding it if new."""
        raw = text.encode()
        if raw not in self._index:
            self._index[raw] = len(self.data)
            self.data += raw + b"\x00"
        return self._index[raw]


def _align(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


def _check_name(what: str, name: str) -> None:
    if not isinstance(name, str) or not name or "\x00" in name:
        raise ValueError(f"{what} must be a non-empty string without NUL, got {name!r}")


def _validate(
    soname: str | None,
    elf_class: int,
    machine: str,
    needed: Sequence[str],
    abi_tag: tuple[int, int, int] | None,
    endian: str,
    padding: int,
) -> _Machine:
    """Return the machine's entry, or raise ValueError naming the first bad option."""
    if machine not in MACHINES:
        raise ValueError(f"unknown machine {machine!r}; expected one of {sorted(MACHINES)}")
    arch = MACHINES[machine]
    if elf_class != arch.elf_class:
        raise ValueError(f"machine {machine!r} needs elf_class {arch.elf_class}, got {elf_class!r}")
    if endian not in arch.endians:
        raise ValueError(f"machine {machine!r} supports endian {arch.endians}, got {endian!r}")
    if soname is not None:
        _check_name("soname", soname)
    if isinstance(needed, str):
        raise ValueError("needed must be a sequence of names, not one string")
    for name in needed:
        _check_name("needed entry", name)
    if abi_tag is not None and (
        len(abi_tag) != 3 or not all(isinstance(v, int) and 0 <= v < 2**32 for v in abi_tag)
    ):
        raise ValueError(f"abi_tag must be three integers in [0, 2**32), got {abi_tag!r}")
    if not isinstance(padding, int) or padding < 0:
        raise ValueError(f"padding must be a non-negative integer, got {padding!r}")
    return arch


def _build(
    e_type: int,
    soname: str | None,
    elf_class: int,
    machine: str,
    needed: Sequence[str],
    abi_tag: tuple[int, int, int] | None,
    endian: str,
    padding: int,
    note_sections: Sequence[tuple[str, bytes]] = (),
) -> bytes:
    """Validate the options, lay the file out (see the module docstring) and pack it."""
    arch = _validate(soname, elf_class, machine, needed, abi_tag, endian, padding)
    for section, data in note_sections:
        _check_name("note section name", section)
        if not isinstance(data, bytes):
            raise ValueError(f"note section {section!r} contents must be bytes")
    lay = _layouts(elf_class, endian)
    e_flags = arch.e_flags | (arch.big_e_flags if endian == "big" else 0)

    dynstr = _StringTable()
    tags = [(_DT_NEEDED, dynstr.add(name)) for name in needed]
    if soname is not None:
        tags.append((_DT_SONAME, dynstr.add(soname)))
    shstrtab = _StringTable()
    names = {n: shstrtab.add(n) for n in (".dynstr", ".dynamic", ".note.ABI-tag", ".shstrtab")}
    extra_names = [shstrtab.add(name) for name, _data in note_sections]

    # Place everything; offsets are also virtual addresses.
    phnum = 2 if abi_tag is None else 3
    dynstr_off = lay.ehdr.size + phnum * lay.phdr.size
    dynamic_off = _align(dynstr_off + len(dynstr.data), lay.word)
    dynamic_size = (len(tags) + 3) * lay.dyn.size  # + DT_STRTAB, DT_STRSZ, DT_NULL
    note_off = _align(dynamic_off + dynamic_size, 4)
    note_size = lay.note_words.size if abi_tag is not None else 0
    extra_offs = []
    at = note_off + note_size
    for _name, data in note_sections:
        at = _align(at, 4)
        extra_offs.append(at)
        at += len(data)
    shstrtab_off = at
    shnum = (4 if abi_tag is None else 5) + len(note_sections)
    shoff = _align(shstrtab_off + len(shstrtab.data), lay.word)
    total = shoff + shnum * lay.shdr.size + padding
    if total >= 2 ** (8 * lay.word):
        raise ValueError(f"file of {total} bytes does not fit ELFCLASS{elf_class}")

    tags += [(_DT_STRTAB, dynstr_off), (_DT_STRSZ, len(dynstr.data)), (_DT_NULL, 0)]
    dynamic = b"".join(lay.dyn.pack(tag, value) for tag, value in tags)

    phdrs = [
        _pack_phdr(lay, _PT_LOAD, _PF_R | _PF_W, 0, total, _PAGE),
        _pack_phdr(lay, _PT_DYNAMIC, _PF_R | _PF_W, dynamic_off, dynamic_size, lay.word),
    ]
    sections = [
        # name, type, flags, offset, size, link, align, entsize
        (0, 0, 0, 0, 0, 0, 0, 0),
        (names[".dynstr"], _SHT_STRTAB, _SHF_ALLOC, dynstr_off, len(dynstr.data), 0, 1, 0),
        (
            names[".dynamic"],
            _SHT_DYNAMIC,
            _SHF_WRITE | _SHF_ALLOC,
            dynamic_off,
            dynamic_size,
            1,  # sh_link: the string table, .dynstr
            lay.word,
            lay.dyn.size,
        ),
    ]
    note = b""
    if abi_tag is not None:
        note = lay.note_words.pack(
            len(_NOTE_OWNER), 16, _NT_GNU_ABI_TAG, _NOTE_OWNER, _ELF_NOTE_OS_LINUX, *abi_tag
        )
        phdrs.append(_pack_phdr(lay, _PT_NOTE, _PF_R, note_off, note_size, 4))
        sections.append(
            (names[".note.ABI-tag"], _SHT_NOTE, _SHF_ALLOC, note_off, note_size, 0, 4, 0)
        )
    for name_at, off, (_name, data) in zip(extra_names, extra_offs, note_sections, strict=True):
        sections.append((name_at, _SHT_NOTE, 0, off, len(data), 0, 4, 0))
    sections.append((names[".shstrtab"], _SHT_STRTAB, 0, shstrtab_off, len(shstrtab.data), 0, 1, 0))

    ident = struct.pack(
        "4sBBBB8x", _ELFMAG, _ELFCLASS[elf_class], _ELFDATA[endian], _EV_CURRENT, _ELFOSABI_SYSV
    )
    ehdr = lay.ehdr.pack(
        ident,
        e_type,
        arch.e_machine,
        _EV_CURRENT,
        0,  # e_entry
        lay.ehdr.size,  # e_phoff: right after the header
        shoff,
        e_flags,
        lay.ehdr.size,
        lay.phdr.size,
        phnum,
        lay.shdr.size,
        shnum,
        shnum - 1,  # e_shstrndx: .shstrtab is last
    )
    out = bytearray(total)
    out[0 : lay.ehdr.size] = ehdr
    out[lay.ehdr.size : dynstr_off] = b"".join(phdrs)
    out[dynstr_off : dynstr_off + len(dynstr.data)] = dynstr.data
    out[dynamic_off : dynamic_off + dynamic_size] = dynamic
    out[note_off : note_off + note_size] = note
    for off, (_name, data) in zip(extra_offs, note_sections, strict=True):
        out[off : off + len(data)] = data
    out[shstrtab_off : shstrtab_off + len(shstrtab.data)] = shstrtab.data
    for i, (name, sh_type, flags, offset, size, link, align, entsize) in enumerate(sections):
        at = shoff + i * lay.shdr.size
        out[at : at + lay.shdr.size] = lay.shdr.pack(
            name, sh_type, flags, offset, offset, size, link, 0, align, entsize
        )
    return bytes(out)


def make_shared_object(
    soname: str | None,
    *,
    elf_class: int = 64,
    machine: str = "x86_64",
    needed: Sequence[str] = (),
    abi_tag: tuple[int, int, int] | None = None,
    endian: str = "little",
    padding: int = 0,
    note_sections: Sequence[tuple[str, bytes]] = (),
) -> bytes:
    """Return the bytes of a minimal ELF shared object (``ET_DYN``).

    ``soname`` becomes ``DT_SONAME`` (none when ``None``); each entry of ``needed`` becomes
    one ``DT_NEEDED``, in order. ``elf_class`` (32 or 64), ``machine`` (a key of
    :data:`MACHINES`: ``x86_64``/64, ``i386``/32, ``aarch64``/64, ``arm``/32 EABI5
    hard-float, ``ppc64le``/64 ELFv2) and ``endian`` (``"little"``, or ``"big"`` for
    ``aarch64`` and ``arm``) must fit together. ``abi_tag=(major, minor, patch)`` adds a
    ``.note.ABI-tag`` (GNU, ``NT_GNU_ABI_TAG``, OS Linux) with its PT_NOTE, the note
    libnvidia-container checks on ``libnvidia-tls`` (e.g. ``(2, 3, 99)``). ``padding``
    zero bytes are appended inside the PT_LOAD, so the result is exactly
    ``len(make_shared_object(..., padding=0)) + padding`` bytes long. Each
    ``(name, contents)`` of ``note_sections`` becomes a SHT_NOTE section (4-aligned, in no
    segment) holding ``contents`` as given (see :func:`pack_note`), e.g.
    ``(".note.cuda.fwd_compatibility", pack_note(b"NVIDIA Corporation", 1, b"{...}"))``.

    Raises ``ValueError`` for an unknown machine, a class or byte order the machine does not
    have, an empty name or one containing NUL, an abi_tag that is not three 32-bit unsigned
    integers, a negative padding, or a 32-bit file that would reach 4 GiB.
    """
    return _build(
        _ET_DYN, soname, elf_class, machine, needed, abi_tag, endian, padding, note_sections
    )


def pack_note(owner: bytes, note_type: int, desc: bytes, *, endian: str = "little") -> bytes:
    """One ELF note (gABI "Note Section"): ``namesz``, ``descsz``, ``type`` words, then the
    NUL-terminated ``owner`` and ``desc``, each padded to 4 bytes.

    Raises ``ValueError`` for an owner containing NUL, a type outside ``[0, 2**32)`` or an
    unknown ``endian``.
    """
    if b"\x00" in owner or not 0 <= note_type < 2**32 or endian not in _ELFDATA:
        raise ValueError("owner without NUL, a 32-bit type and endian little or big needed")
    name = owner + b"\x00"
    head = struct.pack(
        ("<" if endian == "little" else ">") + "III", len(name), len(desc), note_type
    )
    return head + name + bytes(-len(name) % 4) + desc + bytes(-len(desc) % 4)


def make_executable(
    *,
    elf_class: int = 64,
    machine: str = "x86_64",
    needed: Sequence[str] = (),
    abi_tag: tuple[int, int, int] | None = None,
    endian: str = "little",
    padding: int = 0,
) -> bytes:
    """Return the bytes of a minimal ``ET_EXEC`` file, laid out like a shared object.

    Same options and errors as :func:`make_shared_object`, but no ``DT_SONAME`` and no
    ``PT_INTERP`` or code: it is for tests that need an ELF file that is not a shared
    object (``ldconfig`` skips it without a message: glibc ``elf/readlib.c`` wants
    ``ET_DYN``).
    """
    return _build(_ET_EXEC, None, elf_class, machine, needed, abi_tag, endian, padding)
