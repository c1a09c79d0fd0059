"""A minimal ELF reader for discovery's hot path: the ABI note and the dynamic section.

:mod:`ocihook.linux.elf` reads ELF files with pyelftools, whose import costs more than starting
a container; discovery runs on every container start and needs only three facts, so it
reads them here from the program headers (System V gABI, "Program Header", "Note
Section", "Dynamic Section"; glibc ``elf/elf.h`` for the GNU ABI note):

* :func:`abi_tag` — the ``NT_GNU_ABI_TAG`` note (libnvidia-tls must say Linux 2.3.99);
* :func:`dynamic_names` — DT_SONAME and the DT_NEEDED list;
* :func:`cuda_compat_note` — the ``.note.cuda.fwd_compatibility`` section of a
  ``libcuda.so`` (found through the section headers, as the NVIDIA Container Toolkit's
  ``nvidia-cdi-hook cuda-compat`` finds it), parsed by :func:`parse_cuda_compat_note`:
  read from an image's CUDA forward-compatibility library, and from the host driver's
  own ``libcuda.so`` for the CUDA version the driver supports.

Every offset, size and count is bounded by the bytes read; a malformed file gives
``None`` (or empty results), never an exception. A file that cannot be read does too,
unless the caller passes ``strict=True`` (discovery does: a driver library that exists but
cannot be read must not vanish without a word): then the :class:`OSError` of the failed
``open``/``pread`` is raised (a missing file still gives ``None``). The tests check both
functions against pyelftools on generated files of every class and byte order and on NVIDIA's real
libraries.
"""

from __future__ import annotations

import os
import stat
import struct

__all__ = [
    "ELF_MACHINE_NAMES",
    "CudaCompatNote",
    "abi_tag",
    "cuda_compat_note",
    "dynamic_names",
    "identify",
    "parse_cuda_compat_note",
]

#: e_machine numbers of the machines ocihook knows, by the names pyelftools and
#: :func:`ocihook.linux.ldcache.abi_flags` use (System V gABI).
ELF_MACHINE_NAMES = {62: "EM_X86_64", 3: "EM_386", 183: "EM_AARCH64", 40: "EM_ARM", 21: "EM_PPC64"}

#: The most bytes read for one piece (program headers, a note segment, the dynamic
#: section, the string table); pieces are read where they are, with ``pread``.
MAX_PIECE = 4 << 20

PT_LOAD, PT_DYNAMIC, PT_NOTE = 1, 2, 4
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME = 0, 1, 5, 10, 14


class _File:
    """Bounded positional reads of one file (``os.pread``). ``path`` is a host path, or an
    open descriptor (not closed here). Only regular files are read: a FIFO or a device
    would block or have side effects. Never raises, unless ``strict``: then an
    :class:`OSError` of ``open`` (other than a missing file), ``fstat`` or ``pread``
    propagates."""

    def __init__(self, path: str | int, strict: bool = False) -> None:
        self._os = os
        self._own = isinstance(path, str)
        self._strict = strict
        self.fd = -1
        try:
            if isinstance(path, str):
                self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
            else:
                self.fd = path
            if not stat.S_ISREG(os.fstat(self.fd).st_mode):
                self.close()
                self.fd = -1
        except FileNotFoundError:
            self.close()
        except OSError:
            self.close()
            if strict:
                raise

    def read(self, offset: int, size: int) -> bytes:
        if self.fd < 0 or offset < 0 or size <= 0:
            return b""
        try:
            return self._os.pread(self.fd, min(size, MAX_PIECE), offset)
        except OverflowError:
            return b""
        except OSError:
            if self._strict:
                raise
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


def abi_tag(path: str | int, *, strict: bool = False) -> tuple[int, int, int, int] | None:
    """The GNU ABI note of the ELF file at ``path``: (os, major, minor, patch) with os 0 =
    Linux, or ``None`` when there is none or the file is not a readable ELF file.

    Raises:
        OSError: with ``strict``, the file exists but could not be read.
    """
    f = _File(path, strict)
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


def dynamic_names(
    path: str | int, *, strict: bool = False
) -> tuple[str | None, tuple[str, ...]] | None:
    """(DT_SONAME or ``None``, DT_NEEDED names) of the ELF file at ``path``, or ``None``
    when it is not a readable ELF file with a dynamic section.

    The string table address (DT_STRTAB) is a virtual address, mapped to a file offset
    through the PT_LOAD segment that contains it.

    Raises:
        OSError: with ``strict``, the file exists but could not be read.
    """
    f = _File(path, strict)
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


