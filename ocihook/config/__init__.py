"""The operator's configuration file, ``/etc/ocihook/config.toml``, and the settings it gives.

One TOML file sets what the command line would otherwise repeat on every registration:
the host roots, how requests are read, logging. Every key is top-level and optional; the
reference of every key (type, default, values, meaning) is ``docs/configuration.md``,
generated from the JSON Schema ``specs/config.schema.json`` (package data:
:func:`ocihook.config.load.load_schema`), the source of truth for keys, types and values.

One module per job; callers import the module they need:

* :mod:`ocihook.config.load`: which file is read (``--config``, ``OCIHOOK_CONFIG``, the
  default), its bytes, the parsed document (cached in :mod:`ocihook.linux.cachestore`)
  and :func:`~ocihook.config.load.load_config`;
* :mod:`ocihook.config.scan`: what the file's bytes say without parsing TOML, for the
  no-GPU exits of the hook and the wrapper;
* :mod:`ocihook.config.validate`: the keys, the checks that mirror the schema, and
  :class:`~ocihook.config.validate.Config`;
* :mod:`ocihook.config.migrate`: the NVIDIA Container Toolkit's file converted to this one;
* :mod:`ocihook.config.options`: :class:`~ocihook.config.options.Options` (what a plan
  needs from a configuration) and how ocihook registers its own hooks.

``load`` and ``scan`` are on every container's start: they import neither
:mod:`tomllib` (until a file must be parsed) nor :mod:`jsonschema`, and this package's
``__init__`` imports no submodule: the names below are loaded on first use (PEP 562).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this package is on every container start
if TYPE_CHECKING:
    from .load import DEFAULT_PATH as DEFAULT_PATH
    from .load import ENV_VAR as ENV_VAR
    from .load import config_may_set as config_may_set
    from .load import load_config as load_config
    from .load import load_schema as load_schema
    from .load import parse_config_bytes as parse_config_bytes
    from .load import read_config_bytes as read_config_bytes
    from .load import resolve_config_path as resolve_config_path
    from .migrate import TOOLKIT_PATH as TOOLKIT_PATH
    from .migrate import Migration as Migration
    from .migrate import load_toolkit_config as load_toolkit_config
    from .migrate import migrate_toolkit_config as migrate_toolkit_config
    from .migrate import render_config as render_config
    from .scan import REQUEST_DETECTION_KEYS as REQUEST_DETECTION_KEYS
    from .scan import bytes_may_set as bytes_may_set
    from .scan import scan_debug_log_file as scan_debug_log_file
    from .validate import KEYS as KEYS
    from .validate import Config as Config
    from .validate import ConfigError as ConfigError
    from .validate import config_from_dict as config_from_dict

#: Public name -> the submodule that defines it.
_EXPORTS = {
    "DEFAULT_PATH": "load",
    "ENV_VAR": "load",
    "config_may_set": "load",
    "load_config": "load",
    "load_schema": "load",
    "parse_config_bytes": "load",
    "read_config_bytes": "load",
    "resolve_config_path": "load",
    "TOOLKIT_PATH": "migrate",
    "Migration": "migrate",
    "load_toolkit_config": "migrate",
    "migrate_toolkit_config": "migrate",
    "render_config": "migrate",
    "REQUEST_DETECTION_KEYS": "scan",
    "bytes_may_set": "scan",
    "scan_debug_log_file": "scan",
    "KEYS": "validate",
    "Config": "validate",
    "ConfigError": "validate",
    "config_from_dict": "validate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> object:
    """Load a public name from its submodule on first use (PEP 562).

    Raises:
        AttributeError: ``name`` is not one of :data:`__all__`.
    """
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ocihook.config' has no attribute {name!r}")
    value = getattr(__import__(f"ocihook.config.{module}", fromlist=[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's names and the public names loaded on first use."""
    return sorted(set(globals()) | set(__all__))
