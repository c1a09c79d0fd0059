"""The operator's configuration file: ``/etc/ocihook/config.toml``.

One TOML file sets what the command line would otherwise repeat on every registration:
the host roots, how requests are read, logging. Which file is read (:func:`load_config`):

1. the path given to ``--config PATH`` (the ``path`` argument), else
2. the path in the environment variable ``OCIHOOK_CONFIG`` (unset or empty: ignored), else
3. ``/etc/ocihook/config.toml`` (:data:`DEFAULT_PATH`).

A missing *default* file means every key has its default; a missing file named by
``--config`` or ``OCIHOOK_CONFIG`` is an error, as is any file that exists but cannot be
read. Every key is optional. A command-line flag, where there is one, overrides the key.

Hooks: a hook registered without an explicit ``env`` inherits an environment the image
may set (in ``createContainer``), so ``ocihook hook ...`` should name its file with
``--config`` in the registration's ``args`` and call ``load_config(path,
environ={})``, never trusting ``OCIHOOK_CONFIG`` there.

Keys (all top-level; the file has no sections; ``[]`` = TOML array of strings):

======================================================  ============================================
key                                                     type, default: meaning
======================================================  ============================================
driver-root                                             path, ``"/"``: host directory holding the
                                                        user-space driver (``/run/nvidia/driver``
                                                        for a driver container); ``--driver-root``
dev-root                                                path, ``"/"``: host directory holding
                                                        ``dev/``, ``proc/`` and ``sys/``;
                                                        ``--dev-root``
ldcache                                                 path, ``"/etc/ld.so.cache"``: the cache
                                                        read to find libraries, in driver-root
                                                        terms; ``--ldcache``
ldconfig                                                ``"@/sbin/ldconfig"``: kept for
                                                        compatibility with the toolkit, checked,
                                                        and otherwise unused: ocihook writes the
                                                        container's ``ld.so.cache`` itself and runs
                                                        no ``ldconfig``. ``@`` = a host path (the
                                                        toolkit's convention), else a container
                                                        path
library-path                                            [path], ``[]``: extra driver-root
                                                        directories searched for libraries the
                                                        cache lacks; ``--library-path``
no-cgroups                                              bool, ``false``: hooks add no device cgroup
                                                        rules (rootless); ``--no-cgroups``
mode                                                    ``"auto"``, ``"legacy"`` or ``"cdi"``;
                                                        ``"auto"``: legacy = the live hook injects;
                                                        cdi = requests are CDI device names
                                                        resolved from ``cdi-spec-dirs``; auto =
                                                        cdi when a request names CDI devices, else
                                                        legacy (as the toolkit)
cdi-spec-dirs                                           [path], ``["/etc/cdi", "/var/run/cdi"]``:
                                                        CDI spec directories, later ones win
default-kind                                            CDI kind, ``"nvidia.com/gpu"``: the kind of
                                                        unqualified device names in cdi mode
annotation-prefixes                                     [string], ``["cdi.k8s.io/"]``: annotation
                                                        key prefixes whose values are CDI device
                                                        requests (characters ``A-Za-z0-9._/-``)
accept-nvidia-visible-devices-envvar-when-unprivileged  bool, ``true``: honour
                                                        ``NVIDIA_VISIBLE_DEVICES`` from containers
                                                        without ``CAP_SYS_ADMIN`` in their bounding
                                                        set; ``false`` ignores it there, and
                                                        every other request variable of every
                                                        vendor (``AMD_VISIBLE_DEVICES``, ...)
accept-cdi-annotations-when-unprivileged                bool, ``true``: honour CDI request
                                                        annotations (``annotation-prefixes``) of
                                                        containers without ``CAP_SYS_ADMIN``;
                                                        ``false`` ignores them there (ocihook's
                                                        own; the toolkit never checks)
accept-nvidia-visible-devices-as-volume-mounts          bool, ``false``: read device requests from
                                                        mounts at
                                                        ``/var/run/nvidia-container-devices/<dev>``
swarm-resource                                          string, ``""``: comma list of variables
                                                        read before ``NVIDIA_VISIBLE_DEVICES``
                                                        (Docker swarm generic resources, e.g.
                                                        ``"DOCKER_RESOURCE_GPU"``); ``""`` = none
supported-driver-capabilities                           ``"compat32,compute,display,graphics,ngx,``
                                                        ``utility,video"``: comma list of the
                                                        capabilities containers may ask for, or
                                                        ``"all"``; a container's ``all`` means this
                                                        set
disable-require                                         bool, ``false``: skip the
                                                        ``NVIDIA_REQUIRE_*`` checks for every
                                                        container
cuda-compat                                             ``"ldconfig"`` or ``"disabled"``;
                                                        ``"ldconfig"``: an image's CUDA forward
                                                        compatibility libraries
                                                        (``/usr/local/cuda/compat``) take
                                                        precedence in its ``ld.so.cache`` when
                                                        newer than the host driver (their
                                                        ``.note.cuda.fwd_compatibility`` decides
                                                        when present); ``"disabled"``: never
log-file                                                path or ``""``, ``""``: also append the
                                                        hook's messages to this file
log-level                                               ``"debug"``, ``"info"``, ``"warning"`` or
                                                        ``"error"``; ``"info"``: the least severe
                                                        message written
runtimes                                                [name or path], ``["runc", "crun"]``: the
                                                        real OCI runtime ``ocihook-runtime`` runs,
                                                        the first found: a name is looked up in
                                                        the host's ``PATH`` (the wrapper itself
                                                        skipped), a path is used as it is
======================================================  ============================================

A *path* is absolute and has no NUL character. Strings are checked exactly (no spaces in
comma lists, except around ``swarm-resource`` names as the toolkit trims them). The JSON
Schema ``specs/config.schema.json`` (also package data: :func:`load_schema`) is the source
of truth for keys, types and values.

Coming from the NVIDIA Container Toolkit (``/etc/nvidia-container-runtime/config.toml``):
ocihook's file is flat. The toolkit's top-level keys keep their names; keys from its
sections move to the top level under the name of the matching ocihook flag. A toolkit
section in an ocihook file is refused (before any other key is checked) with a hint naming
the ocihook key of each entry and the converting command: ``ocihook config migrate``
(:func:`migrate_toolkit_config`) writes ocihook's file from the toolkit's, naming once each
key it drops or changes.

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
nvidia-container-cli.ldconfig                           ``ldconfig`` (not run: see above)
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

Validation and cost: importing this module costs almost nothing, and
:func:`load_config` with no file costs one failed ``open``. A file that exists is parsed
with :mod:`tomllib` (5-10 ms of imports: ``typing``, ``datetime``) and checked by
hand-written code that mirrors the schema — never with :mod:`jsonschema`, whose import
alone costs ~100 ms on every container start. The tests hold the two to the same verdict
on thousands of generated documents. :func:`config_may_set` lets the start path skip
parsing when the file cannot change what it needs.
"""

