"""Which configuration file is read, its bytes, and the configuration it holds.

Which file (:func:`resolve_config_path`):

1. the path given to ``--config PATH`` (the ``path`` argument), else
2. the path in the environment variable ``OCIHOOK_CONFIG`` (unset or empty: ignored), else
3. ``/etc/ocihook/config.toml`` (:data:`DEFAULT_PATH`).

A missing *default* file means every key has its default; a missing file named by
``--config`` or ``OCIHOOK_CONFIG`` is an error, as is any file that exists but cannot be
read. A command-line flag, where there is one, overrides the key.

Hooks: a hook registered without an explicit ``env`` inherits an environment the image
may set (in ``createContainer``), so ``ocihook hook ...`` should name its file with
``--config`` in the registration's ``args`` and call ``load_config(path,
environ={})``, never trusting ``OCIHOOK_CONFIG`` there.

Cost (this module is on every container start): importing it costs almost nothing, and
:func:`load_config` with no file costs one failed ``open``. A file that exists is parsed
with :mod:`tomllib` (10-18 ms of imports, about 3 MiB) unless the root-owned store
(:mod:`ocihook.linux.cachestore`, entries ``config-*.entry``) holds the document parsed
from the same bytes (the wrapper runtime has a helper process parse it:
:func:`parse_config_bytes`); :func:`config_may_set` lets the start path skip parsing when
the file cannot change what it needs.
"""

from __future__ import annotations

import os

from ..core.errors import ConfigError
from .scan import bytes_may_set

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

    from .validate import Config

__all__ = [
    "CACHE_PREFIX",
    "DEFAULT_PATH",
    "ENV_VAR",
    "MAX_SIZE",
    "config_may_set",
    "load_config",
    "load_schema",
    "parse_config_bytes",
    "read_config_bytes",
    "read_config_file",
    "resolve_config_path",
    "store_config_parse",
    "store_parse_from_stdin",
]

#: The file read when neither ``--config`` nor ``OCIHOOK_CONFIG`` names one.
DEFAULT_PATH = "/etc/ocihook/config.toml"
#: The environment variable naming the file.
ENV_VAR = "OCIHOOK_CONFIG"
#: Larger files are refused, in bytes (a configuration is a few hundred bytes).
MAX_SIZE = 1 << 20
#: The file-name prefix of parsed documents in :mod:`ocihook.linux.cachestore`.
CACHE_PREFIX = "config"


def resolve_config_path(
    path: str | None = None, *, environ: Mapping[str, str] | None = None
) -> tuple[str, str | None]:
    """Which file to read: ``(file, origin)``.

    ``origin`` is ``"--config"`` for ``path``, ``"OCIHOOK_CONFIG"`` for the environment
    variable (unset or empty: skipped), ``None`` for :data:`DEFAULT_PATH` — the only file
    that may be missing.
    """
    if path is not None:
        return path, "--config"
    env = os.environ if environ is None else environ
    named = env.get(ENV_VAR)
    if named:
        return named, ENV_VAR
    return DEFAULT_PATH, None


def read_config_file(path: str, origin: str | None) -> bytes | None:
    """The bytes of the configuration file at ``path``; ``None`` when it is missing and
    ``origin`` is ``None`` (the default file). ``origin`` names who named the file in
    the error (``"--config"``, :data:`ENV_VAR`, ``"the command line"``).

    Opened non-blocking and checked to be a regular file, so a FIFO cannot hang a hook.

    Raises:
        ConfigError: a named file is missing; any file is unreadable, not a regular file,
            or larger than :data:`MAX_SIZE`.
    """
    from ..core.readfile import FileTooLarge, NotRegularFile, read_regular

    shown = os.path.abspath(path)
    try:
        return read_regular(path, MAX_SIZE)
    except FileNotFoundError:
        if origin is None:
            return None
        raise ConfigError(
            f"configuration file named by {origin} not found",
            path=shown,
            hint=f"without --config and {ENV_VAR}, ocihook reads {DEFAULT_PATH} when it "
            "exists, else uses the defaults",
        ) from None
    except (NotRegularFile, FileTooLarge) as e:
        raise ConfigError(f"configuration file is {e.strerror}", path=shown) from None
    except OSError as e:
        raise ConfigError(f"cannot read configuration file: {e.strerror}", path=shown) from None


