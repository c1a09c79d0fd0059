"""The dynamic loaders an image has, and what a musl loader reads, found by reading the
image's root file system (never by running anything from it).

A container's programs find shared libraries through the loader their ELF interpreter
(``PT_INTERP``) names, and each libc's loader reads something different:

* glibc's ``ld.so`` reads ``/etc/ld.so.cache`` (glibc ``elf/dl-cache.c``), then its
  built-in directories (``/lib64``, ``/usr/lib64`` on x86-64, ``/lib``, ``/usr/lib``
  elsewhere). Its path is fixed per ABI (:data:`GLIBC_INTERPRETERS`, from the
  ``sysdeps/unix/sysv/linux/*/ldconfig.h`` ``SYSDEP_KNOWN_INTERPRETER_NAMES`` lists).
* musl's loader, ``/lib/ld-musl-<arch>.so.1``, never reads ``ld.so.cache``: it searches
  the directories in ``/etc/ld-musl-<arch>.path`` (separated by ``:`` or newlines; musl
  ``ldso/dynlink.c``, ``path_open`` and the ``sys_path`` set-up) and, only when that file
  is absent, ``/lib:/usr/local/lib:/usr/lib`` (:data:`MUSL_DEFAULT_PATH`).

:func:`find_loaders` names the loaders a root file system holds (each path resolved inside
the root with :func:`ocihook.linux.pathsafe.resolve_in_root` and its ELF header read with
:func:`ocihook.linux.elfscan.identify`); :func:`parse_musl_path` and
:func:`musl_path_with` read and extend a musl path file's text. No function here writes.
"""

from __future__ import annotations

import os

from ..core.records import Record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on the container start path
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "GLIBC_INTERPRETERS",
    "MUSL_DEFAULT_PATH",
    "Loader",
    "find_loaders",
    "musl_path_with",
    "parse_musl_path",
]

#: glibc's loader paths by (ELF class, e_machine): what a glibc program's ``PT_INTERP``
#: names on each ABI ocihook knows (glibc ``sysdeps/unix/sysv/linux/{x86_64,i386,aarch64,
#: arm,powerpc}/ldconfig.h``; ARM: the hard-float loader).
GLIBC_INTERPRETERS: dict[tuple[int, int], str] = {
    (64, 62): "/lib64/ld-linux-x86-64.so.2",
    (32, 3): "/lib/ld-linux.so.2",
    (64, 183): "/lib/ld-linux-aarch64.so.1",
    (32, 40): "/lib/ld-linux-armhf.so.3",
    (64, 21): "/lib64/ld64.so.2",
}

#: Where musl's loader searches when ``/etc/ld-musl-<arch>.path`` does not exist (musl
#: ``ldso/dynlink.c``: ``sys_path = "/lib:/usr/local/lib:/usr/lib"``).
MUSL_DEFAULT_PATH: tuple[str, ...] = ("/lib", "/usr/local/lib", "/usr/lib")

#: musl's loaders live in its ``syslibdir``, ``/lib`` (musl ``configure``).
_MUSL_DIR = "/lib"
_MUSL_PREFIX = "ld-musl-"
_MUSL_SUFFIX = ".so.1"
#: The most names of ``/lib`` looked at for musl loaders: an image must not make the
#: hook do unbounded work.
_MAX_LIB_NAMES = 4096


class Loader(Record):
    """One dynamic loader found in an image.

    Attributes:
        kind: ``"glibc"`` or ``"musl"``.
        interpreter: the loader's path as programs name it (``PT_INTERP``), e.g.
            ``/lib/ld-musl-x86_64.so.1``.
        path: where that path leads inside the image, links resolved within it (e.g.
            ``/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2`` on Debian).
        elf_class: 32 or 64, from the loader's ELF header.
        machine: its ``e_machine`` (62 x86-64, 3 i386, 183 AArch64, 40 ARM, 21 PPC64).
        arch: musl's name of the ABI (``x86_64``, ``i386``, ``aarch64``, ``armhf``, ...),
            from the loader's file name; ``""`` for glibc.
    """

    kind: str
    interpreter: str
    path: str
    elf_class: int
    machine: int
    arch: str = ""

    @property
    def path_file(self) -> str | None:
        """``/etc/ld-musl-<arch>.path`` for a musl loader in ``/lib`` (the file it reads
        its search path from), ``None`` for glibc."""
        return f"/etc/ld-musl-{self.arch}.path" if self.kind == "musl" else None

    @property
    def multiarch_dir(self) -> str | None:
        """The Debian multiarch directory the loader lives in (``/usr/lib/x86_64-linux-gnu``),
        or ``None``: a glibc loader resolved into a directory named ``<cpu>-linux-gnu*``
        (Debian's ``dpkg-architecture`` ``DEB_HOST_MULTIARCH`` triplets)."""
        directory = os.path.dirname(self.path)
        base = os.path.basename(directory)
        if self.kind == "glibc" and "-linux-gnu" in base:
            return directory
        return None


