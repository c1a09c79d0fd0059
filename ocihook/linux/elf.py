"""ELF facts about driver files, read with pyelftools (imported on first use only).

:func:`read_elf_info` returns the class, machine, soname and DT_NEEDED list of a shared
object, and the ``ld.so.cache`` flags ldconfig would give it; :func:`check_library` is a
deep check of one driver library (``ocihook list --check``). Files are read, never loaded
or executed. Nothing here is on a container's start path, which reads ELF files with
:mod:`ocihook.linux.elfscan` instead.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from ..core.errors import DiscoveryError
from ..core.records import Record

__all__ = ["ElfInfo", "check_library", "read_elf_info", "read_elf_info_fd"]


class ElfInfo(Record):
    """What ocihook needs to know about an ELF file.

    Attributes:
        elf_class: 32 or 64.
        machine: pyelftools' ``e_machine`` name (``"EM_X86_64"``, ``"EM_386"``...).
        elf_type: ``"ET_DYN"``, ``"ET_EXEC"``...
        soname: DT_SONAME, or ``None``.
        needed: DT_NEEDED entries in file order.
        abi_flags: ``ld.so.cache`` flags for this class and machine (``0x0303`` for
            x86-64), see :func:`ocihook.linux.ldcache.abi_flags`.
    """

    elf_class: int
    machine: str
    elf_type: str
    soname: str | None
    needed: tuple[str, ...]
    abi_flags: int


def _read(stream: BinaryIO, path: str) -> ElfInfo:
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    from .ldcache import abi_flags

    try:
        elf = ELFFile(stream)
        soname: str | None = None
        needed: list[str] = []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_SONAME":
                        soname = str(tag.soname)  # type: ignore[attr-defined]
                    elif tag.entry.d_tag == "DT_NEEDED":
                        needed.append(str(tag.needed))  # type: ignore[attr-defined]
                break
        elf_class = int(elf.elfclass)
        machine = str(elf["e_machine"])
        elf_type = str(elf["e_type"])
    except (ELFError, ValueError, OSError, KeyError, AttributeError) as e:
        raise DiscoveryError(f"not a valid ELF file: {e}", path=path) from None
    except Exception as e:  # pyelftools raises struct/construct errors on truncated files
        raise DiscoveryError(f"not a valid ELF file: {type(e).__name__}", path=path) from None
    try:
        flags = abi_flags(elf_class, machine)
    except ValueError:
        flags = 0  # a machine ld.so.cache has no ABI flags for
    return ElfInfo(elf_class, machine, elf_type, soname, tuple(needed), flags)


def read_elf_info(path: str) -> ElfInfo:
    """Read ELF facts of the file at ``path`` (a host path).

    Raises:
        DiscoveryError: the file cannot be read or is not a valid ELF file.
    """
    try:
        with open(path, "rb") as f:
            return _read(f, path)
    except OSError as e:
        raise DiscoveryError(f"cannot read ELF file: {e.strerror}", path=path) from None


def read_elf_info_fd(fd: int, *, path: str) -> ElfInfo:
    """Read ELF facts from an open file descriptor (not closed); ``path`` is for messages.

    Raises:
        DiscoveryError: not a valid ELF file.
    """
    with os.fdopen(os.dup(fd), "rb") as f:
        return _read(f, path)


def check_library(
    path: str,
    *,
    elf_class: int | None = None,
    machine: str | None = None,
    soname: str | None = None,
    abi_flags: int | None = None,
) -> list[str]:
    """Deep check of the shared library at ``path`` (a host path) with pyelftools.

    Reads the ELF header and the dynamic section (DT_SONAME, DT_NEEDED) and compares them
    with what the caller expects, and with what :mod:`ocihook.linux.elfscan` — the bounded
    reader discovery uses on a container's start path — reads from the same file.

    Args:
        path: the library's host path (driver root included); read, never loaded.
        elf_class: the class expected (64, or 32 for a compat32 library); ``None``: any.
        machine: the ``e_machine`` expected, in pyelftools' names (``"EM_X86_64"``);
            ``None``: any machine ``ld.so.cache`` knows ABI flags for.
        soname: the name the library is known by (its ``ld.so.cache`` key, e.g.
            ``libcuda.so.1``): DT_SONAME must be it, as the container's ``ldconfig`` and
            ocihook make the soname link from DT_SONAME; ``None``: not checked.
        abi_flags: the ``ld.so.cache`` flags of the library's cache entry (``0x0303``);
            the ABI they name (the high byte) must be the file's class and machine;
            ``None``: not checked.

    Returns:
        One line per problem (without the path), empty when the library passes:
        not a readable ELF file (then the only line); not a shared object (``e_type``
        other than ``ET_DYN``); the wrong class or machine; a machine without
        ``ld.so.cache`` ABI flags; a cache entry whose ABI differs from the file's; no
        DT_SONAME (unless ``soname`` is the file's own name), or one other than
        ``soname``; a DT_NEEDED entry that is a path; the start path's reader
        disagreeing with pyelftools about DT_SONAME or DT_NEEDED.

    Source of the rules: System V gABI (ELF header, dynamic section); glibc ``ldconfig``
    (soname links from DT_SONAME; cache flags per class and machine, see
    :func:`ocihook.linux.ldcache.abi_flags`); ``ld.so(8)`` (a DT_NEEDED name containing a
    slash is loaded as a path, not searched).
    """
    from . import elfscan

    try:
        info = read_elf_info(path)
    except DiscoveryError as e:
        return [e.message]
    problems: list[str] = []
    if info.elf_type != "ET_DYN":
        problems.append(f"not a shared object: e_type {info.elf_type}")
    if elf_class is not None and info.elf_class != elf_class:
        problems.append(f"ELF class {info.elf_class}, expected {elf_class}")
    if machine is not None and info.machine != machine:
        problems.append(f"machine {info.machine}, expected {machine}")
    if info.abi_flags == 0:
        problems.append(
            f"no ld.so.cache ABI flags for a {info.elf_class}-bit {info.machine} library"
        )
    elif abi_flags is not None and (abi_flags & 0xFF00) != (info.abi_flags & 0xFF00):
        problems.append(
            f"ld.so.cache flags 0x{abi_flags:04x} name another ABI than the file's "
            f"{info.elf_class}-bit {info.machine} (0x{info.abi_flags:04x})"
        )
    if info.soname is None:
        # a library known by its own file name (loaded by path, as
        # libnvidia-vulkan-producer.so.<version>) needs no DT_SONAME
        if soname is None or soname != path.rsplit("/", 1)[-1]:
            problems.append("no DT_SONAME")
    elif soname is not None and info.soname != soname:
        problems.append(f"DT_SONAME {info.soname}, expected {soname}")
    for name in info.needed:
        if "/" in name:
            problems.append(f"DT_NEEDED {name} is a path, not a library name")
    fast = elfscan.dynamic_names(path)
    if fast is None:
        if info.soname is not None or info.needed:
            problems.append("the start path's ELF reader finds no dynamic section")
    elif fast != (info.soname, info.needed):
        problems.append(
            f"the start path's ELF reader reads DT_SONAME {fast[0]} and DT_NEEDED "
            f"{', '.join(fast[1]) or '(none)'}; pyelftools DT_SONAME {info.soname} and "
            f"DT_NEEDED {', '.join(info.needed) or '(none)'}"
        )
    return problems