from __future__ import annotations

import os

from .core.errors import ConfigError
from .core.records import Record
from .core.vocab import CAPABILITY_NAMES, VOLUME_MOUNT_DIR

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
    from typing import Any, Literal

    from .core.hostroot import HostRoot

    Mode = Literal["auto", "legacy", "cdi"]
    LogLevel = Literal["debug", "info", "warning", "error"]
    CudaCompatMode = Literal["ldconfig", "disabled"]

__all__ = [
    "DEFAULT_PATH",
    "ENV_VAR",
    "KEYS",
    "REQUEST_DETECTION_KEYS",
    "TOOLKIT_PATH",
    "Config",
    "ConfigError",
    "Migration",
    "bytes_may_set",
    "config_from_dict",
    "config_may_set",
    "load_config",
    "load_schema",
    "load_toolkit_config",
    "migrate_toolkit_config",
    "parse_config_bytes",
    "read_config_bytes",
    "render_config",
    "resolve_config_path",
    "scan_debug_log_file",
]

#: The file read when neither ``--config`` nor ``OCIHOOK_CONFIG`` names one.
DEFAULT_PATH = "/etc/ocihook/config.toml"
#: The environment variable naming the file.
ENV_VAR = "OCIHOOK_CONFIG"
#: Larger files are refused (a configuration is a few hundred bytes).
MAX_SIZE = 1 << 20

MODES = ("auto", "legacy", "cdi")
LOG_LEVELS = ("debug", "info", "warning", "error")
CUDA_COMPAT_MODES = ("ldconfig", "disabled")
#: The driver capability names (``ocihook.request.nvidia.ALL_CAPABILITIES``, sorted).
CAPABILITIES = CAPABILITY_NAMES
#: Where ``accept-nvidia-visible-devices-as-volume-mounts`` reads requests from.

