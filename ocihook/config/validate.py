"""The keys of the operator's configuration file, their checks, and :class:`Config`.

Every key is top-level and optional; :data:`KEYS` lists them in the order of the
reference (``docs/reference/configuration.md``, generated from ``specs/config.schema.json``, which
is the source of truth for keys, types, defaults and values). Each check here mirrors one
property of that schema rather than reading it: loading a file then imports neither
:mod:`jsonschema` (~100 ms on every container start) nor :mod:`json` and :mod:`re` (the
schema's patterns), and each refusal names the key, the value and what to write instead.
The tests hold the checks and the schema to the same verdict on thousands of generated
documents; ``ocihook config check`` applies both.

A *path* is absolute and has no NUL character. Strings are checked exactly (no spaces in
comma lists, except around ``swarm-resource`` names as the toolkit trims them). A section
of the NVIDIA Container Toolkit's file (:data:`TOOLKIT_SECTIONS`) is refused before any
other key is checked, with a hint naming the ocihook key of each entry and the converting
command (:mod:`ocihook.config.migrate`).
"""

from __future__ import annotations

import os

from ..core.errors import ConfigError
from ..core.records import Record
from ..core.vocab import CAPABILITY_NAMES
from .scan import DEFAULT_ANNOTATION_PREFIXES, request_markers

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any, Literal

    from ..core.hostroot import HostRoot

    Mode = Literal["auto", "legacy", "cdi"]
    LogLevel = Literal["debug", "info", "warning", "error"]
    CudaCompatMode = Literal["ldconfig", "disabled"]

__all__ = [
    "CAPABILITIES",
    "CUDA_COMPAT_MODES",
    "KEYS",
    "LOG_LEVELS",
    "MODES",
    "TOOLKIT_KEYS",
    "TOOLKIT_PATH",
    "TOOLKIT_SECTIONS",
    "Config",
    "ConfigError",
    "config_error",
    "config_from_dict",
    "dotted_key",
    "leaves",
    "want_string",
]

#: Values of ``mode``.
MODES = ("auto", "legacy", "cdi")
#: Values of ``log-level``, most verbose first.
LOG_LEVELS = ("debug", "info", "warning", "error")
#: Values of ``cuda-compat``.
CUDA_COMPAT_MODES = ("ldconfig", "disabled")
#: The driver capability names (``ocihook.core.vocab.CAPABILITY_NAMES``, sorted).
CAPABILITIES = CAPABILITY_NAMES
#: Where the NVIDIA Container Toolkit keeps its configuration.
TOOLKIT_PATH = "/etc/nvidia-container-runtime/config.toml"

_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_CDI_NAME_INNER = _ALNUM | frozenset("_.-")
_ANNOTATION_CHARS = _ALNUM | frozenset("._/-")
_ENV_NAME_CHARS = _ALNUM | frozenset("_.-")


# --- value checks: each mirrors one property of specs/config.schema.json --------------