# --- CUDA forward compatibility note -------------------------------------------------------
#
# NVIDIA's forward-compatibility ``libcuda.so.<version>`` (the ``cuda-compat-*`` packages,
# installed in images at /usr/local/cuda/compat), and the ``libcuda.so`` of recent driver
# releases themselves, carry a note section named
# ``.note.cuda.fwd_compatibility`` (SHT_NOTE). Its one note has the owner ``"NVIDIA
# Corporation"`` and a JSON object as descriptor, e.g. for libcuda.so.575.57.08::
#
#     {"Format": 1, "CUDA Version": "12.9", "Driver": [535, 550, 560, 565, 570, 575],
#      "Device": [1, 2, 7, 8, 9, 10, 11, 12, 13, 14]}
#
# "Driver" lists the kernel driver branches the library can run on, "CUDA Version" is the
# CUDA version it provides. (Facts read from the NVIDIA Container Toolkit's
# cmd/nvidia-cdi-hook/cudacompat and its tests; the note type is not checked there either,
# and the NUL padding around name and descriptor is ignored.)

CUDA_COMPAT_SECTION = b".note.cuda.fwd_compatibility"
CUDA_COMPAT_OWNER = b"NVIDIA Corporation"
SHT_NOTE = 7
#: The most bytes of the note section read: the real one is about 150 bytes.
MAX_CUDA_COMPAT_NOTE = 64 << 10
#: The most section headers looked at; real libraries have about 30.
MAX_SECTIONS = 4096


class CudaCompatNote:
    """The parsed ``.note.cuda.fwd_compatibility`` descriptor.

    Attributes:
        format: the ``Format`` number (1 in every known library).
        cuda_version: ``(major, minor)`` of ``"CUDA Version"``, or ``None`` when absent.
        drivers: the kernel driver branches (``Driver``) the library supports, e.g.
            ``(535, 550, 570)``; empty when absent.
        devices: the ``Device`` list as written (not used by ocihook).
    """

    __slots__ = ("cuda_version", "devices", "drivers", "format")

    def __init__(
        self,
        format: int,
        cuda_version: tuple[int, int] | None,
        drivers: tuple[int, ...],
        devices: tuple[int, ...],
    ) -> None:
        self.format = format
        self.cuda_version = cuda_version
        self.drivers = drivers
        self.devices = devices

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CudaCompatNote):
            return NotImplemented
        return (self.format, self.cuda_version, self.drivers, self.devices) == (
            other.format,
            other.cuda_version,
            other.drivers,
            other.devices,
        )

    def __hash__(self) -> int:
        return hash((self.format, self.cuda_version, self.drivers, self.devices))

    def __repr__(self) -> str:
        return (
            f"CudaCompatNote(format={self.format}, cuda_version={self.cuda_version}, "
            f"drivers={self.drivers}, devices={self.devices})"
        )


def _int_list(value: object) -> tuple[int, ...] | None:
    if not isinstance(value, list) or len(value) > 1024:
        return None
    if not all(type(v) is int and 0 <= v < 1 << 32 for v in value):
        return None
    return tuple(value)