#: Keys whose values change which containers ask for GPUs (see :func:`config_may_set`).
REQUEST_DETECTION_KEYS = (
    "swarm-resource",
    "annotation-prefixes",
    "accept-nvidia-visible-devices-as-volume-mounts",
)

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


def _bad(key: str, message: str, value: object, hint: str) -> ConfigError:
    return ConfigError(message, field=key, value=value, hint=hint)


def _want_string(key: str, value: object, what: str) -> str:
    if not isinstance(value, str):
        raise _bad(
            key, f"expected {what}, found {_type_name(value)}", value, f'write {key} = "..."'
        )
    return value


def _is_path(value: str) -> bool:
    return value.startswith("/") and "\0" not in value


def _check_bool(key: str, value: object) -> None:
    if not isinstance(value, bool):
        raise _bad(
            key,
            f"expected a boolean, found {_type_name(value)}",
            value,
            f"write {key} = true or {key} = false, without quotes",
        )


def _check_path(key: str, value: object) -> None:
    text = _want_string(key, value, "an absolute path")
    if not _is_path(text):
        raise _bad(key, "not an absolute path", value, "write a path that starts with / (no NUL)")


def _check_path_or_empty(key: str, value: object) -> None:
    text = _want_string(key, value, 'an absolute path or ""')
    if text and not _is_path(text):
        raise _bad(
            key,
            "not an absolute path",
            value,
            'write a path that starts with / (no NUL), or "" for none',
        )


def _check_ldconfig(key: str, value: object) -> None:
    text = _want_string(key, value, "a path")
    if not _is_path(text[1:] if text.startswith("@") else text):
        raise _bad(
            key,
            "not an absolute path",
            value,
            '"@/sbin/ldconfig" (@ = on the host) or an absolute container path; '
            "ocihook does not run it",
        )


def _want_array(key: str, value: object) -> list[object] | tuple[object, ...]:
    if not isinstance(value, list | tuple):
        raise _bad(
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
            raise _bad(key, f"unknown {what}", value, "valid values: " + ", ".join(values) + note)

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
    text = _want_string(key, value, "a CDI kind")
    vendor, slash, cls = text.partition("/")
    if not (slash and _is_cdi_part(vendor) and _is_cdi_part(cls)):
        raise _bad(
            key,
            "not a CDI kind",
            value,
            "write vendor/class such as nvidia.com/gpu: each part starts with a letter, "
            "ends with a letter or digit, and has only letters, digits and _ . - between",
        )


def _check_annotation_prefixes(key: str, value: object) -> None:
    for i, item in enumerate(_want_array(key, value)):
        where = f"{key}[{i}]"
        text = _want_string(where, item, "an annotation key prefix")
        if not text or not all(c in _ANNOTATION_CHARS for c in text):
            raise _bad(
                where,
                "not an annotation key prefix",
                item,
                "write a non-empty prefix of letters, digits and . _ / - such as cdi.k8s.io/",
            )


def _check_swarm_resource(key: str, value: object) -> None:
    text = _want_string(key, value, "a comma list of variable names")
    if text == "":
        return
    for name in text.split(","):
        name = name.strip(" ")
        if not name or not all(c in _ENV_NAME_CHARS for c in name):
            raise _bad(
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
        raise _bad(key, "empty", value, 'name at least one runtime, e.g. ["runc", "crun"]')
    for i, item in enumerate(items):
        where = f"{key}[{i}]"
        text = _want_string(where, item, "a runtime name or absolute path")
        if not (_is_path(text) or (text and all(c in _RUNTIME_NAME_CHARS for c in text))):
            raise _bad(
                where,
                "not a runtime name or absolute path",
                item,
                "write a program name looked up in PATH (letters, digits and _ . + -) such "
                'as "runc", or an absolute path such as "/usr/sbin/runc"',
            )


def _check_capabilities(key: str, value: object) -> None:
    text = _want_string(key, value, "a comma list of driver capabilities")
    if text != "all" and not all(c in CAPABILITIES for c in text.split(",")):
        raise _bad(
            key,
            "not a comma list of driver capabilities",
            value,
            '"all" or names from ' + ",".join(CAPABILITIES) + " separated by commas, no spaces",
        )


#: Every key: TOML name -> (:class:`Config` attribute, check). The order of the docs.
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
    "runtimes": ("runtimes", _check_runtimes),
}

#: The NVIDIA Container Toolkit's sectioned keys -> the ocihook key, or ``None`` when
#: ocihook has no equivalent (see the module docstring).
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
TOOLKIT_SECTIONS = (
    "nvidia-container-cli",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-ctk",
    "features",
)


def _dotted(*parts: str) -> str:
    """A TOML dotted key: bare parts as they are, others quoted."""
    out = []
    for p in parts:
        bare = p and all(c in _ALNUM or c in "_-" for c in p)
        out.append(p if bare else '"' + p.replace("\\", "\\\\").replace('"', '\\"') + '"')
    return ".".join(out)


def _leaves(prefix: tuple[str, ...], value: object) -> list[tuple[tuple[str, ...], object]]:
    """The leaf keys of a table, depth first, in file order."""
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves((*prefix, k), v)]
    return [(prefix, value)]