def _parse_toml(data: bytes, shown: str) -> dict[str, Any]:
    """Parse TOML bytes with :mod:`tomllib` (see :func:`parse_config_bytes`)."""
    import tomllib

    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(
            f"not UTF-8 text at byte offset {e.start}", path=shown, hint="TOML files are UTF-8"
        ) from None
    except tomllib.TOMLDecodeError as e:
        text = str(e)
        line = None
        _, at, rest = text.rpartition("(at line ")
        if at and rest.partition(",")[0].isdigit():
            line = int(rest.partition(",")[0])
        raise ConfigError(
            f"invalid TOML: {text}",
            path=shown,
            line=line,
            hint="`ocihook config default` prints every key with its syntax",
        ) from None
    except RecursionError:
        raise ConfigError("invalid TOML: nested too deeply", path=shown) from None
    except ValueError as e:
        # tomllib lets int()'s ValueError through for a decimal integer of more than
        # sys.get_int_max_str_digits() (4300) digits
        import sys

        raise ConfigError(
            f"invalid TOML: an integer of more than {sys.get_int_max_str_digits()} digits"
            if "digits" in str(e)
            else f"invalid TOML: {' '.join(str(e).split())[:120]}",
            path=shown,
            hint="no key takes a number that long",
        ) from None


def _parse_dropping_modules(data: bytes, shown: str) -> dict[str, Any]:
    """:func:`_parse_toml`, then, in a one-shot process (:func:`_one_shot`), the modules
    that importing :mod:`tomllib` added (``re``, ``typing``, ``datetime``, ``enum``...:
    about 3 MiB) are taken out of :data:`sys.modules` again and collected (about 2 ms), so
    that what the start loads next reuses their memory instead of adding to its peak. A
    later import of any of them loads it again."""
    import sys

    if not _one_shot():
        return _parse_toml(data, shown)
    before = set(sys.modules)
    try:
        return _parse_toml(data, shown)
    finally:
        import gc

        for name in set(sys.modules).difference(before):
            del sys.modules[name]
        gc.collect()


def _one_shot() -> bool:
    """Whether this process runs one thread that nothing else imports into: a container's
    start (the hooks and the wrapper runtime start no thread), not the Kubernetes agent
    or a test runner (:mod:`threading` imported)."""
    import sys

    return "threading" not in sys.modules


def _cache_key(data: bytes) -> dict[str, object]:
    return {"format": 1, "toml": data.decode("utf-8", "surrogateescape")}


#: Seconds the wrapper waits for the helper that parses its configuration (it takes about
#: 25 ms); past that it is killed and the file is parsed in the wrapper itself.
HELPER_TIMEOUT = 5.0


def _store_usable(directory: str) -> bool:
    """Whether this process can keep entries in ``directory``: it exists, is owned by the
    effective user, is writable by no one else (what :func:`~ocihook.linux.cachestore.lookup`
    requires) and by this process (a rootless engine's wrapper cannot write root's)."""
    from ..linux.cachestore import owned_and_private

    try:
        return owned_and_private(os.stat(directory)) and os.access(directory, os.W_OK)
    except OSError:
        return False


def _parse_in_helper(data: bytes, directory: str) -> bool:
    """Have a helper process (this interpreter, ``-I -S``, this installation's package
    directory) parse ``data`` and store the document in ``directory``
    (:func:`store_parse_from_stdin`), so that this process never imports :mod:`tomllib`.
    It gets no environment and its output goes to ``/dev/null``; it inherits the
    descriptors this process holds without close-on-exec (the engine's, passed on to the
    runtime anyway) until it exits. ``SIGCHLD`` is set to its default while the helper
    runs (an inherited ``SIG_IGN`` would have the kernel reap it) and put back after.
    A helper that has not read the bytes and exited within :data:`HELPER_TIMEOUT` seconds,
    or one this process stops waiting for on any error, is killed and reaped. Returns
    whether it exited 0 (never raises but for an interrupt: the caller then parses here)."""
    import sys
    import time

    if TYPE_CHECKING:
        import signal
    else:  # not signal: its IntEnum wrappers import enum (milliseconds)
        import _signal as signal

    from .options import package_dir

    exe = sys.executable
    if not exe or not os.path.isabs(exe):
        return False
    program = (
        f"import sys; sys.path[:0] = [{package_dir()!r}]; "
        "from ocihook.config.load import store_parse_from_stdin; "
        f"store_parse_from_stdin({directory!r})"
    )
    try:
        r, w = os.pipe()
    except OSError:
        return False
    deadline = time.monotonic() + HELPER_TIMEOUT
    previous = signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        try:
            pid = os.posix_spawn(
                exe,
                [exe, "-I", "-S", "-c", program],
                {},
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, r, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0),
                ],
            )
        except OSError:
            os.close(w)
            return False
        finally:
            os.close(r)
        status = None
        try:
            try:
                written = _write_until(w, data, deadline)
            finally:
                os.close(w)
            status = _wait_until(pid, deadline) if written else None
        except Exception:  # anything: the helper is killed and reaped below, then False
            pass
        finally:
            if status is None:  # not exited by the deadline, or interrupted
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        return status is not None and os.waitstatus_to_exitcode(status) == 0
    except OSError:  # ChildProcessError included: reaped by someone else
        return False
    finally:
        signal.signal(signal.SIGCHLD, previous)