def _type_name(value: object) -> str:
    """The TOML name of a parsed value's type, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    name = type(value).__name__  # datetime, date, time
    return {"datetime": "a date-time", "date": "a date", "time": "a time"}.get(name, name)


def config_error(key: str, message: str, value: object, hint: str) -> ConfigError:
    """The :class:`ConfigError` for a bad value: ``field`` = ``key`` (a dotted key),
    ``value`` = the value, ``hint`` = what to write instead."""
    return ConfigError(message, field=key, value=value, hint=hint)


def want_string(key: str, value: object, what: str) -> str:
    """``value`` when it is a string.

    Raises:
        ConfigError: ``value`` is not a string (``what`` names what was expected, e.g.
            ``"a path"``; ``field`` = ``key``).
    """
    if not isinstance(value, str):
        raise config_error(
            key, f"expected {what}, found {_type_name(value)}", value, f'write {key} = "..."'
        )
    return value


def _is_path(value: str) -> bool:
    return value.startswith("/") and "\0" not in value


def _check_bool(key: str, value: object) -> None:
    if not isinstance(value, bool):
        raise config_error(
            key,
            f"expected a boolean, found {_type_name(value)}",
            value,
            f"write {key} = true or {key} = false, without quotes",
        )


def _check_path(key: str, value: object) -> None:
    text = want_string(key, value, "an absolute path")
    if not _is_path(text):
        raise config_error(
            key, "not an absolute path", value, "write a path that starts with / (no NUL)"
        )


def _check_path_or_empty(key: str, value: object) -> None:
    text = want_string(key, value, 'an absolute path or ""')
    if text and not _is_path(text):
        raise config_error(
            key,
            "not an absolute path",
            value,
            'write a path that starts with / (no NUL), or "" for none',
        )


def _check_ldconfig(key: str, value: object) -> None:
    text = want_string(key, value, "a path")
    if not _is_path(text[1:] if text.startswith("@") else text):
        raise config_error(
            key,
            "not an absolute path",
            value,
            '"@/sbin/ldconfig" (@ = on the host) or an absolute container path; '
            "ocihook does not run it",
        )


def _want_array(key: str, value: object) -> list[object] | tuple[object, ...]:
    if not isinstance(value, list | tuple):
        raise config_error(
            key,
            f"expected an array of strings, found {_type_name(value)}",
            value,
            f'write {key} = ["...", "..."]',
        )
    return value


def _check_path_array(key: str, value: object) -> None:
    for i, item in enumerate(_want_array(key, value)):
        _check_path(f"{key}[{i}]", item)


def _check_enum(values: tuple[str, ...], note: str = "") -> Callable[[str, object], None]:
    def check(key: str, value: object) -> None:
        if not isinstance(value, str) or value not in values:
            what = "value" if isinstance(value, str) else f"{_type_name(value)}, not a string"
            raise config_error(
                key, f"unknown {what}", value, "valid values: " + ", ".join(values) + note
            )

    return check


def _is_cdi_part(text: str) -> bool:
    """A CDI vendor or class: ``^[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`` (CDI SPEC.md)."""
    return (
        bool(text)
        and text[0].isascii()
        and text[0].isalpha()
        and text[-1] in _ALNUM
        and all(c in _CDI_NAME_INNER for c in text)
    )


def _check_kind(key: str, value: object) -> None:
    text = want_string(key, value, "a CDI kind")
    vendor, slash, cls = text.partition("/")
    if not (slash and _is_cdi_part(vendor) and _is_cdi_part(cls)):
        raise config_error(
            key,
            "not a CDI kind",
            value,
            "write vendor/class such as nvidia.com/gpu: each part starts with a letter, "
            "ends with a letter or digit, and has only letters, digits and _ . - between",
        )


def _check_annotation_prefixes(key: str, value: object) -> None:
    for i, item in enumerate(_want_array(key, value)):
        where = f"{key}[{i}]"
        text = want_string(where, item, "an annotation key prefix")
        if not text or not all(c in _ANNOTATION_CHARS for c in text):
            raise config_error(
                where,
                "not an annotation key prefix",
                item,
                "write a non-empty prefix of letters, digits and . _ / - such as cdi.k8s.io/",
            )


def _check_swarm_resource(key: str, value: object) -> None:
    text = want_string(key, value, "a comma list of variable names")
    if text == "":
        return
    for name in text.split(","):
        name = name.strip(" ")
        if not name or not all(c in _ENV_NAME_CHARS for c in name):
            raise config_error(
                key,
                "not a comma list of variable names",
                value,
                "write names of letters, digits and _ . - separated by commas, such as "
                '"DOCKER_RESOURCE_GPU", or "" for none',
            )


_RUNTIME_NAME_CHARS = _ALNUM | frozenset("_.+-")


def _check_runtimes(key: str, value: object) -> None:
    items = _want_array(key, value)
    if not items:
        raise config_error(key, "empty", value, 'name at least one runtime, e.g. ["runc", "crun"]')
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        text = want_string(where, item, "a runtime name or absolute path")
        if not (_is_path(text) or (text and all(c in _RUNTIME_NAME_CHARS for c in text))):
            raise config_error(
                where,
                "not a runtime name or absolute path",
                item,
                "write a program name looked up in PATH (letters, digits and _ . + -) such "
                'as "runc", or an absolute path such as "/usr/sbin/runc"',
            )


def _check_capabilities(key: str, value: object) -> None:
    text = want_string(key, value, "a comma list of driver capabilities")
    if text != "all" and not all(c in CAPABILITIES for c in text.split(",")):
        raise config_error(
            key,
            "not a comma list of driver capabilities",
            value,
            '"all" or names from ' + ",".join(CAPABILITIES) + " separated by commas, no spaces",
        )


#: Every key: TOML name -> (:class:`Config` attribute, check); the order of the reference.
KEYS: dict[str, tuple[str, Callable[[str, object], None]]] = {
    "driver-root": ("driver_root", _check_path),
    "dev-root": ("dev_root", _check_path),
    "ldcache": ("ldcache", _check_path),
    "ldconfig": ("ldconfig", _check_ldconfig),
    "library-path": ("library_path", _check_path_array),
    "no-cgroups": ("no_cgroups", _check_bool),
    "mode": (
        "mode",
        _check_enum(MODES, " (the toolkit's csv and jit-cdi modes are not supported)"),
    ),
    "cdi-spec-dirs": ("cdi_spec_dirs", _check_path_array),
    "default-kind": ("default_kind", _check_kind),
    "annotation-prefixes": ("annotation_prefixes", _check_annotation_prefixes),
    "accept-nvidia-visible-devices-envvar-when-unprivileged": (
        "accept_nvidia_visible_devices_envvar_when_unprivileged",
        _check_bool,
    ),
    "accept-cdi-annotations-when-unprivileged": (
        "accept_cdi_annotations_when_unprivileged",
        _check_bool,
    ),
    "accept-nvidia-visible-devices-as-volume-mounts": (
        "accept_nvidia_visible_devices_as_volume_mounts",
        _check_bool,
    ),
    "swarm-resource": ("swarm_resource", _check_swarm_resource),
    "supported-driver-capabilities": ("supported_driver_capabilities", _check_capabilities),
    "disable-require": ("disable_require", _check_bool),
    "cuda-compat": (
        "cuda_compat",
        _check_enum(
            CUDA_COMPAT_MODES,
            " (the toolkit's mount and hook modes are not supported: image files are never "
            "mounted over host paths)",
        ),
    ),
    "log-file": ("log_file", _check_path_or_empty),
    "log-level": ("log_level", _check_enum(LOG_LEVELS)),
    "log-syslog": ("log_syslog", _check_bool),
    "runtimes": ("runtimes", _check_runtimes),
}

#: The NVIDIA Container Toolkit's sectioned keys -> the ocihook key, or ``None`` when
#: ocihook has no equivalent (:mod:`ocihook.config.migrate` converts them).
TOOLKIT_KEYS: dict[str, str | None] = {
    "nvidia-container-cli.root": "driver-root",
    "nvidia-container-cli.ldcache": "ldcache",
    "nvidia-container-cli.ldconfig": "ldconfig",
    "nvidia-container-cli.no-cgroups": "no-cgroups",
    "nvidia-container-cli.debug": "log-file",
    "nvidia-container-cli.path": None,
    "nvidia-container-cli.environment": None,
    "nvidia-container-cli.load-kmods": None,
    "nvidia-container-cli.user": None,
    "nvidia-container-runtime.debug": "log-file",
    "nvidia-container-runtime.log-level": "log-level",
    "nvidia-container-runtime.mode": "mode",
    "nvidia-container-runtime.runtimes": "runtimes",
    "nvidia-container-runtime.modes.cdi.spec-dirs": "cdi-spec-dirs",
    "nvidia-container-runtime.modes.cdi.default-kind": "default-kind",
    "nvidia-container-runtime.modes.cdi.annotation-prefixes": "annotation-prefixes",
    "nvidia-container-runtime.modes.legacy.cuda-compat-mode": "cuda-compat",
}
#: The top-level tables of the NVIDIA Container Toolkit's file.
TOOLKIT_SECTIONS = (
    "nvidia-container-cli",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-ctk",
    "features",
)


def dotted_key(*parts: str) -> str:
    """A TOML dotted key of ``parts``: bare parts (letters, digits, ``_``, ``-``) as they
    are, others quoted (``nvidia-container-cli."a b"``)."""
    out = []
    for p in parts:
        bare = p and all(c in _ALNUM or c in "_-" for c in p)
        out.append(p if bare else '"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return ".".join(out)


def leaves(prefix: tuple[str, ...], value: object) -> list[tuple[tuple[str, ...], object]]:
    """The leaves of a parsed TOML table ``value`` under the key parts ``prefix``, depth
    first, in file order: ``(key parts, value)`` pairs, where an empty table is a leaf."""
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in leaves((*prefix, k), v)]
    return [(prefix, value)]


def _valid_keys_hint() -> str:
    return "valid keys: " + ", ".join(KEYS)


def _unknown_key(key: str, value: object) -> ConfigError:
    """The error for a top-level key that is not in :data:`KEYS`."""
    if key in TOOLKIT_SECTIONS:
        found = leaves((key,), value)
        moves = []
        drops = []
        for parts, _v in found:
            dotted = ".".join(parts)
            ours = TOOLKIT_KEYS.get(dotted)
            if ours is not None:
                moves.append(f"{ours} for {dotted}")
            elif len(parts) > 1:
                drops.append(dotted)
        notes = []
        if moves:
            notes.append("at the top level, write " + ", ".join(moves))
        if drops:
            notes.append("remove " + ", ".join(drops) + " (no ocihook equivalent)")
        notes.append(
            "or convert the toolkit's whole file with: ocihook config migrate " + TOOLKIT_PATH
        )
        notes.append(_valid_keys_hint())
        parts, leaf_value = found[0]
        return ConfigError(
            "a section of the NVIDIA Container Toolkit's config.toml; ocihook's keys are "
            "all top-level",
            field=dotted_key(*parts),
            value=leaf_value,
            hint="; ".join(notes),
        )
    import difflib

    guess = key.replace("_", "-").lower()
    close = [guess] if guess in KEYS else difflib.get_close_matches(key, KEYS, n=1)
    hint = (f"did you mean {close[0]}? " if close else "") + _valid_keys_hint()
    return ConfigError("unknown key", field=dotted_key(key), value=value, hint=hint)


def _check_document(data: Mapping[str, object]) -> None:
    """Check a parsed document against the schema's rules, key by key in file order.

    Raises:
        ConfigError: the first unknown key or bad value (``path`` unset).
    """
    for key, value in data.items():  # the toolkit's file: say so before anything else
        if key in TOOLKIT_SECTIONS:
            raise _unknown_key(key, value)
    for key, value in data.items():
        entry = KEYS.get(key)
        if entry is None:
            raise _unknown_key(key, value)
        entry[1](key, value)


# --- the configuration ---------------------------------------------------------------


class Config(Record):
    """The operator configuration: one attribute per key (``-`` written ``_``).

    Defaults are those of ``specs/config.schema.json``; arrays are tuples. Constructing a
    ``Config`` checks every value as :func:`load_config` does (lists become tuples).

    Attributes:
        source: the file the values came from (absolute), or ``None`` for the built-in
            defaults; not a key.

    Raises:
        ConfigError: a value is not valid for its key (``field`` names the key).
    """

    driver_root: str = "/"
    dev_root: str = "/"
    ldcache: str = "/etc/ld.so.cache"
    ldconfig: str = "@/sbin/ldconfig"
    library_path: tuple[str, ...] = ()
    no_cgroups: bool = False
    mode: Mode = "auto"
    cdi_spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    default_kind: str = "nvidia.com/gpu"
    annotation_prefixes: tuple[str, ...] = DEFAULT_ANNOTATION_PREFIXES
    accept_nvidia_visible_devices_envvar_when_unprivileged: bool = True
    accept_cdi_annotations_when_unprivileged: bool = True
    accept_nvidia_visible_devices_as_volume_mounts: bool = False
    swarm_resource: str = ""
    supported_driver_capabilities: str = ",".join(CAPABILITIES)
    disable_require: bool = False
    cuda_compat: CudaCompatMode = "ldconfig"
    log_file: str = ""
    log_level: LogLevel = "info"
    log_syslog: bool = True
    runtimes: tuple[str, ...] = ("runc", "crun")
    source: str | None = None

    def __post_init__(self) -> None:
        for key, (attr, check) in KEYS.items():
            value = getattr(self, attr)
            try:
                check(key, value)
            except ConfigError as e:
                if self.source is not None:
                    e.with_path(self.source)
                raise
            if isinstance(value, list):
                object.__setattr__(self, attr, tuple(value))

    def as_dict(self) -> dict[str, Any]:
        """The configuration as a TOML/JSON document: every key, arrays as lists (what
        ``specs/config.schema.json`` describes; :func:`config_from_dict` reads it back)."""
        out: dict[str, Any] = {}
        for key, (attr, _check) in KEYS.items():
            value = getattr(self, attr)
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    def host_root(self) -> HostRoot:
        """The :class:`~ocihook.core.hostroot.HostRoot` of ``driver-root``, ``dev-root``,
        ``ldcache`` and ``library-path`` (roots normalised as the command line does)."""
        from ..core.hostroot import HostRoot

        return HostRoot(
            driver_root=os.path.normpath(self.driver_root),
            dev_root=os.path.normpath(self.dev_root),
            ldcache=self.ldcache,
            library_dirs=self.library_path,
        )

    @property
    def driver_capabilities(self) -> frozenset[str]:
        """``supported-driver-capabilities`` as a set (``"all"`` expanded)."""
        text = self.supported_driver_capabilities
        return frozenset(CAPABILITIES if text == "all" else text.split(","))

    @property
    def swarm_envvars(self) -> tuple[str, ...]:
        """``swarm-resource`` as variable names, in order (spaces around names dropped,
        as the toolkit does); ``()`` when unset."""
        if not self.swarm_resource:
            return ()
        return tuple(name.strip(" ") for name in self.swarm_resource.split(","))

    @property
    def ldconfig_on_host(self) -> bool:
        """Whether ``ldconfig`` names a host path (``@`` prefix, the toolkit's convention)."""
        return self.ldconfig.startswith("@")

    def extra_request_markers(self) -> tuple[bytes, ...]:
        """:func:`ocihook.config.scan.request_markers` of this configuration's
        ``swarm-resource`` names, ``annotation-prefixes`` and
        ``accept-nvidia-visible-devices-as-volume-mounts``."""
        return request_markers(
            self.swarm_envvars,
            self.annotation_prefixes,
            self.accept_nvidia_visible_devices_as_volume_mounts,
        )


def config_from_dict(data: Mapping[str, object], *, source: str | None = None) -> Config:
    """Check a parsed document (``tomllib`` output) and return its :class:`Config`.

    Args:
        data: the top-level table; keys as in :data:`KEYS`, every one optional.
        source: the file it came from, for messages and :attr:`Config.source`.

    Raises:
        ConfigError: an unknown key, a toolkit section or a bad value, naming the key as a
            dotted path, the value, and the valid keys or values.
    """
    try:
        _check_document(data)
    except ConfigError as e:
        if source is not None:
            e.with_path(source)
        raise
    kwargs: dict[str, Any] = {KEYS[k][0]: v for k, v in data.items()}
    return Config(**kwargs, source=source)
