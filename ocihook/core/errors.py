"""The exceptions ocihook raises, and the exit code of each.

One base class, :class:`OcihookError`, and one subclass per area. Every error keeps what
went wrong as attributes — the file (``path``), the field inside it (``field``), the
offending value (``value``) — and a ``hint`` telling the user what to do; ``str(err)`` is a
single line naming all of them. The command line maps classes to exit codes in one place
(:data:`EXIT_CODES`, documented in ``docs/reference/exit-codes.md``), so a caller can tell
a bad request from a broken host without reading messages.

Exit codes:

====  ===========================  =====================================================
code  class                        meaning
====  ===========================  =====================================================
0     -                            success (also: nothing was requested)
1     -                            an unexpected internal error (a bug: please report it)
2     -                            bad command-line usage
3     :class:`SpecError`           ``config.json`` missing, unreadable or malformed
4     :class:`StateError`          the hook's state JSON (stdin) missing or malformed
5     :class:`RequestError`        the container asks for something that cannot be given
                                   (unknown GPU, unknown capability, bad syntax)
6     :class:`DiscoveryError`      the host (driver root / dev root) lacks a usable driver
7     :class:`ApplyError`          applying the edits failed; everything done was undone
8     :class:`LdCacheError`        an ``ld.so.cache`` file is malformed
9     -                            a hook was started with code-loading variables
                                   (``LD_PRELOAD``, ``PYTHONPATH``...) in its environment,
                                   or with the container's environment
10    :class:`ConfigError`         the configuration file is missing, unreadable or wrong
11    :class:`CdiError`            a CDI spec, name or annotation is malformed, or a
                                   requested CDI device is in no spec (or in two of
                                   one priority: their producers collide)
12    :class:`RuntimeNotFound`     ``ocihook-runtime`` found no real OCI runtime to run
                                   (``runtimes``), or was started by itself
13    :class:`EngineConfigError`   ``ocihook runtime configure``: a container engine's
                                   configuration file is malformed or cannot be written;
                                   ``ocihook install docker-hook``: another program's
                                   ``nvidia-container-runtime-hook`` is in the way;
                                   ``ocihook k8s install`` / ``uninstall``: a bad
                                   payload list, no engine found, the engine's file
                                   changed since the install
14    :class:`DoctorFailed`        ``ocihook doctor``: a check FAILed (WARN and SKIP
                                   alone exit 0)
====  ===========================  =====================================================
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "EXIT_CODES",
    "ApplyError",
    "CdiError",
    "ConfigError",
    "DiscoveryError",
    "DoctorFailed",
    "EngineConfigError",
    "LdCacheError",
    "OcihookError",
    "RequestError",
    "RuntimeNotFound",
    "SpecError",
    "StateError",
    "exit_code_for",
]


class OcihookError(Exception):
    """Base class of every error ocihook raises on purpose.

    Attributes:
        message: what went wrong, one sentence without a trailing period.
        path: the file concerned (host path), or ``None``.
        field: the field inside that file (JSON path such as ``process.env`` or a key such
            as ``Device Minor``), or ``None``.
        value: the offending value as found, or ``None``.
        hint: what the user can do about it, or ``None``.
    """

    #: Stable short name shown in front of the message (like pip's error references).
    reference = "ocihook-error"

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        field: str | None = None,
        value: object = None,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.path = path
        self.field = field
        self.value = value
        self.hint = hint
        super().__init__(self.__str__())

    def with_path(self, path: str) -> OcihookError:
        """Set :attr:`path` when it is unset (an error raised by pure code, reported for a
        file by its caller) and return ``self``."""
        if self.path is None:
            self.path = path
            self.args = (str(self),)
        return self

    def __str__(self) -> str:
        parts = [self.message]
        where = []
        if self.path is not None:
            where.append(f"file {self.path}")
        if self.field is not None:
            where.append(f"field {self.field}")
        if self.value is not None:
            value = self.value
            if isinstance(value, tuple) and value and all(isinstance(v, str) for v in value):
                value = ", ".join(value)  # several names: one list, not a Python tuple
            shown = _bounded_repr(value)
            where.append(f"value {shown}")
        if where:
            parts.append("(" + ", ".join(where) + ")")
        text = " ".join(parts)
        if self.hint:
            text += f"; hint: {self.hint}"
        return text.replace("\n", " ")


def _bounded_repr(value: object) -> str:
    """``repr(value)`` cut to at most about 120 characters, computed in bounded work: a
    hostile value (a list nested 1,000 deep, a megabyte string, an int of 100,000
    digits) must neither flood a log nor raise while its error is formatted."""
    if isinstance(value, str) and len(value) > 120:
        return repr(value[:100])[:-1] + f"... ({len(value)} characters)"
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        import reprlib

        shortener = reprlib.Repr()
        shortener.maxlevel = 4
        shortener.maxstring = shortener.maxother = 60
        shortener.maxlong = 40
        try:
            shown = shortener.repr(value)
        except (RecursionError, ValueError):
            shown = f"<a {type(value).__name__}>"
    else:
        try:
            shown = repr(value)
        except ValueError:  # an int too long to print (sys.set_int_max_str_digits)
            bits = value.bit_length() if isinstance(value, int) else 0
            shown = f"<a {bits}-bit integer>" if bits else f"<a {type(value).__name__}>"
    if len(shown) > 120:
        shown = shown[:100] + f"... ({len(shown)} characters)"
    return shown


class SpecError(OcihookError):
    """The bundle's ``config.json`` is missing, unreadable, or not a valid OCI spec where
    ocihook needs it (OCI runtime-spec ``config.md``); also: ``root.path`` or the bundle
    path holds a NUL byte or a lone surrogate, its ``ocihook.edits`` record is not
    ocihook's, or an earlier ocihook edit without a record would make GPUs add up."""

    reference = "bad-config-json"


