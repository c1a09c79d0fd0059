"""The command line's global options, as the NVIDIA Container Toolkit's ``nvidia-ctk``
has them: ``--debug`` (``-d``) and ``--quiet``, given before the command
(``ocihook --debug cdi generate``).

* ``--debug``: every log record from debug level up is also written to stderr, prefixed
  ``ocihook: log:`` (:func:`ocihook.core.log.echo_to_stderr`), whatever the
  configuration's ``log-level`` and ``log-file`` say; the file keeps its own level.
* ``--quiet``: nothing but errors on stderr — the one-line ``ocihook: error[...]``
  messages (and a traceback of a bug) pass; summary lines, notes and warnings are
  dropped. Standard output (a spec, a report, JSON) is the command's result and is kept.
  It wins over ``--debug``, as in ``nvidia-ctk``.

:func:`split_global_options` takes them off the front of ``argv`` before the command is
dispatched (the fast commands never see them); the click group lists them too, so that
``ocihook --help`` shows them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TextIO

__all__ = ["DEBUG_FLAGS", "QUIET_FLAGS", "ErrorsOnly", "apply", "split_global_options"]

#: The words of the global ``--debug`` option.
DEBUG_FLAGS = ("--debug", "-d")
#: The words of the global ``--quiet`` option.
QUIET_FLAGS = ("--quiet",)


def split_global_options(argv: Sequence[str]) -> tuple[bool, bool, list[str]]:
    """Take the global options off the front of ``argv``: ``(debug, quiet, rest)``. Only
    the words before the command count (``ocihook edit --quiet`` is ``edit``'s own
    option)."""
    debug = quiet = False
    rest = list(argv)
    while rest and rest[0] in DEBUG_FLAGS + QUIET_FLAGS:
        word = rest.pop(0)
        if word in QUIET_FLAGS:
            quiet = True
        else:
            debug = True
    return debug, quiet, rest


class ErrorsOnly:
    """A text stream over another that passes only error lines: those holding
    ``error[`` (ocihook's one-line errors), ``Error:`` (click's usage errors) or a
    ``Traceback``'s lines; everything else is dropped. Whole lines are judged, so a line
    written in parts is buffered until its newline (or :meth:`flush`)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._pending = ""
        self._in_traceback = False

    def write(self, text: str) -> int:
        """Buffer ``text`` and pass on its complete error lines; returns ``len(text)``."""
        self._pending += text
        while "\n" in self._pending:
            line, self._pending = self._pending.split("\n", 1)
            self._judge(line + "\n")
        return len(text)

    def _judge(self, line: str) -> None:
        if line.startswith("Traceback "):
            self._in_traceback = True
        if self._in_traceback or "error[" in line or "Error:" in line:
            self._stream.write(line)

    def flush(self) -> None:
        """Judge a pending partial line and flush the stream below."""
        if self._pending:
            self._judge(self._pending)
            self._pending = ""
        self._stream.flush()

    def fileno(self) -> int:
        """The descriptor of the stream below (for code that writes to it directly)."""
        return self._stream.fileno()

    def isatty(self) -> bool:
        """Whether the stream below is a terminal."""
        return self._stream.isatty()

    @property
    def encoding(self) -> str:
        """The stream below's encoding."""
        return getattr(self._stream, "encoding", None) or "utf-8"


def apply(debug: bool, quiet: bool) -> None:
    """Put the global options into effect for the rest of the process (see the module
    docstring)."""
    from ..core import log

    if quiet:
        log.echo_to_stderr(None)
        if not isinstance(sys.stderr, ErrorsOnly):
            sys.stderr = ErrorsOnly(sys.stderr)
    elif debug:
        log.echo_to_stderr("debug")
