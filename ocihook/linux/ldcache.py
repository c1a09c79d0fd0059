"""Read and write ``ld.so.cache`` files, the index the dynamic loader searches by soname.

The layouts follow glibc's ``sysdeps/generic/dl-cache.h``; the flag values follow
``sysdeps/generic/ldconfig.h``; the entry order and the ``ldconfig -p`` wording follow
``elf/cache.c`` (``compare``, ``save_cache``, ``print_entry``) and the name order follows
``_dl_cache_libcmp`` in ``elf/dl-cache.c``, all as of glibc 2.36.

Three file formats exist:

* **old** (``ld.so-1.7.0``, libc5 and glibc 2.0/2.1): a 16-byte header, 12-byte entries and
  a string table right after the entries; string offsets count from that table.
* **new** (``glibc-ld.so.cache1.1``, written by default since glibc 2.32): a 48-byte header,
  24-byte entries, the string table, then (glibc 2.33+) an extension directory. String
  offsets count from the start of the new header.
* **compat**: an old block, then a new block at the next 8-byte boundary. Readers use the new
  block.

:func:`parse` reads all three in either byte order and never touches the file system, so any
bytes can be fed to it; every malformed input raises :class:`~ocihook.core.errors.LdCacheError`
carrying the byte offset. :func:`build` writes the new format, ordered exactly as
``ldconfig`` orders it, because the loader binary-searches the entries.

Strings (sonames, paths, glibc-hwcaps names) are NUL-terminated bytes on disk. They are
decoded as UTF-8 with ``surrogateescape`` (what :func:`os.fsdecode` does in a UTF-8 locale),
so no byte sequence is rejected and :func:`build` writes back exactly the bytes it read.

Only the standard library is imported; this module is on the path of every container start.
"""

from __future__ import annotations

import os
import struct
import sys

from ..core.errors import LdCacheError
from ..core.records import Record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Literal

    _Order = Literal["<", ">"]

__all__ = [
    "ABI_FLAGS_FOR_MACHINE",
    "CHAR_IS_SIGNED",
    "FLAG_AARCH64_LIB64",
    "FLAG_ARM_LIBHF",
    "FLAG_ARM_LIBSF",
    "FLAG_ELF",
    "FLAG_ELF_LIBC5",
    "FLAG_ELF_LIBC6",
    "FLAG_IA64_LIB64",
    "FLAG_LARCH_FLOAT_ABI_DOUBLE",
    "FLAG_LARCH_FLOAT_ABI_SOFT",
    "FLAG_LIBC4",
    "FLAG_MIPS64_LIBN32",
    "FLAG_MIPS64_LIBN32_NAN2008",
    "FLAG_MIPS64_LIBN64",
    "FLAG_MIPS64_LIBN64_NAN2008",
    "FLAG_MIPS_LIB32_NAN2008",
    "FLAG_POWERPC_LIB64",
    "FLAG_REQUIRED_MASK",
    "FLAG_RISCV_FLOAT_ABI_DOUBLE",
    "FLAG_RISCV_FLOAT_ABI_SOFT",
    "FLAG_S390_LIB64",
    "FLAG_SPARC_LIB64",
    "FLAG_TYPE_MASK",
    "FLAG_X8664_LIB64",
    "FLAG_X8664_LIBX32",
    "HWCAP_EXTENSION",
    "HWCAP_ISA_LEVEL_MASK",
    "CacheEntry",
    "abi_flags",
    "build",
    "libcmp",
    "merge",
    "parse",
]

# --- Entry flags (glibc sysdeps/generic/ldconfig.h) -------------------------------------
# The low byte says what kind of library it is; the second byte names the ABI.

FLAG_TYPE_MASK = 0x00FF
FLAG_LIBC4 = 0x0000
FLAG_ELF = 0x0001
FLAG_ELF_LIBC5 = 0x0002
FLAG_ELF_LIBC6 = 0x0003
FLAG_REQUIRED_MASK = 0xFF00
FLAG_SPARC_LIB64 = 0x0100
FLAG_IA64_LIB64 = 0x0200
FLAG_X8664_LIB64 = 0x0300
FLAG_S390_LIB64 = 0x0400
FLAG_POWERPC_LIB64 = 0x0500
FLAG_MIPS64_LIBN32 = 0x0600
FLAG_MIPS64_LIBN64 = 0x0700
FLAG_X8664_LIBX32 = 0x0800
FLAG_ARM_LIBHF = 0x0900
FLAG_AARCH64_LIB64 = 0x0A00
FLAG_ARM_LIBSF = 0x0B00
FLAG_MIPS_LIB32_NAN2008 = 0x0C00
FLAG_MIPS64_LIBN32_NAN2008 = 0x0D00
FLAG_MIPS64_LIBN64_NAN2008 = 0x0E00
FLAG_RISCV_FLOAT_ABI_SOFT = 0x0F00
FLAG_RISCV_FLOAT_ABI_DOUBLE = 0x1000
FLAG_LARCH_FLOAT_ABI_SOFT = 0x1100
FLAG_LARCH_FLOAT_ABI_DOUBLE = 0x1200

# --- hwcap field (glibc sysdeps/generic/dl-cache.h) -------------------------------------