def _write_until(fd: int, data: bytes, deadline: float) -> bool:
    """Write ``data`` to the pipe ``fd`` (made non-blocking) before ``deadline``
    (:func:`time.monotonic`). Returns ``False`` when the deadline passed with bytes left
    (a reader that does not read), ``True`` otherwise: all written, or the reader gone
    (``EPIPE``: its exit status tells the rest)."""
    import select
    import time

    os.set_blocking(fd, False)
    poller = select.poll()  # not select.select: a descriptor may be numbered over 1023
    poller.register(fd, select.POLLOUT)
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return False
        except OSError:  # EPIPE: the helper exited early
            return True
    return True


def _wait_until(pid: int, deadline: float) -> int | None:
    """The wait status of the child ``pid`` once it exits, reaped, or ``None`` when it
    is still running at ``deadline`` (:func:`time.monotonic`; not reaped then). Watched
    through a pidfd (Linux 5.3); where there is none (an older kernel, a seccomp filter),
    ``waitpid`` is polled every 2 ms."""
    import select
    import time

    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            ready = poller.poll(max(0.0, deadline - time.monotonic()) * 1000)
        finally:
            os.close(pidfd)
        if not ready:
            return None
        return os.waitpid(pid, 0)[1]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.002)


def store_parse_from_stdin(directory: str) -> None:
    """The helper process of :func:`parse_config_bytes`: parse the configuration bytes on
    standard input (at most :data:`MAX_SIZE`) and store the document in ``directory``
    under the key :func:`parse_config_bytes` looks up. Exits 0 once stored, 1 otherwise
    (bytes that are not TOML included: the caller parses them itself and reports the
    error)."""
    import sys

    from ..linux import cachestore

    try:
        data = sys.stdin.buffer.read(MAX_SIZE + 1)
        ok = len(data) <= MAX_SIZE and cachestore.store(
            _cache_key(data), _parse_toml(data, "<stdin>"), (), directory, prefix=CACHE_PREFIX
        )
    except (ConfigError, OSError):
        ok = False
    os._exit(0 if ok else 1)


def parse_config_bytes(data: bytes, *, path: str, parse_helper: bool = False) -> dict[str, Any]:
    """The TOML document of a configuration file's bytes, parsed but not checked
    (:func:`ocihook.config.validate.config_from_dict` checks it; ``ocihook config check``
    also checks it against the JSON Schema); ``path`` names the file in errors.

    The document parsed from the same bytes before is taken from the root-owned store
    (:mod:`ocihook.linux.cachestore` in its default directory, entries ``config-*.entry``,
    keyed by the whole text: never stale) when there is one: importing :mod:`tomllib` costs
    more than the interpreter's start (10-18 ms), and about 3 MiB of memory. Otherwise,
    when that directory exists:

    * with ``parse_helper`` (the wrapper runtime: a one-shot process in the host's
      namespaces, where :data:`sys.executable` is the host's interpreter; never a
      ``createContainer`` hook, which runs in the container's mount namespace), a helper
      process parses and stores them (:func:`_parse_in_helper`; about 25 ms, once per
      change of the file), and the document is taken from the store, so that this
      process's peak memory never includes :mod:`tomllib`'s;
    * failing that, or without ``parse_helper``, the bytes are parsed here (a one-shot
      process then drops the modules :mod:`tomllib` brought: :func:`_parse_dropping_modules`)
      and the document is stored.

    Raises:
        ConfigError: not UTF-8, not TOML (``line`` set when known), nested too deeply, or
            holding a decimal integer too long to convert.
    """
    from ..linux import cachestore

    key = _cache_key(data)
    directory = cachestore.store_dir()
    found = cachestore.lookup(key, {}, directory, prefix=CACHE_PREFIX)
    if isinstance(found, dict):
        return found
    stored = os.path.isdir(directory)
    helped = parse_helper and _one_shot() and _store_usable(directory)
    if helped and _parse_in_helper(data, directory):
        found = cachestore.lookup(key, {}, directory, prefix=CACHE_PREFIX)
        if isinstance(found, dict):
            return found
    doc = _parse_dropping_modules(data, path)
    if stored:
        cachestore.store(key, doc, (), directory, prefix=CACHE_PREFIX)
    return doc