def _in_root(rootfs: str, path: str) -> tuple[str, str] | None:
    """``(container path, host path)`` that ``path`` reaches inside ``rootfs``, or
    ``None`` when that is not a regular file (or the walk fails: a hostile tree)."""
    from .pathsafe import resolve_in_root

    try:
        host = resolve_in_root(rootfs, path)
    except Exception:  # DiscoveryError, OSError: an unreadable or hostile tree
        return None
    root = os.path.abspath(rootfs)
    inside = "/" + os.path.relpath(host, root) if host != root else "/"
    import stat

    try:
        if not stat.S_ISREG(os.lstat(host).st_mode):
            return None
    except OSError:
        return None
    return inside, host


def _identify(host: str) -> tuple[int, int] | None:
    from .elfscan import identify

    try:
        return identify(host)
    except OSError:
        return None


def find_loaders(rootfs: str) -> tuple[Loader, ...]:
    """The dynamic loaders of the image at ``rootfs`` (a host directory): each glibc
    loader of :data:`GLIBC_INTERPRETERS` and each musl loader ``/lib/ld-musl-<arch>.so.1``
    that is an ELF file of the matching class and machine, glibc's first, each kind in
    a stable order. Paths are resolved inside ``rootfs`` (links never lead out of it);
    only the ELF header of each file is read.

    Returns:
        The loaders; empty for an image without any (a static or a scratch image), or when
        ``rootfs`` cannot be read. Never raises.
    """
    found: list[Loader] = []
    for (elf_class, machine), interpreter in GLIBC_INTERPRETERS.items():
        where = _in_root(rootfs, interpreter)
        if where is None:
            continue
        if _identify(where[1]) == (elf_class, machine):
            found.append(Loader("glibc", interpreter, where[0], elf_class, machine))
    from .pathsafe import resolve_in_root

    try:
        names = os.listdir(resolve_in_root(rootfs, _MUSL_DIR))[:_MAX_LIB_NAMES]
    except Exception:  # no /lib, or a hostile tree
        names = []
    for name in sorted(names):
        arch = name[len(_MUSL_PREFIX) : -len(_MUSL_SUFFIX)]
        if not (name.startswith(_MUSL_PREFIX) and name.endswith(_MUSL_SUFFIX)) or not arch:
            continue
        if "/" in arch or not arch.replace("_", "").replace("-", "").isalnum():
            continue
        interpreter = f"{_MUSL_DIR}/{name}"
        where = _in_root(rootfs, interpreter)
        ident = _identify(where[1]) if where is not None else None
        if where is None or ident is None:
            continue
        found.append(Loader("musl", interpreter, where[0], ident[0], ident[1], arch))
    return tuple(found)


def parse_musl_path(data: bytes) -> tuple[str, ...]:
    """The directories a musl path file's ``data`` names, in order: the text up to the
    first NUL (musl reads it as a C string), split at ``:`` and newlines, empty pieces
    skipped (musl ``path_open``: ``strspn``/``strcspn`` over ``":\\n"``). Duplicates are
    kept (musl searches them again; harmless). Never raises: bytes that are not UTF-8 are
    kept as surrogate escapes."""
    text = data.split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    return tuple(p for line in text.split("\n") for p in line.split(":") if p)


def musl_path_with(existing: bytes | None, directories: Sequence[str]) -> bytes | None:
    """The new text of a musl path file that also names ``directories`` (absolute paths),
    or ``None`` when it names them all already.

    ``existing`` ``None`` (no file) starts from :data:`MUSL_DEFAULT_PATH`, so that what
    the loader searched before keeps being searched (a path file replaces the defaults),
    then appends the directories, one per line; directories the defaults hold need no
    file. An existing file is kept as it is and the
    missing directories are appended after it (on a new line), so the image's own
    directories keep their precedence.

    Raises:
        ValueError: a directory is not absolute or holds ``:``, a newline or NUL (it
            could not be written as one entry).
    """
    for d in directories:
        if not d.startswith("/") or any(c in d for c in ":\n\0"):
            raise ValueError(f"not a directory musl's path file can name: {d!r}")
    named = parse_musl_path(existing) if existing is not None else MUSL_DEFAULT_PATH
    missing = [d for d in dict.fromkeys(directories) if d not in named]
    if not missing:
        return None
    if existing is None:
        head = "".join(f"{d}\n" for d in MUSL_DEFAULT_PATH).encode()
    else:
        head = existing.split(b"\0", 1)[0]
        if head and not head.endswith(b"\n"):
            head += b"\n"
    return head + "".join(f"{d}\n" for d in missing).encode("utf-8", "surrogateescape")