#: Bit 62 of an entry's hwcap: the entry comes from a ``glibc-hwcaps`` subdirectory and the
#: low 32 bits index the glibc-hwcaps extension section.
HWCAP_EXTENSION = 1 << 62
#: Bits 32..41 of an extension entry's hwcap carry an ISA level (glibc 2.33-2.36).
HWCAP_ISA_LEVEL_MASK = 0x3FF

_HWCAP_INDEX_MASK = 0xFFFF_FFFF
_U32_MAX = 0xFFFF_FFFF
_U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

# --- On-disk layouts (glibc sysdeps/generic/dl-cache.h) ---------------------------------

_OLD_MAGIC = b"ld.so-1.7.0"
_NEW_MAGIC = b"glibc-ld.so.cache1.1"  # CACHEMAGIC_NEW followed by CACHE_VERSION
_EXT_MAGIC = 0xEAA42174  # cache_extension_magic, (uint32_t) -358342284
_EXT_TAG_GENERATOR = 0
_EXT_TAG_GLIBC_HWCAPS = 1
_ENDIAN_UNSET = 0
_ENDIAN_INVALID = 1
_ENDIAN_LITTLE = 2
_ENDIAN_BIG = 3


class _Layout(Record):
    old_header: struct.Struct  # magic[11], pad, u32 nlibs
    old_entry: struct.Struct  # i32 flags, u32 key, u32 value
    new_header: struct.Struct  # magic+version[20], nlibs, len_strings, u8 flags, pad[3],
    #                            extension_offset, unused[3]
    new_entry: struct.Struct  # i32 flags, u32 key, u32 value, u32 osversion, u64 hwcap
    ext_header: struct.Struct  # u32 magic, u32 count
    ext_section: struct.Struct  # u32 tag, u32 flags, u32 offset, u32 size
    u32: struct.Struct


def _layout(order: _Order) -> _Layout:
    return _Layout(
        old_header=struct.Struct(order + "11sxI"),
        old_entry=struct.Struct(order + "iII"),
        new_header=struct.Struct(order + "20sIIB3xI12x"),
        new_entry=struct.Struct(order + "iIIIQ"),
        ext_header=struct.Struct(order + "II"),
        ext_section=struct.Struct(order + "IIII"),
        u32=struct.Struct(order + "I"),
    )


_LAYOUTS: dict[_Order, _Layout] = {"<": _layout("<"), ">": _layout(">")}
_NATIVE: _Order = "<" if sys.byteorder == "little" else ">"
_OTHER: _Order = ">" if _NATIVE == "<" else "<"

_OLD_HEADER_SIZE = 16
_OLD_ENTRY_SIZE = 12
_NEW_HEADER_SIZE = 48
_NEW_ENTRY_SIZE = 24
_EXT_HEADER_SIZE = 8
_EXT_SECTION_SIZE = 16
assert _LAYOUTS["<"].old_header.size == _OLD_HEADER_SIZE
assert _LAYOUTS["<"].old_entry.size == _OLD_ENTRY_SIZE
assert _LAYOUTS["<"].new_header.size == _NEW_HEADER_SIZE
assert _LAYOUTS["<"].new_entry.size == _NEW_ENTRY_SIZE

# --- What `ldconfig -p` prints for the flags (glibc elf/cache.c, print_entry) ------------

_TYPE_NAMES = {
    FLAG_LIBC4: "libc4",
    FLAG_ELF: "ELF",
    FLAG_ELF_LIBC5: "libc5",
    FLAG_ELF_LIBC6: "libc6",
}
_ABI_NAMES = {
    FLAG_SPARC_LIB64: "64bit",
    FLAG_IA64_LIB64: "IA-64",
    FLAG_X8664_LIB64: "x86-64",
    FLAG_S390_LIB64: "64bit",
    FLAG_POWERPC_LIB64: "64bit",
    FLAG_MIPS64_LIBN32: "N32",
    FLAG_MIPS64_LIBN64: "64bit",
    FLAG_X8664_LIBX32: "x32",
    FLAG_ARM_LIBHF: "hard-float",
    FLAG_AARCH64_LIB64: "AArch64",
    FLAG_ARM_LIBSF: "soft-float",
    FLAG_MIPS_LIB32_NAN2008: "nan2008",
    FLAG_MIPS64_LIBN32_NAN2008: "N32,nan2008",
    FLAG_MIPS64_LIBN64_NAN2008: "64bit,nan2008",
    FLAG_RISCV_FLOAT_ABI_SOFT: "soft-float",
    FLAG_RISCV_FLOAT_ABI_DOUBLE: "double-float",
    FLAG_LARCH_FLOAT_ABI_SOFT: "soft-float",
    FLAG_LARCH_FLOAT_ABI_DOUBLE: "double-float",
}
# ABI bytes that can only describe a 64-bit library. RISC-V's float-ABI flags are used for
# both RV32 and RV64, so they are not in here; LoongArch glibc is LP64 only.
_ABI_64BIT = frozenset(
    {
        FLAG_SPARC_LIB64,
        FLAG_IA64_LIB64,
        FLAG_X8664_LIB64,
        FLAG_S390_LIB64,
        FLAG_POWERPC_LIB64,
        FLAG_MIPS64_LIBN64,
        FLAG_AARCH64_LIB64,
        FLAG_MIPS64_LIBN64_NAN2008,
        FLAG_LARCH_FLOAT_ABI_SOFT,
        FLAG_LARCH_FLOAT_ABI_DOUBLE,
    }
)