def parse_cuda_compat_note(data: bytes, order: str = "<", align: int = 4) -> CudaCompatNote | None:
    """Parse the contents of a ``.note.cuda.fwd_compatibility`` section.

    Args:
        data: the section's bytes (at most :data:`MAX_CUDA_COMPAT_NOTE` are looked at).
        order: ``struct`` byte order of the file, ``"<"`` or ``">"``.
        align: the section's ``sh_addralign``; name and descriptor are padded to 8 bytes
            when it is 8, else to 4 (gABI "Note Section").

    Returns:
        The first note owned by ``NVIDIA Corporation`` whose descriptor is a JSON object
        with an integer ``Format``, a ``"CUDA Version"`` of the form ``"M.m"`` (or none)
        and ``Driver``/``Device`` lists of integers (or none); ``None`` for anything else —
        a truncated header, sizes that run past the data, another owner, text that is not
        UTF-8 JSON, wrong types. Never raises: the bytes come from a container image.
    """
    from ..core import jsonfast

    if order not in ("<", ">") or not isinstance(data, bytes | bytearray):
        return None
    data = bytes(data[:MAX_CUDA_COMPAT_NOTE])
    pad = 8 if align == 8 else 4
    off, end = 0, len(data)
    while off + 12 <= end:
        namesz, descsz, _type = struct.unpack_from(order + "III", data, off)
        name_at = off + 12
        desc_at = name_at + -(-namesz // pad) * pad
        nxt = desc_at + -(-descsz // pad) * pad
        if desc_at + descsz > end or namesz > end or descsz > end:
            return None
        if data[name_at : name_at + namesz].rstrip(b"\0") == CUDA_COMPAT_OWNER:
            raw = data[desc_at : desc_at + descsz].strip(b"\0")
            try:
                doc = jsonfast.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                return None
            return _compat_from_json(doc)
        if nxt <= off:
            return None
        off = nxt
    return None


def _compat_from_json(doc: object) -> CudaCompatNote | None:
    if not isinstance(doc, dict):
        return None
    fmt = doc.get("Format", 0)
    if type(fmt) is not int:
        return None
    cuda: tuple[int, int] | None = None
    text = doc.get("CUDA Version")
    if text is not None:
        if not isinstance(text, str):
            return None
        major, dot, minor = text.partition(".")
        ok = dot and major.isascii() and minor.isascii() and major.isdigit() and minor.isdigit()
        if not ok or len(text) > 16:
            return None
        cuda = (int(major), int(minor))
    drivers = _int_list(doc.get("Driver", []))
    devices = _int_list(doc.get("Device", []))
    if drivers is None or devices is None:
        return None
    return CudaCompatNote(fmt, cuda, drivers, devices)


def cuda_compat_note(path: str | int) -> CudaCompatNote | None:
    """The CUDA forward-compatibility note of the ELF file at ``path`` (a host path or an
    open descriptor, not closed here), or ``None`` when the file is not a readable ELF
    file, has no ``.note.cuda.fwd_compatibility`` section of type SHT_NOTE, or the note is
    malformed (:func:`parse_cuda_compat_note`).

    Reads the ELF header, the section headers (at most :data:`MAX_SECTIONS`, extended
    numbering of gABI "Sections" honoured), the section name table and the note (at most
    :data:`MAX_CUDA_COMPAT_NOTE` bytes), each with one bounded ``pread``; never raises.
    """
    f = _File(path)
    try:
        head = f.read(0, 64)
        if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2):
            return None
        if head[5] not in (1, 2):
            return None
        e = "<" if head[5] == 1 else ">"
        if head[4] == 2:
            if len(head) < 64:
                return None
            (shoff,) = struct.unpack_from(e + "Q", head, 40)
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", head, 58)
            sh = struct.Struct(
                e + "IIQQQQIIQQ"
            )  # name type flags addr offset size link info align entsize
        else:
            (shoff,) = struct.unpack_from(e + "I", head, 32)
            shentsize, shnum, shstrndx = struct.unpack_from(e + "HHH", head, 46)
            sh = struct.Struct(e + "IIIIIIIIII")
        if shoff == 0 or shentsize < sh.size:
            return None
        first = f.read(shoff, sh.size)
        if len(first) < sh.size:
            return None
        zero = sh.unpack(first)
        if shnum == 0:  # extended numbering: the count is section 0's sh_size
            shnum = zero[5]
        if shstrndx == 0xFFFF:  # SHN_XINDEX: the index is section 0's sh_link
            shstrndx = zero[6]
        if not 0 < shnum <= MAX_SECTIONS or shstrndx >= shnum:
            return None
        table = f.read(shoff, shentsize * shnum)
        if len(table) < shentsize * shnum:
            return None
        headers = [sh.unpack_from(table, i * shentsize) for i in range(shnum)]
        strtab = headers[shstrndx]
        names = f.read(strtab[4], min(strtab[5], MAX_CUDA_COMPAT_NOTE))
        for h in headers:
            if h[1] != SHT_NOTE:
                continue
            start = h[0]
            if names[start : start + len(CUDA_COMPAT_SECTION) + 1] != CUDA_COMPAT_SECTION + b"\0":
                continue
            data = f.read(h[4], min(h[5], MAX_CUDA_COMPAT_NOTE))
            return parse_cuda_compat_note(data, e, h[8])
        return None
    finally:
        f.close()
