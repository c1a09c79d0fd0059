"""The operator's log: every decision ocihook makes for a container, one line each.

A hook's stderr reaches the runtime's log only when the hook fails, so an operator who
wants to know "why did this container get (or not get) GPU 3?" reads the system log
(``journalctl -t ocihook``: the ``log-syslog`` setting, on by default) or the file named by
the ``log-file`` setting (:mod:`ocihook.config`). File lines look like::

    2026-12-01T00:15:16Z debug pid=4242 container=c1 request kind=list devices=3 source=process.env

The system log gets the same line without the time stamp (the journal and syslog add
their own), as one datagram to :data:`SYSLOG_ADDRESS` in the BSD syslog form (RFC 3164:
``<PRI>ocihook[PID]: ...``, facility daemon) through the C ``_socket`` module (the
``socket`` and ``logging`` modules cost milliseconds to import; ``_socket`` is loaded only
where the socket exists, by the start paths that log at info level: a GPU container's);
when nothing listens there, the record is dropped.

Containers that ask for no GPU leave ``ocihook hook`` through a fast exit that parses
neither JSON nor TOML; it logs its one line (``nothing requested ... reason=...``) only when
:func:`ocihook.config.scan.scan_debug_log_file` finds debug logging on from the configuration
file's bytes, and opens nothing for logging otherwise.

Records below the configured level (``debug`` < ``info`` < ``warning`` < ``error``) cost a
comparison. The file is opened in append mode for each line (``O_APPEND``: lines of
concurrent hooks do not interleave within a line), so nothing is held open between
containers; it is written only when it is a regular file reached without a symbolic link
(``O_NOFOLLOW``; the hook runs as root) and opening it cannot block (``O_NONBLOCK``).
The standard :mod:`logging` package is not used: importing it costs more than
this whole module on a container's start path. Failing to write the log never fails a
container start.
"""

from __future__ import annotations

import os
import stat

__all__ = [
    "LEVELS",
    "SYSLOG_ADDRESS",
    "configure",
    "debug",
    "echo_to_stderr",
    "error",
    "info",
    "warning",
]

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40}

#: Where system-log records go: the local syslog socket (journald's ``/dev/log``, or a
#: syslog daemon's).
SYSLOG_ADDRESS = "/dev/log"
#: syslog severity per level (RFC 5424 table 2), with facility daemon (3): PRI = 3*8 + it.
_SEVERITY = {"debug": 7, "info": 6, "warning": 4, "error": 3}

_path: str | None = None
_syslog = False
_threshold = LEVELS["info"]
_context: dict[str, str] = {}
#: Level from which records are also written to stderr (the global ``--debug``), or None.
_stderr_threshold: int | None = None


def echo_to_stderr(level: str | None) -> None:
    """Also write every record from ``level`` up to stderr (``None``: stop), whatever
    :func:`configure` sets later: the global ``--debug`` option of the command line.

    Raises:
        ValueError: an unknown level.
    """
    global _stderr_threshold
    if level is not None and level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")
    _stderr_threshold = None if level is None else LEVELS[level]


def configure(
    path: str | None, level: str = "info", *, syslog: bool = False, **context: str
) -> None:
    """Log to ``path`` (nothing when ``None`` or empty) and, with ``syslog``, to the
    system log (:data:`SYSLOG_ADDRESS`), from ``level`` up; ``context`` (e.g.
    ``container="c1", bundle="/run/..."``) is added to every line.

    Raises:
        ValueError: an unknown level.
    """
    global _path, _threshold, _syslog
    if level not in LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(LEVELS)}")
    _path = path or None
    _syslog = syslog
    _threshold = LEVELS[level]
    _context.clear()
    _context.update(context)


def _quote(value: object) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    return text


def _to_syslog(level: str, text: str) -> None:
    """Send ``text`` as one datagram to :data:`SYSLOG_ADDRESS`; dropped when it cannot be
    sent (no socket, nobody listening, a full queue: never blocks). Where there is no
    system log socket, not even ``_socket`` is loaded."""
    if not os.path.exists(SYSLOG_ADDRESS):
        return
    import _socket

    pri = 3 * 8 + _SEVERITY[level]
    data = f"<{pri}>ocihook[{os.getpid()}]: {text}".encode("utf-8", "replace")
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM | _socket.SOCK_CLOEXEC)
    except OSError:
        return
    try:
        sock.setblocking(False)
        sock.sendto(data[:8192], SYSLOG_ADDRESS)
    except OSError:
        pass  # the log is for the operator; it must never fail a container start
    finally:
        try:  # noqa: SIM105 (contextlib is not imported on the start path)
            sock.close()  # an EIO here loses nothing: the datagram went, or did not
        except OSError:
            pass


def _emit(level: str, message: str, fields: dict[str, object]) -> None:
    passes = LEVELS[level] >= _threshold
    to_file = _path is not None and passes
    to_syslog = _syslog and passes
    to_stderr = _stderr_threshold is not None and LEVELS[level] >= _stderr_threshold
    if not (to_file or to_syslog or to_stderr):
        return
    parts = [level, f"pid={os.getpid()}"]
    parts += [f"{k}={_quote(v)}" for k, v in _context.items()]
    parts.append(message)
    parts += [f"{k}={_quote(v)}" for k, v in fields.items()]
    text = " ".join(parts)
    if to_syslog:
        _to_syslog(level, text)
    if not (to_file or to_stderr):
        return
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    line = f"{stamp} {text}\n".encode("utf-8", "replace")
    if to_stderr:
        try:  # a lost debug line never fails a command
            os.write(2, b"ocihook: log: " + line)
        except OSError:
            to_stderr = False
    if not to_file or _path is None:
        return

    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
    flags |= os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY  # root: no link, FIFO or tty
    try:
        fd = os.open(_path, flags, 0o640)
        try:
            if stat.S_ISREG(os.fstat(fd).st_mode):
                os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass  # the log is for the operator; it must never fail a container start


def debug(message: str, **fields: object) -> None:
    """Log a decision at debug level (see the module docstring)."""
    _emit("debug", message, fields)


def info(message: str, **fields: object) -> None:
    """Log at info level."""
    _emit("info", message, fields)


def warning(message: str, **fields: object) -> None:
    """Log at warning level."""
    _emit("warning", message, fields)


def error(message: str, **fields: object) -> None:
    """Log at error level."""
    _emit("error", message, fields)