def store_config_parse(path: str) -> None:
    """Store the parse of the configuration file at ``path`` in this process's store
    (:func:`parse_config_bytes`, :func:`ocihook.linux.cachestore.store_dir`) when its
    directory exists: ``ocihook cdi generate --warm-cache`` (the boot unit, or a user
    filling their own store) does, so that the first container start after boot
    does not import :mod:`tomllib` (5-10 ms, and about 2 MiB of its peak memory). A file
    that cannot be read or parsed is a debug log line, never an error: the start that
    reads it reports it."""
    from ..linux.cachestore import store_dir

    if not os.path.isdir(store_dir()):
        return
    try:
        data = read_config_file(path, "the command line")
        if data is not None:
            parse_config_bytes(data, path=path)
    except ConfigError as e:
        from ..core import log

        log.debug("configuration parse not stored", path=path, error=str(e))


def load_config(
    path: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    parse_helper: bool = False,
) -> Config:
    """Read the configuration file and return its :class:`Config`.

    Args:
        path: the file named by ``--config``; ``None`` to use ``OCIHOOK_CONFIG`` from
            ``environ``, else :data:`DEFAULT_PATH`.
        environ: the environment to read ``OCIHOOK_CONFIG`` from (default
            :data:`os.environ`); hooks pass ``{}`` (see the module docstring).
        parse_helper: bytes not parsed before are parsed by a helper process (see
            :func:`parse_config_bytes`: the wrapper runtime only).

    Returns:
        The configuration (:class:`ocihook.config.validate.Config`); ``Config()``
        (``source`` ``None``) when the default file does not exist. :mod:`tomllib` is
        imported only when a file exists and the store has not parsed its bytes before.

    Raises:
        ConfigError: a named file is missing; a file is unreadable, not a regular file,
            over :data:`MAX_SIZE`, not UTF-8 or not TOML (``line`` set when known); or it
            has an unknown key or a bad value (``field`` is the dotted key, ``value`` the
            value, ``hint`` the valid keys or values).
    """
    # validate (and the record classes it loads) only once a file exists
    from .validate import Config, config_from_dict

    file, origin = resolve_config_path(path, environ=environ)
    data = read_config_file(file, origin)
    if data is None:
        return Config()
    shown = os.path.abspath(file)
    doc = parse_config_bytes(data, path=shown, parse_helper=parse_helper)
    return config_from_dict(doc, source=shown)


def read_config_bytes(
    path: str | None = None, *, environ: Mapping[str, str] | None = None
) -> bytes | None:
    """The raw bytes of the file :func:`load_config` would read (see
    :func:`resolve_config_path`), unparsed; ``None`` when the default file is missing.

    Raises:
        ConfigError: a named file is missing; any file is unreadable, not a regular file,
            or larger than :data:`MAX_SIZE`.
    """
    file, origin = resolve_config_path(path, environ=environ)
    return read_config_file(file, origin)


def config_may_set(
    keys: Iterable[str],
    path: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Whether the configuration file might set any of ``keys``, decided without parsing
    (:func:`ocihook.config.scan.bytes_may_set` on :func:`read_config_bytes`).

    For the start path: a no-GPU fast exit needs the configuration only when it sets one
    of :data:`ocihook.config.scan.REQUEST_DETECTION_KEYS`, and parsing costs 5-10 ms.
    ``False`` means certainly not: the default file is missing, or the file's bytes
    contain none of the key names and no backslash (a quoted key can spell a name only
    with escapes). ``True`` means the caller must call :func:`load_config` — also when a
    named file is missing or unreadable, so that the error is reported there. Such a
    fast exit does not report a malformed file; the next container that asks for GPUs
    does.
    """
    try:
        data = read_config_bytes(path, environ=environ)
    except ConfigError:
        return True
    return bytes_may_set(keys, data)


def load_schema() -> dict[str, Any]:
    """The JSON Schema of the file (package data ``ocihook/schemas/config.schema.json``,
    identical to ``specs/config.schema.json``), for tools and tests; the loader itself
    does not use it."""
    from ..schemas import load_schema as load_packaged_schema

    return load_packaged_schema("config")