class CacheEntry(Record):
    """One ``ld.so.cache`` entry: the loader maps ``soname`` to ``path`` when ``flags`` fit.

    Attributes:
        soname: the lookup key (the library's ``DT_SONAME``, or its file name if it has none).
        path: the file the loader opens, as written by ``ldconfig`` (absolute, in the terms of
            the root the cache belongs to).
        flags: ``int32`` kind and ABI of the library, e.g. ``0x0303`` (``FLAG_ELF_LIBC6 |
            FLAG_X8664_LIB64``) for an x86-64 glibc library (``ldconfig.h``).
        osversion: minimum kernel version ``0xOOMMmmpp`` from the ABI note (new format only;
            0 when absent; glibc 2.36's ``ldconfig`` always writes 0).
        hwcap: the legacy hwcap mask (``tls``, ``haswell``, ... subdirectories; bit 63 is
            ``tls``), or for a glibc-hwcaps entry :data:`HWCAP_EXTENSION` plus the ISA level
            in bits 32..41. The on-disk index in the low 32 bits is *not* kept: it only
            means something inside one file, and :func:`build` computes it again.
        hwcaps_subdir: the ``glibc-hwcaps`` subdirectory name (``"x86-64-v3"``) of a
            glibc-hwcaps entry, else ``None``. A file whose hwcaps index points nowhere
            gives an entry with ``hwcaps_subdir=None`` and the raw ``hwcap`` (as
            ``ldconfig -p`` prints it as a number); :func:`build` refuses such an entry.

    Giving ``hwcaps_subdir`` with ``hwcap=0`` means ``hwcap=HWCAP_EXTENSION``.

    Raises:
        ValueError: ``hwcaps_subdir`` is set but ``hwcap`` is not an extension value
            without index bits.
    """

    soname: str
    path: str
    flags: int
    osversion: int = 0
    hwcap: int = 0
    hwcaps_subdir: str | None = None

    def __post_init__(self) -> None:
        if self.hwcaps_subdir is not None:
            if self.hwcap == 0:
                object.__setattr__(self, "hwcap", HWCAP_EXTENSION)
            elif not _is_extension(self.hwcap) or self.hwcap & _HWCAP_INDEX_MASK:
                raise ValueError(
                    f"hwcaps_subdir {self.hwcaps_subdir!r} needs hwcap = HWCAP_EXTENSION"
                    f" | isa_level << 32, not {self.hwcap:#x}"
                )

    @property
    def abi(self) -> str:
        """The library kind and ABI as ``ldconfig -p`` prints them inside the parentheses,
        without the hwcap part: ``"libc6,x86-64"`` (0x0303), ``"libc6"`` (0x0003, i386 and
        other 32-bit glibc libraries), ``"ELF"`` (0x0001), ``"libc6,AArch64"`` (0x0a03),
        ``"libc6,hard-float"`` (0x0903), ``"libc6,64bit"`` (0x0503, ppc64le). An unknown
        kind prints as ``unknown`` and an unknown ABI byte as its decimal value
        (glibc ``elf/cache.c``, ``print_entry``). LoongArch's 0x1100/0x1200 print as
        ``soft-float``/``double-float`` as in later glibc; 2.36's ``ldconfig`` still prints
        their numbers."""
        kind = _TYPE_NAMES.get(self.flags & FLAG_TYPE_MASK, "unknown")
        required = self.flags & FLAG_REQUIRED_MASK
        if required == 0:
            return kind
        return f"{kind},{_ABI_NAMES.get(required, str(required))}"

    @property
    def is_64bit(self) -> bool:
        """True when the ABI byte names a 64-bit ABI (x86-64, AArch64, ppc64, s390x,
        sparc64, IA-64, MIPS n64, LoongArch). False for 32-bit ABIs and for RISC-V, whose
        flags say the float ABI but not the word size (``ldconfig.h``)."""
        return (self.flags & FLAG_REQUIRED_MASK) in _ABI_64BIT


def _is_extension(hwcap: int) -> bool:
    """``dl_cache_hwcap_extension`` (``dl-cache.h``): bit 62 set and, above bit 31, nothing
    else but the ISA level bits."""
    return (hwcap >> 32) & ~HWCAP_ISA_LEVEL_MASK == HWCAP_EXTENSION >> 32


# --- ABI flags for a machine --------------------------------------------------------------

#: ABI byte (``flags & 0xff00``) of libraries for an ELF machine, by the ``e_machine`` name
#: pyelftools reports, for the ELF class the machine's glibc uses (64-bit machines: class
#: 64). :func:`abi_flags` is the complete rule, including the other class.
ABI_FLAGS_FOR_MACHINE: dict[str, int] = {
    "EM_X86_64": FLAG_X8664_LIB64,
    "EM_386": 0,
    "EM_AARCH64": FLAG_AARCH64_LIB64,
    "EM_ARM": FLAG_ARM_LIBHF,
    "EM_PPC64": FLAG_POWERPC_LIB64,
    "EM_PPC": 0,
    "EM_S390": FLAG_S390_LIB64,
    "EM_SPARCV9": FLAG_SPARC_LIB64,
    "EM_IA_64": FLAG_IA64_LIB64,
    "EM_RISCV": FLAG_RISCV_FLOAT_ABI_DOUBLE,
    "EM_LOONGARCH": FLAG_LARCH_FLOAT_ABI_DOUBLE,
}

