"""Migrating from the NVIDIA Container Toolkit's ``config.toml``, and writing the result.

The toolkit keeps its file at ``/etc/nvidia-container-runtime/config.toml``
(:data:`TOOLKIT_PATH`). ocihook's file is flat: the toolkit's top-level keys keep their
names; keys from its sections move to the top level under the name of the matching
ocihook flag. A toolkit section in an ocihook file is refused
(:mod:`ocihook.config.validate`); ``ocihook config migrate`` (:func:`load_toolkit_config`,
then :func:`render_config`) writes ocihook's file from the toolkit's, naming once each
key it drops or changes:

======================================================  ============================================
toolkit key                                             ocihook key
======================================================  ============================================
accept-nvidia-visible-devices-envvar-when-unprivileged  the same
accept-nvidia-visible-devices-as-volume-mounts          the same
disable-require                                         the same
supported-driver-capabilities                           the same
swarm-resource                                          the same
nvidia-container-cli.root                               ``driver-root``
nvidia-container-cli.ldcache                            ``ldcache``
nvidia-container-cli.ldconfig                           ``ldconfig`` (checked, never run)
nvidia-container-cli.no-cgroups                         ``no-cgroups``
nvidia-container-cli.debug                              ``log-file``
nvidia-container-runtime.debug                          ``log-file``
nvidia-container-runtime.log-level                      ``log-level``
nvidia-container-runtime.mode                           ``mode`` (no ``csv``, ``jit-cdi``)
nvidia-container-runtime.modes.cdi.spec-dirs            ``cdi-spec-dirs``
nvidia-container-runtime.modes.cdi.default-kind         ``default-kind``
nvidia-container-runtime.modes.cdi.annotation-prefixes  ``annotation-prefixes``
nvidia-container-runtime.modes.legacy.cuda-compat-mode  ``cuda-compat`` (no ``mount``, ``hook``)
nvidia-container-runtime.runtimes                       ``runtimes``
-                                                       ``dev-root``, ``library-path`` (flags of
                                                        ocihook's own)
``nvidia-container-cli.path``, ``.environment``,        none: ocihook runs no
``.load-kmods``, ``.user``;                             ``nvidia-container-cli`` and loads no
``nvidia-container-runtime.modes.csv``;                 kernel module
``nvidia-container-runtime-hook``,
``nvidia-ctk``, ``features``
======================================================  ============================================

Rendering (:func:`render_config`) lives here because its one user is the migration: the
operator's file is otherwise written by hand from ``ocihook config default``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ..core.errors import ConfigError
from ..core.records import Record
from .load import parse_config_bytes, read_config_file
from .validate import (
    KEYS,
    TOOLKIT_KEYS,
    TOOLKIT_PATH,
    config_error,
    config_from_dict,
    dotted_key,
    leaves,
    want_string,
)

__all__ = [
    "TOOLKIT_PATH",
    "Migration",
    "load_toolkit_config",
    "migrate_toolkit_config",
    "render_config",
    "toml_string",
]


#: Toolkit keys with no ocihook equivalent, and why they can be dropped.
_TOOLKIT_IGNORED = {
    "nvidia-container-cli.path": "ocihook runs no nvidia-container-cli",
    "nvidia-container-cli.environment": "ocihook runs no nvidia-container-cli",
    "nvidia-container-cli.load-kmods": "ocihook loads no kernel module (load them at boot)",
    "nvidia-container-cli.user": "ocihook runs no nvidia-container-cli",
    "nvidia-container-runtime.modes.csv": "no csv (Tegra) mode in ocihook",
    "nvidia-container-runtime.modes.jit-cdi": "ocihook discovers the host at each start",
    "nvidia-container-runtime-hook": "ocihook is its own hook",
    "nvidia-ctk": "ocihook runs no nvidia-ctk",
    "features": "the toolkit's feature flags have no ocihook counterpart",
}
_TOOLKIT_LOG_LEVELS = {
    "trace": "debug",
    "debug": "debug",
    "info": "info",
    "warn": "warning",
    "warning": "warning",
    "error": "error",
    "fatal": "error",
    "panic": "error",
}


class Migration(Record):
    """An ocihook configuration converted from the toolkit's
    (:func:`migrate_toolkit_config`).

    Attributes:
        document: ocihook's keys and values (:func:`config_from_dict` accepts it); keys the
            toolkit file leaves at its defaults are left out.
        notes: one line per toolkit key that was dropped or approximated, naming the key
            and why; in file order.
    """

    document: dict[str, Any]
    notes: tuple[str, ...] = ()


def _toolkit_list(key: str, value: object) -> str:
    """A toolkit comma list with the blanks and empty entries it ignores dropped."""
    text = want_string(key, value, "a comma list")
    return ",".join(part.strip() for part in text.split(",") if part.strip())


def migrate_toolkit_config(data: Mapping[str, object], *, source: str | None = None) -> Migration:
    """Convert a parsed NVIDIA Container Toolkit ``config.toml`` (``tomllib`` output) to
    ocihook's flat file, key by key as the module docstring's table says.

    Values are carried over as the toolkit reads them: comma lists lose the blanks and
    empty entries the toolkit skips; ``debug = "/dev/null"`` (its default) means no log
    file; ``log-level`` names of logrus (``trace``, ``warn``, ``fatal``, ``panic``) become
    the nearest ocihook level; ``mode = "jit-cdi"`` becomes ``"auto"`` (ocihook reads the
    host at each start, as jit-cdi does); ``cuda-compat-mode`` ``"mount"`` or ``"hook"``
    becomes ``"ldconfig"`` (the image's compat libraries are used through the container's
    ``ld.so.cache``, never mounted over host paths). Each such change, and every key
    without an equivalent, is reported in :attr:`Migration.notes`; nothing is dropped
    silently.

    Raises:
        ConfigError: a value with no ocihook meaning (``mode = "csv"``, an unknown
            ``log-level``, a wrong type, or a value ocihook's checks refuse); ``field`` is
            the toolkit's dotted key, ``path`` = ``source``.
    """
    doc: dict[str, Any] = {}
    origin: dict[str, str] = {}
    notes: list[str] = []

    def put(ours: str, theirs: str, value: object) -> None:
        if ours in doc and doc[ours] != value:
            notes.append(
                f"{theirs} ignored: {ours} is already set to {doc[ours]!r} by {origin[ours]}"
            )
            return
        doc[ours] = value
        origin[ours] = theirs

    try:
        for parts, value in leaves((), data):
            key = ".".join(parts)
            if not parts or isinstance(value, dict):  # an empty file or table
                continue
            ignored = next(
                (why for k, why in _TOOLKIT_IGNORED.items() if key == k or key.startswith(k + ".")),
                None,
            )
            if ignored is not None:
                notes.append(f"{key} ignored: {ignored}")
            elif key in (
                "accept-nvidia-visible-devices-envvar-when-unprivileged",
                "accept-nvidia-visible-devices-as-volume-mounts",
                "disable-require",
            ):
                put(key, key, value)
            elif key in ("swarm-resource", "supported-driver-capabilities"):
                put(key, key, _toolkit_list(key, value))
            elif key in ("nvidia-container-cli.debug", "nvidia-container-runtime.debug"):
                path = want_string(key, value, "a path")
                if path and path != "/dev/null":
                    put("log-file", key, path)
            elif key == "nvidia-container-runtime.log-level":
                level = want_string(key, value, "a log level").lower()
                if level not in _TOOLKIT_LOG_LEVELS:
                    raise config_error(
                        key, "unknown log level", value, "valid: " + ", ".join(_TOOLKIT_LOG_LEVELS)
                    )
                if _TOOLKIT_LOG_LEVELS[level] != level:
                    notes.append(f"{key} = {value!r} becomes {_TOOLKIT_LOG_LEVELS[level]!r}")
                put("log-level", key, _TOOLKIT_LOG_LEVELS[level])
            elif key == "nvidia-container-runtime.mode":
                mode = want_string(key, value, "a mode")
                if mode == "csv":
                    raise config_error(
                        key,
                        "the csv (Tegra) mode has no ocihook equivalent",
                        value,
                        'use mode = "auto" on a discrete-GPU host; ocihook does not serve '
                        "Tegra systems",
                    )
                if mode == "jit-cdi":
                    notes.append(f"{key} = 'jit-cdi' becomes 'auto' (host read at each start)")
                    mode = "auto"
                put("mode", key, mode)
            elif key == "nvidia-container-runtime.modes.legacy.cuda-compat-mode":
                compat = want_string(key, value, "a CUDA compat mode")
                if compat in ("mount", "hook"):
                    notes.append(
                        f"{key} = {compat!r} becomes 'ldconfig' (compat libraries enter the "
                        "container's ld.so.cache; nothing is mounted over host paths)"
                    )
                    compat = "ldconfig"
                put("cuda-compat", key, compat)
            elif key in TOOLKIT_KEYS and TOOLKIT_KEYS[key] is not None:
                ours = TOOLKIT_KEYS[key]
                assert ours is not None
                if ours == "driver-root" and value == "":
                    continue  # the toolkit's empty root is /
                put(ours, key, value)
            else:
                notes.append(f"{key} ignored: not a key of the NVIDIA Container Toolkit")
        try:
            config_from_dict(doc)
        except ConfigError as e:
            ours = (e.field or "").split("[", 1)[0]
            if ours in origin:
                e.hint = f"{e.hint or ''}; from the toolkit's {origin[ours]}".lstrip("; ")
                e.field = dotted_key(*origin[ours].split("."))
            raise
    except ConfigError as e:
        if source is not None:
            e.with_path(source)
        raise
    return Migration(doc, tuple(notes))


def load_toolkit_config(path: str = TOOLKIT_PATH) -> Migration:
    """Read the NVIDIA Container Toolkit's ``config.toml`` at ``path`` and convert it
    (:func:`migrate_toolkit_config`).

    Raises:
        ConfigError: the file is missing, unreadable, not TOML, or holds a value with no
            ocihook meaning (``path`` set).
    """
    shown = os.path.abspath(path)
    data = read_config_file(path, None)
    if data is None:
        raise ConfigError(
            "the NVIDIA Container Toolkit's configuration file not found",
            path=shown,
            hint="name the toolkit's config.toml: ocihook config migrate PATH",
        )
    return migrate_toolkit_config(parse_config_bytes(data, path=shown), source=shown)


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: in double quotes, with ``"`` and the backslash
    escaped by a backslash and control characters written ``\\uXXXX``."""
    out = ['"']
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def render_config(document: Mapping[str, Any], header: str = "") -> str:
    """``document`` (ocihook keys: strings, booleans, arrays of strings) as a TOML file,
    in :data:`ocihook.config.validate.KEYS` order, ``header`` lines first as comments;
    keys not in :data:`~ocihook.config.validate.KEYS` are left out."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for key in KEYS:
        if key not in document:
            continue
        value = document[key]
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list | tuple):
            text = "[" + ", ".join(toml_string(str(v)) for v in value) + "]"
        else:
            text = toml_string(str(value))
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"