def _valid_keys_hint() -> str:
    return "valid keys: " + ", ".join(KEYS)


def _unknown_key(key: str, value: object) -> ConfigError:
    """The error for a top-level key that is not in :data:`KEYS`."""
    if key in TOOLKIT_SECTIONS:
        leaves = _leaves((key,), value)
        moves = []
        drops = []
        for parts, _v in leaves:
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
        parts, leaf_value = leaves[0]
        return ConfigError(
            "a section of the NVIDIA Container Toolkit's config.toml; ocihook's keys are "
            "all top-level",
            field=_dotted(*parts),
            value=leaf_value,
            hint="; ".join(notes),
        )
    import difflib

    guess = key.replace("_", "-").lower()
    close = [guess] if guess in KEYS else difflib.get_close_matches(key, KEYS, n=1)
    hint = (f"did you mean {close[0]}? " if close else "") + _valid_keys_hint()
    return ConfigError("unknown key", field=_dotted(key), value=value, hint=hint)


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

    Defaults are those of the module docstring's table; arrays are tuples. Constructing a
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
    annotation_prefixes: tuple[str, ...] = ("cdi.k8s.io/",)
    accept_nvidia_visible_devices_envvar_when_unprivileged: bool = True
    accept_cdi_annotations_when_unprivileged: bool = True
    accept_nvidia_visible_devices_as_volume_mounts: bool = False
    swarm_resource: str = ""
    supported_driver_capabilities: str = ",".join(CAPABILITIES)
    disable_require: bool = False
    cuda_compat: CudaCompatMode = "ldconfig"
    log_file: str = ""
    log_level: LogLevel = "info"
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
        from .core.hostroot import HostRoot

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
        """Byte strings beyond ``NVIDIA_`` and ``CUDA_VERSION`` of which at least one
        occurs in the raw ``config.json`` of any container that asks for GPUs through
        what this configuration enables: the ``swarm-resource`` names, the longest
        ``/``-free part of each annotation prefix (JSON may write ``/`` as ``\\/``), and
        ``nvidia-container-devices`` when requests may come as volume mounts. For a
        no-GPU fast exit that reads ``config.json`` as bytes; a file with a ``\\u``
        escape must still be parsed (letters can be escaped only that way)."""
        markers: list[bytes] = [name.encode() for name in self.swarm_envvars]
        for prefix in self.annotation_prefixes:
            markers.append(max(prefix.split("/"), key=len).encode() or b"/")
        if self.accept_nvidia_visible_devices_as_volume_mounts:
            markers.append(VOLUME_MOUNT_DIR.rsplit("/", 1)[1].encode())
        return tuple(dict.fromkeys(markers))