# (class, machine) pairs whose ABI byte differs from ABI_FLAGS_FOR_MACHINE, or that glibc
# cannot load (None).
_ABI_FOR_CLASS: dict[tuple[int, str], int | None] = {
    (32, "EM_X86_64"): FLAG_X8664_LIBX32,
    (64, "EM_386"): None,
    (32, "EM_AARCH64"): None,
    (64, "EM_ARM"): None,
    (32, "EM_PPC64"): None,
    (64, "EM_PPC"): None,
    (32, "EM_S390"): 0,
    (32, "EM_SPARCV9"): None,
    (32, "EM_IA_64"): None,
    (32, "EM_LOONGARCH"): None,
}


def abi_flags(elf_class: int, machine: str) -> int:
    """Full cache flags ``ldconfig`` records for a glibc library of this ELF class and
    machine: ``FLAG_ELF_LIBC6`` plus the ABI byte.

    Args:
        elf_class: 32 or 64 (pyelftools' ``ELFFile.elfclass``).
        machine: ``e_machine`` as pyelftools names it, e.g. ``"EM_X86_64"``.

    Returns:
        e.g. ``0x0303`` for (64, ``"EM_X86_64"``), ``0x0003`` for (32, ``"EM_386"``),
        ``0x0803`` for x32, ``0x0a03`` for AArch64, ``0x0903`` for 32-bit ARM (hard-float,
        as on Debian/Ubuntu armhf; soft-float would need ``e_flags``), ``0x0503`` for
        ppc64/ppc64le, ``0x1003`` for RISC-V lp64d/ilp32d (double-float).

    Raises:
        ValueError: unknown machine, or a class glibc does not support for it.

    Source: the per-architecture ``readelflib.c`` and ``dl-cache.h`` in glibc ``sysdeps``.
    A library that does not link libc may be recorded with ``FLAG_ELF`` (1) instead of 3.
    """
    if elf_class not in (32, 64):
        raise ValueError(f"ELF class must be 32 or 64, not {elf_class!r}")
    if machine not in ABI_FLAGS_FOR_MACHINE:
        raise ValueError(f"no ld.so.cache ABI flags known for machine {machine!r}")
    required = _ABI_FOR_CLASS.get((elf_class, machine), ABI_FLAGS_FOR_MACHINE[machine])
    if required is None:
        raise ValueError(f"glibc has no {elf_class}-bit ABI for machine {machine!r}")
    return required | FLAG_ELF_LIBC6


# --- Name order (glibc elf/dl-cache.c, _dl_cache_libcmp) ----------------------------------

_SIGNED_CHAR_MACHINES = (
    "x86_64",
    "i386",
    "i486",
    "i586",
    "i686",
    "mips",
    "sparc",
    "ia64",
    "loongarch",
    "alpha",
    "sh",
)
#: Whether C ``char`` is signed on this machine (x86 and a few others) or unsigned (ARM,
#: AArch64, POWER, s390, RISC-V). It decides where bytes >= 0x80 sort.
CHAR_IS_SIGNED: bool = os.uname().machine.startswith(_SIGNED_CHAR_MACHINES)


def _wrap32(value: int) -> int:
    value &= _U32_MAX
    return value - (1 << 32) if value & 0x8000_0000 else value


def _digits_value(run: bytes) -> int:
    """Value of a run of ASCII digits as a C ``int`` accumulating it wraps (mod 2**32)."""
    if len(run) <= 18:
        return _wrap32(int(run))
    value = 0
    for start in range(0, len(run), 9):
        chunk = run[start : start + 9]
        value = (value * 10 ** len(chunk) + int(chunk)) & _U32_MAX
    return _wrap32(value)


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def libcmp(a: str, b: str, *, signed_char: bool = CHAR_IS_SIGNED) -> int:
    """Compare two sonames the way the loader does; negative, zero or positive.

    glibc's ``_dl_cache_libcmp`` (``elf/dl-cache.c``), on the UTF-8 (``surrogateescape``)
    bytes of the names: a run of ASCII digits in both names compares by its numeric value
    (so ``libfoo.so.10 > libfoo.so.9`` and ``libx01 == libx1``); a digit sorts after any
    other byte and after the end of the name; other bytes compare by value as C ``char``,
    signed on x86 (bytes >= 0x80 are negative there) unless ``signed_char`` says otherwise.
    Digit runs accumulate in a 32-bit ``int`` that wraps and are compared by subtracting
    with wrap-around, as the compiled C does. A NUL ends a name, as in C.

    Returns:
        exactly the value glibc's function returns (its sign is what matters).
    """
    p = _encode(a).split(b"\0", 1)[0]
    q = _encode(b).split(b"\0", 1)[0]
    np, nq = len(p), len(q)
    i = j = 0
    while i < np:
        c = p[i]
        d = q[j] if j < nq else 0
        if 48 <= c <= 57:
            if not 48 <= d <= 57:
                return 1
            i2 = i + 1
            while i2 < np and 48 <= p[i2] <= 57:
                i2 += 1
            j2 = j + 1
            while j2 < nq and 48 <= q[j2] <= 57:
                j2 += 1
            v1 = _digits_value(p[i:i2])
            v2 = _digits_value(q[j:j2])
            if v1 != v2:
                return _wrap32(v1 - v2)
            i, j = i2, j2
            continue
        if 48 <= d <= 57:
            return -1
        if c != d:
            return _char(c, signed_char) - _char(d, signed_char)
        i += 1
        j += 1
    return -_char(q[j], signed_char) if j < nq else 0


