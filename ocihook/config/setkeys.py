"""``ocihook config --set KEY[=VALUE]``: change keys of the configuration file, its
comments and layout kept, as ``nvidia-ctk config --set`` does for the toolkit's file.

A setting is ``KEY=VALUE`` or a bare ``KEY`` (``KEY=true``, for a boolean key). The
value is read by the key's type in the configuration schema
(``ocihook/schemas/config.schema.json``): a boolean is ``true`` or ``false``; an array is
its elements separated by ``:`` (the toolkit's convention: ``runtimes=runc:crun``), empty
for an empty array; a string is taken as written. When a key is set twice the last
value wins (the toolkit's rule). The edited document must then pass the same checks every
command applies (:func:`ocihook.config.validate.config_from_dict`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.errors import ConfigError
from .validate import KEYS, config_from_dict

__all__ = ["key_type", "parse_setting", "set_keys"]


def key_type(schema: Mapping[str, Any], key: str) -> str:
    """The JSON type (``"boolean"``, ``"string"``, ``"array"``) of ``key`` in the
    configuration schema, a ``$ref`` followed into ``$defs``.

    Raises:
        ConfigError: ``key`` is not a configuration key (the hint lists them).
    """
    props = schema.get("properties", {})
    if key not in KEYS or key not in props:
        _section, dot, name = key.partition(".")
        if dot and name in KEYS:  # the toolkit's spelling: nvidia-container-cli.no-cgroups
            hint = (
                f"{key} is the NVIDIA Container Toolkit's key; ocihook's is {name} "
                "(ocihook config migrate converts a whole toolkit file)"
            )
        else:
            hint = "valid keys: " + ", ".join(KEYS)
        raise ConfigError("unknown configuration key", field=key, hint=hint)
    prop = props[key]
    ref = prop.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        prop = schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"), prop)
    kind = prop.get("type")
    return kind if isinstance(kind, str) else "string"


def parse_setting(schema: Mapping[str, Any], setting: str) -> tuple[str, object]:
    """``"KEY=VALUE"`` (or a bare boolean ``"KEY"``) as ``(key, value)`` with the value of
    the key's type (module docstring). The value is not checked further here.

    Raises:
        ConfigError: an unknown key, a bare key that is not boolean, or a boolean value
            other than ``true``/``false``.
    """
    key, eq, text = setting.partition("=")
    kind = key_type(schema, key)
    if kind == "boolean":
        if not eq:
            return key, True
        if text in ("true", "false"):
            return key, text == "true"
        raise ConfigError(
            "a boolean key takes true or false", field=key, value=text, hint=f"--set {key}=true"
        )
    if not eq:
        raise ConfigError(
            "a value is required (KEY=VALUE); only a boolean key may be given alone",
            field=key,
            hint=f"--set {key}=VALUE",
        )
    if kind == "array":
        return key, [] if text == "" else text.split(":")
    return key, text


def set_keys(text: str, settings: Sequence[str], schema: Mapping[str, Any], *, path: str) -> str:
    """The configuration file ``text`` with each of ``settings`` applied, comments and the
    order of the other keys kept (tomlkit); a key that is not in the file is appended.

    Args:
        text: the file's content ("" for a missing file).
        settings: ``KEY=VALUE`` strings, applied in order.
        schema: the configuration schema (:func:`ocihook.config.load.load_schema`).
        path: the file, for messages.

    Returns:
        The new content (equal to ``text`` when nothing changes).

    Raises:
        ConfigError: the file is not TOML, a setting is malformed (:func:`parse_setting`),
            or the result fails the configuration's checks; ``path`` names the file.
    """
    import tomllib

    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        doc = tomlkit.parse(text)
    except TOMLKitError as e:
        raise ConfigError(f"invalid TOML: {e}", path=path) from None
    values: dict[str, object] = {}
    for setting in settings:
        try:
            key, value = parse_setting(schema, setting)
        except ConfigError as e:
            raise e.with_path(path) from None
        values[key] = value  # the last value of a key wins
    for key, value in values.items():
        doc[key] = value
    new = tomlkit.dumps(doc)
    try:
        config_from_dict(tomllib.loads(new), source=path)
    except ConfigError as e:
        raise e.with_path(path) from None
    return new
