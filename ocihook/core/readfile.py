"""Bounded reads of the files a container start reads: ``config.json``, the state JSON,
CDI specs, the configuration file.

Every such file is opened without blocking (``O_NONBLOCK``: a FIFO cannot hang the hook),
checked to be a regular file (a link to ``/dev/zero`` cannot feed it without end), and
its size checked before a byte is read; the read itself stops one byte past the limit, so
a file that grows while it is read cannot exceed it either.

Imports nothing but :mod:`os` and :mod:`stat` (both loaded by the interpreter's start):
the no-GPU fast exits use it.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "MAX_JSON_BYTES",
    "FileTooLarge",
    "NotRegularFile",
    "contains_any",
    "holds_any",
    "read_binary_stream",
    "read_regular",
    "read_small",
    "read_stdin",
    "read_stream",
]

#: The largest ``config.json``, state JSON or CDI spec read, in bytes (16 MiB). The
#: largest real ones are well under 1 MiB (a 64-GPU spec with every MIG profile).
MAX_JSON_BYTES = 16 << 20

# asm-generic/errno-base.h (the same on every Linux architecture); the errno module is
# not loaded by the interpreter's start.
_EINVAL = 22
_EFBIG = 27
_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class NotRegularFile(OSError):
    """The path names a FIFO, socket, device or directory; ``strerror`` says which:
    ``"not a regular file (a FIFO)"``."""


class FileTooLarge(OSError):
    """The file holds more than the limit; ``strerror`` names the limit (``EFBIG``)."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def _too_large(limit: int) -> FileTooLarge:
    return FileTooLarge(_EFBIG, f"larger than {limit} bytes ({limit / (1 << 20):g} MiB)")


def _open_regular(path: str) -> tuple[int, os.stat_result]:
    """A descriptor of the regular file at ``path`` and its status. A special file is
    refused before it is opened at all (a device's open can have effects), and again
    after: the path may name another file by then.

    Raises:
        NotRegularFile, OSError: as :func:`read_regular`.
    """
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise NotRegularFile(_EINVAL, f"not a regular file ({_kind(mode)})")
    fd = os.open(path, _FLAGS)
    try:
        st = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFile(_EINVAL, f"not a regular file ({_kind(st.st_mode)})")
    return fd, st


def read_regular(path: str, limit: int = MAX_JSON_BYTES) -> bytes:
    """The bytes of the regular file at ``path`` (links followed), at most ``limit``.

    Raises:
        NotRegularFile: ``path`` is a directory, FIFO, socket or device; nothing was
            read from it.
        FileTooLarge: the file holds more than ``limit`` bytes (checked with ``fstat``
            before reading, and again by the read).
        OSError: it cannot be opened or read (``FileNotFoundError``...).
    """
    fd, st = _open_regular(path)
    try:
        if st.st_size > limit:
            raise _too_large(limit)
        chunks = []
        total = 0
        want = max(st.st_size, 4096)
        while True:
            chunk = os.read(fd, min(want, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _too_large(limit)
            want = 1 << 16
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_stream(fd: int, limit: int = MAX_JSON_BYTES) -> bytes:
    """What is readable from the open descriptor ``fd`` (a hook's standard input, a pipe)
    up to end of file, stopping after ``limit + 1`` bytes: a result longer than ``limit``
    means the stream held more, for the caller to report in its own words.

    Raises:
        OSError: the read failed.
    """
    chunks = []
    total = 0
    while total <= limit:
        chunk = os.read(fd, min(1 << 16, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def read_binary_stream(stream: Any, limit: int = MAX_JSON_BYTES) -> bytes:
    """:func:`read_stream` of ``stream``'s descriptor (``sys.stdin.buffer``), or, for a
    stream without one (a test's ``BytesIO``), its ``read(limit + 1)``.

    Raises:
        OSError: the read failed.
    """
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation is both
        data: bytes = stream.read(limit + 1)
        return data
    return read_stream(fd, limit)


def contains_any(path: str, needles: tuple[bytes, ...], chunk: int = 1 << 20) -> bool:
    """Whether the regular file at ``path`` holds any of ``needles``, read ``chunk`` bytes
    at a time whatever its size (linear time, bounded memory): how the no-GPU fast paths
    look at a ``config.json`` larger than :data:`MAX_JSON_BYTES`, which runc itself
    reads, rather than refusing a container that asks for no GPU.

    Raises:
        NotRegularFile, OSError: as :func:`read_regular`.
    """
    longest = max((len(n) for n in needles), default=1)
    fd, _st = _open_regular(path)
    try:
        tail = b""
        while True:
            data = os.read(fd, chunk)
            if not data:
                return False
            window = tail + data
            if any(n in window for n in needles):
                return True
            tail = window[-(longest - 1) :] if longest > 1 else b""
    finally:
        os.close(fd)


def holds_any(path: str, raw: bytes | None, needles: tuple[bytes, ...]) -> bool:
    """Whether the file at ``path`` holds one of ``needles``: in ``raw``, its bytes when
    they were read, or (``raw`` is ``None``: the file was larger than the reader takes)
    scanned in pieces with :func:`contains_any`. A file that cannot be scanned counts as
    holding one: the caller's full path then reads it and reports why it cannot."""
    if raw is not None:
        return any(n in raw for n in needles)
    try:
        return contains_any(path, needles)
    except OSError:
        return True


def read_stdin() -> bytes:
    """This process's standard input (a hook's: the state JSON) as bytes, at most one
    byte past :data:`MAX_JSON_BYTES` (the state parser reports a longer one); ``b""`` when
    unreadable."""
    import sys  # loaded by the interpreter's start: a dictionary lookup

    try:
        return read_binary_stream(sys.stdin.buffer)
    except (OSError, ValueError, AttributeError):
        return b""


def read_small(path: str, *, limit: int = 1 << 16) -> bytes | None:
    """Up to ``limit`` bytes of a host procfs file, opened without following a final link
    and without blocking, or ``None`` when it cannot be opened or read — for copies of
    files whose absence the caller reports itself (the ``/proc/driver/nvidia`` mask)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)