class StateError(OcihookError):
    """The container state JSON a hook reads on stdin is missing or malformed
    (OCI runtime-spec ``runtime.md``, "State"); also: its ``bundle`` holds a NUL byte or a
    lone surrogate."""

    reference = "bad-state"


class RequestError(OcihookError):
    """The container asks for something that cannot be given: an unknown GPU, an unknown
    driver capability, a malformed ``NVIDIA_*`` (or ``AMD_``/``INTEL_VISIBLE_DEVICES``)
    variable, too many entries in one, or an ``NVIDIA_REQUIRE_*`` term the host does not
    meet."""

    reference = "bad-request"


class DiscoveryError(OcihookError):
    """The host, read through the driver root and dev root, has no usable NVIDIA driver, or
    one of its files is malformed or inconsistent (for example a device node whose
    major:minor is not the expected one); also: a driver library or binary of a requested
    capability exists but cannot be read (EACCES, EIO, EMFILE: never skipped in silence,
    which would start the container without it), or ``ocihook list --check`` found a
    broken driver library."""

    reference = "host-discovery"


class LdCacheError(DiscoveryError):
    """An ``ld.so.cache`` file is truncated or malformed (glibc ``sysdeps/generic/dl-cache.h``).

    ``offset`` is the byte offset in the file where the problem was found, or ``None``.
    """

    reference = "bad-ld-so-cache"

    def __init__(self, message: str, *, offset: int | None = None, **kwargs: object) -> None:
        self.offset = offset
        if offset is not None:
            message = f"{message} at byte offset {offset}"
        super().__init__(message, **kwargs)  # type: ignore[arg-type]


class ConfigError(OcihookError):
    """The operator's configuration file (:mod:`ocihook.config`) is missing (when named
    explicitly), unreadable, not TOML, or has an unknown key or a bad value.

    ``path`` is the file, ``field`` the key as a dotted path (``library-path[1]``),
    ``value`` the value found and ``hint`` the valid keys or values. ``line`` is the line
    of a TOML syntax error (1-based), else ``None``.
    """

    reference = "bad-config"

    def __init__(self, message: str, *, line: int | None = None, **kwargs: Any) -> None:
        self.line = line
        super().__init__(message, **kwargs)


class ApplyError(OcihookError):
    """Applying container edits failed. Whatever had been done is undone before this is
    raised: ``config.json`` is byte-identical and nothing is left mounted or created."""

    reference = "apply-failed"


class CdiError(OcihookError):
    """A CDI spec file, qualified device name or CDI annotation is malformed (CDI
    ``SPEC.md``), or a requested CDI device is in no spec, or in two spec files of one
    priority (two producers of one kind: the message names both); also: an ``ocihook cdi
    generate`` option whose value cannot make a spec (``--vendor``, ``--class``,
    ``--output``, a ``--device-id`` the host has no device for). ``path`` is the spec file
    (when there is one), ``field`` the JSON path inside it
    (``devices[0].containerEdits.mounts[1].hostPath``), the annotation key or the option,
    ``value`` the offending value."""

    reference = "bad-cdi-spec"


class RuntimeNotFound(OcihookError):
    """``ocihook-runtime`` cannot run the real OCI runtime: none of the configuration's
    ``runtimes`` is an executable file (names looked up in the host's ``PATH``, the
    wrapper itself skipped), or the wrapper was started again by itself (a ``runc`` on
    ``PATH`` that is a copy of, or a wrapper around, ``ocihook-runtime``). ``value`` is
    the list searched, ``path`` the configuration file that set it (if any)."""

    reference = "no-runtime"


class EngineConfigError(OcihookError):
    """``ocihook runtime configure``: a container engine's configuration file (Docker's
    ``daemon.json``, containerd's ``config.toml``, a CRI-O drop-in, a hooks.d file) is
    malformed, of a version ocihook does not edit, or cannot be written. ``path`` is the
    file; it is left as it was. Also ``ocihook k8s install`` / ``uninstall``
    (:mod:`ocihook.engines.hostinstall`): a malformed or unsafe payload list, no engine (or
    two) found on the host, a file that cannot be written under the host root, an engine
    file changed since the install (not restored); ``path`` names it. And their
    ``--restart-mode`` (:mod:`ocihook.engines.restart`): a mode the engine cannot take
    (``signal`` for containerd), its process not found, ``systemctl`` failing."""

    reference = "bad-engine-config"


class DoctorFailed(OcihookError):
    """``ocihook doctor``: at least one check FAILed; the message counts them and names
    the first. The report itself has been printed (and the record written) already."""

    reference = "doctor-failed"


#: Exit code per error class; the most specific class listed wins.
EXIT_CODES: dict[type[OcihookError], int] = {
    SpecError: 3,
    StateError: 4,
    RequestError: 5,
    DiscoveryError: 6,
    ApplyError: 7,
    CdiError: 11,
    LdCacheError: 8,
    ConfigError: 10,
    RuntimeNotFound: 12,
    EngineConfigError: 13,
    DoctorFailed: 14,
}


def exit_code_for(err: BaseException) -> int:
    """Return the documented exit code for ``err`` (see :data:`EXIT_CODES`); 1 for anything
    that is not an :class:`OcihookError`."""
    for cls in type(err).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return 1