def _char(byte: int, signed: bool) -> int:
    return byte - 256 if signed and byte >= 128 else byte


_DIGIT_TOKEN = 1 << 40  # above every byte token


_DIGITS = frozenset(b"0123456789")


def split_digit_runs(data: bytes) -> list[bytes]:
    """``re.split(rb"([0-9]+)", data)`` without :mod:`re` (whose import costs a third of
    the interpreter's start, in the createContainer hook that writes the cache): non-digit
    runs and digit runs alternating, starting and ending with a (possibly empty) non-digit
    run."""
    parts: list[bytes] = []
    start = 0
    i = 0
    n = len(data)
    while i < n:
        if data[i] in _DIGITS:
            j = i + 1
            while j < n and data[j] in _DIGITS:
                j += 1
            parts.append(data[start:i])
            parts.append(data[i:j])
            start = i = j
        else:
            i += 1
    parts.append(data[start:])
    return parts


def _libcmp_key(name: str, signed: bool) -> tuple[int, ...]:
    """A sort key ordering names as :func:`libcmp` does.

    Each non-digit byte becomes its C ``char`` value, each digit run ``_DIGIT_TOKEN`` plus
    its wrapped value, and the end of the name a 0 (the NUL the C code reads). Exact
    whenever two digit runs differ by less than 2**31 (always for runs of 9 digits or
    fewer); beyond that the C comparison is not a consistent order, and ``ldconfig``'s
    result depends on the order it met the files in.
    """
    out: list[int] = []
    parts = split_digit_runs(_encode(name).split(b"\0", 1)[0])
    # parts alternate: non-digit bytes, digit run, non-digit bytes, ...
    for i, part in enumerate(parts):
        if i % 2:
            out.append(_DIGIT_TOKEN + _digits_value(part))
        elif part.isascii() or not signed:
            out += part
        else:
            out += (c - 256 if c >= 128 else c for c in part)
    out.append(0)
    return tuple(out)


# --- Parsing ------------------------------------------------------------------------------


class _Reader:
    """Bounds-checked access to the cache bytes; every failure is an LdCacheError."""

    __slots__ = ("data", "path", "size", "strings")

    def __init__(self, data: bytes, path: str | None) -> None:
        self.data = data
        self.path = path
        self.size = len(data)
        self.strings: dict[int, str] = {}

    def error(self, message: str, offset: int) -> LdCacheError:
        return LdCacheError(message, offset=offset, path=self.path)

    def string(self, offset: int, where: int, what: str) -> str:
        """The NUL-terminated string at file ``offset``; ``where`` is the field naming it."""
        cached = self.strings.get(offset)
        if cached is not None:
            return cached
        if offset >= self.size:
            raise self.error(f"{what} string offset {offset} is past the end of the file", where)
        end = self.data.find(b"\0", offset)
        if end < 0:
            raise self.error(f"{what} string is not NUL-terminated", offset)
        text = self.data[offset:end].decode("utf-8", "surrogateescape")
        self.strings[offset] = text
        return text


def parse(data: bytes, *, path: str | None = None) -> tuple[CacheEntry, ...]:
    """Parse the bytes of an ``ld.so.cache`` file.

    Args:
        data: the whole file (bytes-like). An empty file gives ``()``, as ``ldconfig -p``
            treats it as an empty cache.
        path: the file's path, only used in error messages.

    Returns:
        the entries in file order (the order the loader searches). For a compat file, the
        entries of its new-format block. Old-format entries have ``osversion`` and
        ``hwcap`` 0.

    Byte order: the new header's flags byte says it (2 little-endian, 3 big-endian). When
    it is 0 (``ldconfig`` before glibc 2.32) or the format is old, the byte order whose
    entry count fits the file is used, this machine's first.

    glibc-hwcaps: the extension directory is at ``extension_offset``, a file offset; the
    glibc-hwcaps section holds one ``u32`` per subdirectory name, which readers (``ld.so``
    and ``ldconfig -p``) take as a file offset of the name, so this parser does too. (In a
    compat file ``ldconfig`` 2.33-2.36 writes them relative to the new header instead, so
    both glibc readers and this parser see wrong names there.) Invalid glibc-hwcaps
    sections are ignored as ``cache_extension_verify`` ignores them.

    Raises:
        LdCacheError: bad magic, a count or offset that points outside ``data``, a string
            without its NUL, a cache marked invalid (flags 1), or a malformed extension
            directory; ``offset`` is where in the file it was found.

    Source: glibc ``sysdeps/generic/dl-cache.h`` (layouts, ``cache_extension_load``) and
    ``elf/cache.c`` (``print_cache``).
    """
    if not isinstance(data, bytes):
        data = bytes(data)
    reader = _Reader(data, path)
    if not data:
        return ()
    if data.startswith(_OLD_MAGIC):
        return _parse_old_or_compat(reader)
    if data.startswith(_NEW_MAGIC):
        return _parse_new(reader, 0)
    if _OLD_MAGIC.startswith(data) or _NEW_MAGIC.startswith(data):
        raise reader.error("file is truncated inside the magic", len(data))
    raise reader.error("not an ld.so.cache file (unknown magic)", 0)