def config_from_dict(data: Mapping[str, object], *, source: str | None = None) -> Config:
    """Check a parsed document (``tomllib`` output) and return its :class:`Config`.

    Args:
        data: the top-level table; keys as in the module docstring, every one optional.
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


def _read(path: str, origin: str | None) -> bytes | None:
    """The bytes of the configuration file; ``None`` when the default file is missing.

    Opened non-blocking and checked to be a regular file, so a FIFO cannot hang a hook.

    Raises:
        ConfigError: a named file is missing; any file is unreadable, not a regular file,
            or larger than :data:`MAX_SIZE`.
    """
    import stat

    shown = os.path.abspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        if origin is None:
            return None
        raise ConfigError(
            f"configuration file named by {origin} not found",
            path=shown,
            hint=f"without --config and {ENV_VAR}, ocihook reads {DEFAULT_PATH} when it "
            "exists, else uses the defaults",
        ) from None
    except OSError as e:
        raise ConfigError(f"cannot open configuration file: {e.strerror}", path=shown) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError("configuration file is not a regular file", path=shown)
        with open(fd, "rb", closefd=False) as f:
            data = f.read(MAX_SIZE + 1)
    except OSError as e:
        raise ConfigError(f"cannot read configuration file: {e.strerror}", path=shown) from None
    finally:
        os.close(fd)
    if len(data) > MAX_SIZE:
        raise ConfigError(f"configuration file larger than {MAX_SIZE} bytes", path=shown)
    return data


def _parse(data: bytes, shown: str) -> dict[str, Any]:
    """Parse TOML bytes with :mod:`tomllib`, or take the document parsed from the same
    bytes before from the root-owned cache (:mod:`ocihook.discovery.cache`, entries
    ``config-*.json``, keyed by the whole text: never stale) when its directory exists:
    importing :mod:`tomllib` costs more than the interpreter's start.

    Raises:
        ConfigError: not UTF-8, not TOML (with the line), nested too deeply, or holding a
            decimal integer too long to convert.
    """
    from .discovery import cache

    key = {"format": 1, "toml": data.decode("utf-8", "surrogateescape")}
    found = cache.lookup(key, {}, cache.DEFAULT_DIR, prefix="config")
    if isinstance(found, dict):
        return found
    doc = _parse_toml(data, shown)
    if os.path.isdir(cache.DEFAULT_DIR):
        cache.store(key, doc, (), cache.DEFAULT_DIR, prefix="config")
    return doc


def _parse_toml(data: bytes, shown: str) -> dict[str, Any]:
    """Parse TOML bytes with :mod:`tomllib` (see :func:`_parse`)."""
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


def parse_config_bytes(data: bytes, *, path: str) -> dict[str, Any]:
    """The TOML document of a configuration file's bytes, parsed but not checked (for
    ``ocihook config check``, which checks it against the JSON Schema as well as with
    :func:`config_from_dict`); ``path`` names the file in errors.

    Raises:
        ConfigError: not UTF-8, not TOML (``line`` set when known), or nested too deeply.
    """
    return _parse(data, path)


def load_config(path: str | None = None, *, environ: Mapping[str, str] | None = None) -> Config:
    """Read the configuration file and return its :class:`Config`.

    Args:
        path: the file named by ``--config``; ``None`` to use ``OCIHOOK_CONFIG`` from
            ``environ``, else :data:`DEFAULT_PATH`.
        environ: the environment to read ``OCIHOOK_CONFIG`` from (default
            :data:`os.environ`); hooks pass ``{}`` (see the module docstring).

    Returns:
        The configuration; ``Config()`` (``source`` ``None``) when the default file does
        not exist. :mod:`tomllib` is imported only when a file exists.

    Raises:
        ConfigError: a named file is missing; a file is unreadable, not a regular file,
            over :data:`MAX_SIZE`, not UTF-8 or not TOML (``line`` set when known); or it
            has an unknown key or a bad value (``field`` is the dotted key, ``value`` the
            value, ``hint`` the valid keys or values).
    """
    file, origin = resolve_config_path(path, environ=environ)
    data = _read(file, origin)
    if data is None:
        return Config()
    shown = os.path.abspath(file)
    return config_from_dict(_parse(data, shown), source=shown)


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
    return _read(file, origin)


def bytes_may_set(keys: Iterable[str], data: bytes | None) -> bool:
    """:func:`config_may_set` on bytes already read (``None``: no file)."""
    if data is None:
        return False
    return b"\\" in data or any(k.encode() in data for k in keys)


def scan_debug_log_file(data: bytes | None) -> str | None:
    """The ``log-file`` that receives debug records, decided from the file's bytes without
    parsing TOML (which costs more than a no-GPU hook start): ``""`` when certainly none
    (no file; no ``log-file`` key or no ``debug`` in the bytes; ``log-level`` not
    ``"debug"``; ``log-file`` empty), the path when the file sets both keys on plain lines
    (``log-file = "/var/log/ocihook.core.log"``, ``log-level = 'debug'``, comments allowed),
    ``None`` when the bytes are too unusual to tell (escapes, multi-line strings,
    sections, a key on another kind of line, a key twice, a path that is not absolute):
    then the caller calls :func:`load_config`, which also reports what is wrong.

    For the no-GPU fast exit of ``ocihook hook``: it logs why a container got no GPU only
    when this says so, at no cost when logging is off.
    """
    if data is None:
        return ""
    if b"\\" in data:
        return None
    if b"debug" not in data or b"log-file" not in data:
        return ""
    if b"'''" in data or b'"""' in data:
        return None
    found: dict[bytes, bytes] = {}
    for line in data.splitlines():
        line = line.strip()
        if line.startswith(b"["):
            return None
        if (b"log-file" not in line and b"log-level" not in line) or line.startswith(b"#"):
            continue
        key, _eq, rest = line.partition(b"=")
        key, rest = key.strip(), rest.strip()
        quote = rest[:1]
        end = rest.find(quote, 1) if quote in (b'"', b"'") else -1
        tail = rest[end + 1 :].strip() if end > 0 else b""
        if end < 0 or key not in (b"log-file", b"log-level") or key in found:
            return None
        if tail and not tail.startswith(b"#"):
            return None
        value = rest[1:end]
        if any((c < 0x20 and c != 0x09) or c == 0x7F for c in value):
            return None
        found[key] = value
    if found.get(b"log-level", b"info") != b"debug":
        return ""
    path = found.get(b"log-file", b"")
    if not path:
        return ""
    if not path.startswith(b"/"):
        return None
    try:
        return path.decode()
    except UnicodeDecodeError:
        return None


