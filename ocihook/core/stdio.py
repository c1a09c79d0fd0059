"""The standard streams while a command runs: a message that cannot be written to stderr
never fails the command (:func:`tolerant_stderr`), and a name that is not UTF-8 never
fails a print to stdout (:func:`tolerant_stdout`). On every start path (the wrapper
runtime imports this, not :mod:`ocihook._main`)."""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

__all__ = [
    "TolerantStderr",
    "exit_process",
    "flush_standard_streams",
    "run_one_shot",
    "start_path_gc",
    "tolerant_stderr",
    "tolerant_stdout",
]


def _stdout_error(err: UnicodeError) -> tuple[str | bytes, int]:
    """The ``"ocihook-stdout"`` codec error handler: a file name byte that is not UTF-8
    (a ``surrogateescape`` character from the command line or a directory listing) is
    written as that byte, as ``ls`` would; a lone surrogate (a ``\\ud800`` JSON escape),
    which no byte spells, as a ``\\ud800`` escape."""
    import codecs

    try:
        return codecs.lookup_error("surrogateescape")(err)
    except UnicodeError:
        return codecs.lookup_error("backslashreplace")(err)


def tolerant_stdout() -> None:
    """Make printing a name that is not valid UTF-8 on stdout never raise
    ``UnicodeEncodeError`` (Python's stdout is ``strict`` outside the C locale, and even
    ``surrogateescape`` refuses a lone surrogate); stderr already uses
    ``backslashreplace``."""
    import codecs

    stream = sys.stdout
    if getattr(stream, "errors", None) in ("strict", "surrogateescape"):
        codecs.register_error("ocihook-stdout", _stdout_error)
        try:  # noqa: SIM105 (contextlib is not imported on the start path)
            stream.reconfigure(errors="ocihook-stdout")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass  # a replaced sys.stdout (tests, embedding): leave it


class TolerantStderr:
    """``sys.stderr`` while a command runs (:func:`tolerant_stderr`): text encoded as the
    real stream would (its encoding, ``backslashreplace``), written with ``os.write`` to
    its descriptor one line at a time (a partial line on :meth:`flush`); a message that
    cannot be written (ENOSPC, EIO, EPIPE, EAGAIN) is dropped, never raised."""

    def __init__(self, fd: int, encoding: str, errors: str) -> None:
        self.fd = fd
        self.encoding = encoding
        self.errors = errors
        self.dropped = 0  # messages (writes) lost
        self._pending = bytearray()

    def write(self, text: str) -> int:
        """Queue ``text``; write out every complete line."""
        if not isinstance(text, str):  # click probes for a binary stream with b""
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._pending += text.encode(self.encoding, self.errors)
        end = self._pending.rfind(b"\n") + 1
        if end:
            self._emit(end)
        return len(text)

    def flush(self) -> None:
        """Write out what is queued, a partial line included."""
        if self._pending:
            self._emit(len(self._pending))

    def _emit(self, end: int) -> None:
        view = memoryview(self._pending)[:end]
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError:
            self.dropped += 1
        finally:
            view.release()
            del self._pending[:end]

    def fileno(self) -> int:
        """The descriptor written to."""
        return self.fd

    def isatty(self) -> bool:
        """Whether that descriptor is a terminal."""
        return os.isatty(self.fd)

    def writable(self) -> bool:
        """Always: it is an output stream."""
        return True


def tolerant_stderr() -> Callable[[], None]:
    """Make a failure to write a message to stderr never fail a command: while it runs,
    ``sys.stderr`` is a :class:`TolerantStderr` over the same descriptor, which drops what it
    cannot write (a full disk under the log ENOSPC, EIO, a closed pipe EPIPE). A file
    the command replaced stays replaced, and the exit status says what happened — 0
    after a successful write, the documented code after an error — with no traceback
    (``ocihook edit``'s and ``runtime configure``'s closing message, written after the
    file, cannot turn a done change into exit 1). Not done for a replaced
    ``sys.stderr`` (tests' capture, embedding), which is left as it is.

    Returns:
        A function that flushes the stream and puts the original ``sys.stderr`` back (the
        interpreter's own last words, a traceback of a bug, go there).
    """
    original = sys.stderr
    if original is not sys.__stderr__:
        return _nothing
    if original is None:
        # descriptor 2 was closed when the interpreter started: print(file=None) would
        # write to stdout (a container's, or what an engine parses); every message is
        # dropped instead (descriptor -1: never a file opened since as descriptor 2)
        stream = TolerantStderr(-1, "utf-8", "backslashreplace")
    else:
        try:
            fd = original.fileno()
            original.flush()
        except (AttributeError, ValueError, OSError):
            return _nothing  # no descriptor (closed, or not a file): leave it
        stream = TolerantStderr(fd, original.encoding or "utf-8", "backslashreplace")
    sys.stderr = stream

    def restore() -> None:
        stream.flush()
        if sys.stderr is stream:
            sys.stderr = original

    return restore


def start_path_gc() -> None:
    """Turn the cyclic garbage collector off for the rest of a start-path program (a hook,
    the wrapper runtime) or another one-shot command (``edit``, ``cdi generate``), which
    lives for milliseconds: the collections its imports and work trigger cost 1-1.5 ms
    (CPython 3.11, 40-60 modules), and the few cycles they leave go with the process
    (under 0.1 MiB of peak memory, measured by ``benchmarks/bench_toolkit.py``).
    Reference counting still frees everything else. Never for a command that may run for
    long (``ocihook._main.run`` keeps the collector for the others: daemons)."""
    import gc

    gc.disable()


def exit_process(code: int) -> NoReturn:
    """End the process with exit status ``code`` (0-255) once ``sys.stdout`` and
    ``sys.stderr`` are flushed, without the interpreter's finalization: tearing down the
    modules and objects of a start path costs 1-2.5 ms (CPython 3.11, 40-60 modules),
    a tenth of a hook's run. For the one-shot programs only (a hook, the wrapper runtime,
    ``edit``, ``cdi generate``), which keep no buffered file open: their files are written
    with ``os.write`` and closed before they return.

    The interpreter's own exit (``sys.exit(code)``) is taken instead when finalization
    has work to do: a thread other than the main one is alive, an :mod:`atexit` callback
    is registered (or this interpreter cannot say), or a stream cannot be flushed
    (a closed pipe: the exit status is then the interpreter's, 120, as before); and for a
    ``code`` that is not an ``int`` (``None``: 0, as ``sys.exit`` has it)."""
    threading = sys.modules.get("threading")
    if type(code) is not int or (threading is not None and threading.active_count() > 1):
        sys.exit(code)
    import atexit

    pending = getattr(atexit, "_ncallbacks", None)  # CPython's count of callbacks
    if pending is None or pending():
        sys.exit(code)
    if not flush_standard_streams():
        sys.exit(code)
    os._exit(code)


def flush_standard_streams() -> bool:
    """Flush ``sys.stdout`` and ``sys.stderr`` (either may be ``None``: a descriptor closed
    when the interpreter started). Returns whether both could be (``False`` after a
    closed pipe's ``OSError`` or a closed stream's ``ValueError``, which are not raised)."""
    flushed = True
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            flushed = False
    return flushed


def run_one_shot(entry: Callable[[], int]) -> NoReturn:
    """Run a one-shot program's ``entry`` (its exit status) without the cyclic garbage
    collector (:func:`start_path_gc`), then end through :func:`exit_process`: the hooks,
    the wrapper runtime, ``edit`` and ``cdi generate``."""
    start_path_gc()
    exit_process(entry())


def _nothing() -> None:
    return None
