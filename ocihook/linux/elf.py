"""ELF facts about driver files, read with pyelftools (imported on first use only).

:func:`read_elf_info` returns the class, machine, soname and DT_NEEDED list of a shared
object, and the ``ld.so.cache`` flags ldconfig would give it. Files are read, never
loaded or executed.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from ..core.errors import DiscoveryError
from ..core.records import Record

__all__ = ["ElfInfo", "read_elf_info", "read_elf_info_fd"]


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
