"""A minimal ELF reader for discovery's hot path: the ABI note and the dynamic section.

:mod:`ocihook.elf` reads ELF files with pyelftools, whose import costs more than starting
a container; discovery runs on every container start and needs only three facts, so it
reads them here from the program headers (System V gABI, "Program Header", "Note
Section", "Dynamic Section"; glibc ``elf/elf.h`` for the GNU ABI note):

* :func:`abi_tag` — the ``NT_GNU_ABI_TAG`` note (libnvidia-tls must say Linux 2.3.99);
* :func:`dynamic_names` — DT_SONAME and the DT_NEEDED list.

Every offset, size and count is bounded by the bytes read; a malformed file gives
``None`` (or empty results), never an exception. The tests check both functions against
pyelftools on generated files of every class and byte order and on NVIDIA's real
libraries.
"""

from __future__ import annotations

import struct

__all__ = ["ELF_MACHINE_NAMES", "abi_tag", "dynamic_names", "identify"]

#: e_machine numbers of the machines ocihook knows, by the names pyelftools and
#: :func:`ocihook.ldcache.abi_flags` use (System V gABI).
ELF_MACHINE_NAMES = {62: "EM_X86_64", 3: "EM_386", 183: "EM_AARCH64", 40: "EM_ARM", 21: "EM_PPC64"}

#: The most bytes read for one piece (program headers, a note segment, the dynamic
#: section, the string table); pieces are read where they are, with ``pread``.
MAX_PIECE = 4 << 20

PT_LOAD, PT_DYNAMIC, PT_NOTE = 1, 2, 4
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14


class _File:
    """Bounded positional reads of one file (``os.pread``); never raises. ``path`` is a
    host path, or an open descriptor (not closed here). Only regular files are read: a
    FIFO or a device would block or have side effects."""

    def __init__(self, path: str | int) -> None:
        import os
        import stat

        self._os = os
        self._own = isinstance(path, str)
        try:
            if isinstance(path, str):
                self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
            else:
                self.fd = path
            if not stat.S_ISREG(os.fstat(self.fd).st_mode):
                self.close()
                self.fd = -1
        except OSError:
            self.fd = -1

    def read(self, offset: int, size: int) -> bytes:
        if self.fd < 0 or offset < 0 or size <= 0:
            return b""
        try:
            return self._os.pread(self.fd, min(size, MAX_PIECE), offset)
        except (OSError, OverflowError):
            return b""

    def close(self) -> None:
        if self.fd >= 0 and self._own:
            self._os.close(self.fd)
        self.fd = -1


def _segments(f: _File) -> tuple[str, int, list[tuple[int, int, int, int]]] | None:
    """(struct byte order, ELF class, [(p_type, p_offset, p_vaddr, p_filesz)]), or None."""
    data = f.read(0, 64)
    if len(data) < 52 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    e = "<" if data[5] == 1 else ">"
    if data[4] == 2:
        if len(data) < 64:
            return None
        (phoff,) = struct.unpack_from(e + "Q", data, 32)
        phentsize, phnum = struct.unpack_from(e + "HH", data, 54)
        ph = struct.Struct(e + "IIQQQQQQ")  # type flags offset vaddr paddr filesz memsz align
        pick = (0, 2, 3, 5)
    else:
        (phoff,) = struct.unpack_from(e + "I", data, 28)
        phentsize, phnum = struct.unpack_from(e + "HH", data, 42)
        ph = struct.Struct(e + "IIIIIIII")  # type offset vaddr paddr filesz memsz flags align
        pick = (0, 1, 2, 4)
    if phentsize < ph.size or phnum > 512:
        return None
    table = f.read(phoff, phentsize * phnum)
    if len(table) < phentsize * phnum:
        return None
    out = []
    for i in range(phnum):
        fields = ph.unpack_from(table, i * phentsize)
        out.append((fields[pick[0]], fields[pick[1]], fields[pick[2]], fields[pick[3]]))
    return e, (64 if data[4] == 2 else 32), out


def identify(path: str | int) -> tuple[int, int] | None:
    """(ELF class 32/64, e_machine) of a regular ELF file (path or descriptor), or
    ``None``."""
    f = _File(path)
    try:
        head = f.read(0, 20)
    finally:
        f.close()
    if len(head) < 20 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    e_machine = head[18] | head[19] << 8 if head[5] == 1 else head[18] << 8 | head[19]
    return (64 if head[4] == 2 else 32), e_machine


def abi_tag(path: str | int) -> tuple[int, int, int, int] | None:
    """The GNU ABI note of the ELF file at ``path``: (os, major, minor, patch) with os 0 =
    Linux, or ``None`` when there is none or the file is not a readable ELF file."""
    f = _File(path)
    try:
        parsed = _segments(f)
        if parsed is None:
            return None
        e, _cls, segments = parsed
        for p_type, p_off, _vaddr, size in segments:
            if p_type != PT_NOTE:
                continue
            data = f.read(p_off, size)
            off, end = 0, len(data)
            while off + 12 <= end:
                namesz, descsz, ntype = struct.unpack_from(e + "III", data, off)
                name_at = off + 12
                desc_at = name_at + ((namesz + 3) & ~3)
                nxt = desc_at + ((descsz + 3) & ~3)
                if nxt > end or nxt <= off:
                    break
                if ntype == 1 and data[name_at : name_at + namesz] == b"GNU\0" and descsz >= 16:
                    tag: tuple[int, int, int, int] = struct.unpack_from(e + "IIII", data, desc_at)
                    return tag
                off = nxt
        return None
    finally:
        f.close()


def dynamic_names(path: str | int) -> tuple[str | None, tuple[str, ...]] | None:
    """(DT_SONAME or ``None``, DT_NEEDED names) of the ELF file at ``path``, or ``None``
    when it is not a readable ELF file with a dynamic section.

    The string table address (DT_STRTAB) is a virtual address, mapped to a file offset
    through the PT_LOAD segment that contains it.
    """
    f = _File(path)
    try:
        parsed = _segments(f)
        if parsed is None:
            return None
        e, cls, segments = parsed
        dyn = next((s for s in segments if s[0] == PT_DYNAMIC), None)
        if dyn is None:
            return None
        entry = struct.Struct(e + ("qQ" if cls == 64 else "iI"))
        data = f.read(dyn[1], dyn[3])
        tags: list[tuple[int, int]] = []
        for off in range(0, len(data) - entry.size + 1, entry.size):
            tag, value = entry.unpack_from(data, off)
            if tag == DT_NULL:
                break
            tags.append((tag, value))
        strtab = next((v for t, v in tags if t == DT_STRTAB), None)
        strsz = next((v for t, v in tags if t == DT_STRSZ), None)
        if strtab is None or strsz is None:
            return None
        base = None
        for p_type, p_off, vaddr, size in segments:
            if p_type == PT_LOAD and vaddr <= strtab < vaddr + size:
                base = p_off + (strtab - vaddr)
                break
        if base is None:
            return None
        table = f.read(base, strsz)
    finally:
        f.close()

    def name(index: int) -> str | None:
        if index >= len(table):
            return None
        stop = table.find(b"\0", index)
        raw = table[index:] if stop < 0 else table[index:stop]
        return raw.decode("utf-8", "surrogateescape")

    soname = None
    needed: list[str] = []
    for tag, value in tags:
        if tag == DT_SONAME:
            soname = name(value)
        elif tag == DT_NEEDED:
            text = name(value)
            if text is not None:
                needed.append(text)
    return soname, tuple(needed)