def _parse_old_or_compat(reader: _Reader) -> tuple[CacheEntry, ...]:
    data, size = reader.data, reader.size
    if size < _OLD_HEADER_SIZE:
        raise reader.error("file is truncated inside the old-format header", size)
    room = (size - _OLD_HEADER_SIZE) // _OLD_ENTRY_SIZE
    candidates: list[tuple[_Order, int]] = []
    for order in (_NATIVE, _OTHER):
        (_magic, nlibs) = _LAYOUTS[order].old_header.unpack_from(data, 0)
        if nlibs <= room:
            candidates.append((order, nlibs))
    if not candidates:
        (_magic, nlibs) = _LAYOUTS[_NATIVE].old_header.unpack_from(data, 0)
        raise reader.error(f"old-format entry count {nlibs} does not fit in the file", 12)
    for _order, nlibs in candidates:
        new_at = _OLD_HEADER_SIZE + nlibs * _OLD_ENTRY_SIZE
        new_at = (new_at + 7) & ~7
        if new_at + _NEW_HEADER_SIZE <= size and data.startswith(_NEW_MAGIC, new_at):
            return _parse_new(reader, new_at)
    order, nlibs = candidates[0]
    layout = _LAYOUTS[order]
    strings_at = _OLD_HEADER_SIZE + nlibs * _OLD_ENTRY_SIZE
    entries = []
    table = data[_OLD_HEADER_SIZE:strings_at]
    for index, (flags, key, value) in enumerate(layout.old_entry.iter_unpack(table)):
        where = _OLD_HEADER_SIZE + index * _OLD_ENTRY_SIZE
        soname = reader.string(strings_at + key, where + 4, "soname")
        target = reader.string(strings_at + value, where + 8, "path")
        entries.append(CacheEntry(soname, target, flags))
    return tuple(entries)


def _parse_new(reader: _Reader, base: int) -> tuple[CacheEntry, ...]:
    data, size = reader.data, reader.size
    if base + _NEW_HEADER_SIZE > size:
        raise reader.error("file is truncated inside the new-format header", size)
    room = (size - base - _NEW_HEADER_SIZE) // _NEW_ENTRY_SIZE
    endian = data[base + 28] & _ENDIAN_BIG
    if endian == _ENDIAN_INVALID:
        raise reader.error("cache is marked invalid (endianness flags 1)", base + 28)
    if endian == _ENDIAN_LITTLE:
        order: _Order = "<"
    elif endian == _ENDIAN_BIG:
        order = ">"
    else:
        order = _NATIVE
        (_m, nlibs, _ls, _f, _x) = _LAYOUTS[_NATIVE].new_header.unpack_from(data, base)
        if nlibs > room:
            order = _OTHER
    layout = _LAYOUTS[order]
    (_magic, nlibs, _len_strings, _flags, ext_offset) = layout.new_header.unpack_from(data, base)
    if nlibs > room:
        raise reader.error(f"entry count {nlibs} does not fit in the file", base + 20)
    hwcaps = _read_extensions(reader, layout, ext_offset, base + 32) if ext_offset else None
    entries_at = base + _NEW_HEADER_SIZE
    table = data[entries_at : entries_at + nlibs * _NEW_ENTRY_SIZE]
    entries = []
    for index, (flags, key, value, osversion, hwcap) in enumerate(
        layout.new_entry.iter_unpack(table)
    ):
        where = entries_at + index * _NEW_ENTRY_SIZE
        soname = reader.string(base + key, where + 4, "soname")
        target = reader.string(base + value, where + 8, "path")
        subdir = None
        if hwcap and _is_extension(hwcap):
            subdir = _hwcaps_name(reader, hwcaps, hwcap & _HWCAP_INDEX_MASK)
            if subdir is not None:
                hwcap &= ~_HWCAP_INDEX_MASK
        entries.append(CacheEntry(soname, target, flags, osversion, hwcap, subdir))
    return tuple(entries)