def config_may_set(
    keys: Iterable[str],
    path: str | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> bool:
    """Whether the configuration file might set any of ``keys``, decided without parsing.

    For the start path: a no-GPU fast exit needs the configuration only when it sets one of
    :data:`REQUEST_DETECTION_KEYS`, and parsing costs 5-10 ms. ``False`` means certainly
    not: the default file is missing, or the file's bytes contain none of the key names
    and no backslash (a quoted key can spell a name only with escapes). ``True`` means the
    caller must call :func:`load_config` — also when a named file is missing or
    unreadable, so that the error is reported there. Such a fast exit does not report a
    malformed file; the next container that asks for GPUs does.
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
    from .schemas import load_schema as load_packaged_schema

    return load_packaged_schema("config")


# --- migrating from the NVIDIA Container Toolkit's file -------------------------------

#: Where the NVIDIA Container Toolkit keeps its configuration.
TOOLKIT_PATH = "/etc/nvidia-container-runtime/config.toml"

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
    text = _want_string(key, value, "a comma list")
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
        for parts, value in _leaves((), data):
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
                path = _want_string(key, value, "a path")
                if path and path != "/dev/null":
                    put("log-file", key, path)
            elif key == "nvidia-container-runtime.log-level":
                level = _want_string(key, value, "a log level").lower()
                if level not in _TOOLKIT_LOG_LEVELS:
                    raise _bad(
                        key, "unknown log level", value, "valid: " + ", ".join(_TOOLKIT_LOG_LEVELS)
                    )
                if _TOOLKIT_LOG_LEVELS[level] != level:
                    notes.append(f"{key} = {value!r} becomes {_TOOLKIT_LOG_LEVELS[level]!r}")
                put("log-level", key, _TOOLKIT_LOG_LEVELS[level])
            elif key == "nvidia-container-runtime.mode":
                mode = _want_string(key, value, "a mode")
                if mode == "csv":
                    raise _bad(
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
                compat = _want_string(key, value, "a CUDA compat mode")
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
                e.field = _dotted(*origin[ours].split("."))
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
    data = _read(path, "the command line")
    if data is None:  # pragma: no cover - a named file that is missing raises
        raise ConfigError("toolkit configuration file not found", path=shown)
    return migrate_toolkit_config(_parse(data, shown), source=shown)


def _toml_string(text: str) -> str:
    """A TOML basic string (control characters escaped)."""
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
    in :data:`KEYS` order, ``header`` lines first as comments."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    for key in KEYS:
        if key not in document:
            continue
        value = document[key]
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, list | tuple):
            text = "[" + ", ".join(_toml_string(str(v)) for v in value) + "]"
        else:
            text = _toml_string(str(value))
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"
