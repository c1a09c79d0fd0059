"""The operator's configuration file, ``/etc/ocihook/config.toml``, and the settings it gives.

One TOML file sets what the command line would otherwise repeat on every registration:
the host roots, how requests are read, logging. Every key is top-level and optional; the
reference of every key (type, default, values, meaning) is ``docs/reference/configuration.md``,
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
``__init__`` imports none of its modules, so the start path loads only what it uses.
"""