def _read_extensions(
    reader: _Reader, layout: _Layout, ext_offset: int, field: int
) -> _Hwcaps | None:
    """Check the extension directory as ``cache_extension_load`` does; return the
    glibc-hwcaps section (file offset, name offsets) if there is a valid one. ``field`` is
    the file offset of the header's ``extension_offset``."""
    size = reader.size
    if ext_offset % 4:
        raise reader.error(f"extension directory offset {ext_offset} is not 4-aligned", field)
    if ext_offset + _EXT_HEADER_SIZE > size:
        raise reader.error(f"extension directory offset {ext_offset} is past the end", field)
    magic, count = layout.ext_header.unpack_from(reader.data, ext_offset)
    if magic != _EXT_MAGIC:
        raise reader.error(f"bad extension directory magic {magic:#010x}", ext_offset)
    first = ext_offset + _EXT_HEADER_SIZE
    if count > (size - first) // _EXT_SECTION_SIZE:
        raise reader.error(f"extension count {count} does not fit in the file", ext_offset + 4)
    section: tuple[int, int] | None = None
    for index in range(count):
        at = first + index * _EXT_SECTION_SIZE
        tag, _flags, offset, length = layout.ext_section.unpack_from(reader.data, at)
        if offset + length > size:
            raise reader.error(f"extension section {index} extends past the end of the file", at)
        if tag == _EXT_TAG_GLIBC_HWCAPS:
            section = (offset, length)
    if section is None:
        return None
    offset, length = section
    # cache_extension_verify drops an empty or misaligned glibc-hwcaps section.
    if length == 0 or offset % 4 or length % 4:
        return None
    names = tuple(n for (n,) in layout.u32.iter_unpack(reader.data[offset : offset + length]))
    return _Hwcaps(offset, names)


class _Hwcaps(Record):
    offset: int  # file offset of the u32 array
    names: tuple[int, ...]  # file offsets of the subdirectory names


def _hwcaps_name(reader: _Reader, hwcaps: _Hwcaps | None, index: int) -> str | None:
    """Name of glibc-hwcaps subdirectory ``index``, or None where glibc finds none
    (``glibc_hwcaps_string`` in ``elf/cache.c``)."""
    if hwcaps is None or index >= len(hwcaps.names):
        return None
    offset = hwcaps.names[index]
    if offset >= reader.size:
        return None
    return reader.string(offset, hwcaps.offset + 4 * index, "glibc-hwcaps name")


# --- Ordering and writing ----------------------------------------------------------------


def _strcmp_desc_key(name: bytes) -> tuple[int, ...]:
    """A key that sorts byte strings in *descending* ``strcmp`` order (used under
    ``reverse=True`` to get ascending names)."""
    return (*(-b for b in name), 1)


def _order_key(entry: CacheEntry, signed: bool) -> tuple[object, ...]:
    """Key for ``sorted(..., reverse=True)`` that reproduces ``compare`` in glibc 2.36
    ``elf/cache.c``: sonames descending by :func:`libcmp`; then flags descending; then
    glibc-hwcaps entries first, by subdirectory name ascending (``strcmp``); then legacy
    hwcap entries with more bits set first, then larger hwcap, then larger osversion."""
    name = _libcmp_key(entry.soname, signed)
    if entry.hwcaps_subdir is None:
        legacy = entry.hwcap
        return (name, entry.flags, 0, (), legacy.bit_count(), legacy, entry.osversion)
    # In ldconfig's memory a glibc-hwcaps entry has hwcap 0; its ISA level does not sort.
    sub = _strcmp_desc_key(_encode(entry.hwcaps_subdir))
    return (name, entry.flags, 1, sub, 0, 0, entry.osversion)


def _check_text(value: str, what: str, entry: CacheEntry) -> bytes:
    raw = _encode(value)
    if b"\0" in raw:
        raise ValueError(f"{what} of {entry!r} contains a NUL byte")
    return raw


def build(
    entries: Iterable[CacheEntry],
    *,
    byteorder: Literal["little", "big"] | None = None,
    generator: str | None = "ocihook",
) -> bytes:
    """Write a new-format (``glibc-ld.so.cache1.1``) cache holding ``entries``.

    Args:
        entries: the entries, in any order. All are written, duplicates included; entries
            that ``ldconfig`` considers equal (same soname up to :func:`libcmp`, same flags,
            hwcaps and hwcap) keep their relative input order, and the loader uses the
            first of them. To replace entries, use :func:`merge` first.
        byteorder: ``"little"`` or ``"big"``; default this machine's. The header's flags
            byte records it (2 or 3).
        generator: text of the extension's generator section (``ldconfig -p`` prints it as
            "Cache generated by: ..."); ``None`` writes no generator section.

    Returns:
        the file contents: header, entries sorted exactly as ``ldconfig`` sorts them (see
        ``compare`` and ``save_cache`` in glibc 2.36 ``elf/cache.c``; the loader's binary
        search in ``elf/dl-cache.c`` relies on it), a string table with shared suffixes,
        and, when there is a generator or a glibc-hwcaps entry, the extension directory
        (``extension_offset`` 0 otherwise). glibc-hwcaps names are listed in ``strcmp``
        order and each such entry's hwcap gets its index in the low 32 bits, as
        ``ldconfig`` does.

    Raises:
        ValueError: a string contains NUL; ``flags`` is not an ``int32``, ``osversion`` not
            a ``uint32`` or ``hwcap`` not a ``uint64``; an entry has the glibc-hwcaps bit
            but no ``hwcaps_subdir``; or the file would exceed 4 GiB.
    """
    order: _Order = _NATIVE if byteorder is None else ("<" if byteorder == "little" else ">")
    layout = _LAYOUTS[order]
    signed = CHAR_IS_SIGNED
    ordered = sorted(entries, key=lambda e: _order_key(e, signed), reverse=True)

    subdirs: set[bytes] = set()
    strings: set[bytes] = set()
    encoded: list[tuple[bytes, bytes, bytes | None]] = []
    for entry in ordered:
        if not -(1 << 31) <= entry.flags < (1 << 31):
            raise ValueError(f"flags of {entry!r} do not fit in an int32")
        if not 0 <= entry.osversion <= _U32_MAX:
            raise ValueError(f"osversion of {entry!r} does not fit in a uint32")
        if not 0 <= entry.hwcap <= _U64_MAX:
            raise ValueError(f"hwcap of {entry!r} does not fit in a uint64")
        soname = _check_text(entry.soname, "soname", entry)
        target = _check_text(entry.path, "path", entry)
        sub: bytes | None = None
        if entry.hwcaps_subdir is not None:
            sub = _check_text(entry.hwcaps_subdir, "hwcaps_subdir", entry)
            subdirs.add(sub)
            strings.add(sub)
        elif _is_extension(entry.hwcap):
            raise ValueError(f"{entry!r} has the glibc-hwcaps bit but no hwcaps_subdir")
        strings.add(soname)
        strings.add(target)
        encoded.append((soname, target, sub))

    count = len(ordered)
    strings_at = _NEW_HEADER_SIZE + count * _NEW_ENTRY_SIZE
    table, where = _string_table(strings)
    len_strings = len(table)
    hwcaps_names = sorted(subdirs)  # strcmp order, as assign_glibc_hwcaps_indices
    hwcaps_index = {name: i for i, name in enumerate(hwcaps_names)}

    body = bytearray(strings_at)
    for i, (entry, (soname, target, sub)) in enumerate(zip(ordered, encoded, strict=True)):
        hwcap = entry.hwcap if sub is None else entry.hwcap | hwcaps_index[sub]
        layout.new_entry.pack_into(
            body,
            _NEW_HEADER_SIZE + i * _NEW_ENTRY_SIZE,
            entry.flags,
            strings_at + where[soname],
            strings_at + where[target],
            entry.osversion,
            hwcap,
        )
    body += table

    ext_offset = 0
    gen = _encode(generator) if generator is not None else None
    if gen is not None or hwcaps_names:
        ext_offset = (len(body) + 3) & ~3
        body += bytes(ext_offset - len(body))
        sections: list[tuple[int, bytes]] = []
        if gen is not None:
            sections.append((_EXT_TAG_GENERATOR, gen))
        if hwcaps_names:
            array = b"".join(layout.u32.pack(strings_at + where[n]) for n in hwcaps_names)
            sections.append((_EXT_TAG_GLIBC_HWCAPS, array))
        # Put the 4-aligned hwcaps array first, right after the directory.
        payload_at = ext_offset + _EXT_HEADER_SIZE + len(sections) * _EXT_SECTION_SIZE
        placed: dict[int, int] = {}
        for tag, blob in sorted(sections, key=lambda s: -s[0]):
            placed[tag] = payload_at
            payload_at += len(blob)
        body += layout.ext_header.pack(_EXT_MAGIC, len(sections))
        for tag, blob in sections:
            body += layout.ext_section.pack(tag, 0, placed[tag], len(blob))
        for _tag, blob in sorted(sections, key=lambda s: -s[0]):
            body += blob

    if len(body) > _U32_MAX:
        raise ValueError("the cache would be larger than 4 GiB")
    endian = _ENDIAN_LITTLE if order == "<" else _ENDIAN_BIG
    layout.new_header.pack_into(body, 0, _NEW_MAGIC, count, len_strings, endian, ext_offset)
    return bytes(body)


def _string_table(strings: set[bytes]) -> tuple[bytes, dict[bytes, int]]:
    """Lay out NUL-terminated strings, storing a string that is the tail of another only
    once (a soname is usually the tail of its path). Returns the table and each string's
    offset in it."""
    by_tail = sorted(strings, key=lambda s: s[::-1])
    where: dict[bytes, int] = {}
    chunks: list[bytes] = []
    size = 0
    following: bytes | None = None
    following_at = 0
    for s in reversed(by_tail):
        # Every string that ends with s sorts right after s; if any does, the next one does.
        if following is not None and following.endswith(s):
            at = following_at + len(following) - len(s)
        else:
            at = size
            chunks.append(s + b"\0")
            size += len(s) + 1
        where[s] = at
        following, following_at = s, at
    return b"".join(chunks), where


def merge(existing: Iterable[CacheEntry], added: Iterable[CacheEntry]) -> tuple[CacheEntry, ...]:
    """Add entries to a cache's entries, replacing what they supersede.

    An added entry replaces every existing entry with the same ``soname``, ``flags``,
    ``hwcap`` and ``hwcaps_subdir`` (so an x86-64 ``libcuda.so.1`` replaces the
    container's x86-64 one but not its i386 one, nor a glibc-hwcaps variant). Among added
    entries with the same key, the last one wins.

    Returns:
        the existing entries that were not replaced, in their order, then the added ones in
        the order their keys first appear. Pass it to :func:`build`, which sorts.
    """

    def key(e: CacheEntry) -> tuple[str, int, int, str | None]:
        return (e.soname, e.flags, e.hwcap, e.hwcaps_subdir)

    latest: dict[tuple[str, int, int, str | None], CacheEntry] = {}
    for entry in added:
        latest[key(entry)] = entry
    kept = [e for e in existing if key(e) not in latest]
    return (*kept, *latest.values())
