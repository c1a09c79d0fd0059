"""The configuration reference, ``docs/reference/configuration.md``, generated from the JSON Schema.

``specs/config.schema.json`` (package data: ``ocihook/schemas/config.schema.json``) is the
source of truth for the keys of ``/etc/ocihook/config.toml``: their order, types,
defaults, allowed values, meanings and the NVIDIA Container Toolkit key each replaces
(its ``$comment``). :func:`render_reference` turns it into Markdown; the script
``scripts/gen-reference`` (``python -m ocihook.config.reference``) writes the file,
and a test fails when the committed file differs from what this module produces.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DOCUMENT", "main", "render_reference", "toml_value", "type_text"]

#: Where the reference is committed, relative to the repository root.
DOCUMENT = "docs/reference/configuration.md"

#: The first lines of the generated file.
_BANNER = (
    "<!-- Generated from the JSON Schema config.schema.json by ocihook.config.reference; "
    "do not edit: change the schema and generate it again. -->"
)


def toml_value(value: object) -> str:
    """``value`` (a JSON default: string, boolean, number or array of them) written as
    TOML writes it: ``"/"``, ``false``, ``["runc", "crun"]``, ``[]``.

    Raises:
        TypeError: ``value`` is an object or ``None`` (no key of the schema has one).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for a default of type {type(value).__name__}")


def _resolve(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """``prop`` with a ``$ref`` to ``#/$defs/NAME`` replaced by that definition (the
    property's own keywords win)."""
    if "$ref" not in prop:
        return dict(prop)
    target = defs[str(prop["$ref"]).rsplit("/", 1)[1]]
    return {**target, **{k: v for k, v in prop.items() if k != "$ref"}}


def type_text(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """A property's type in words, from its ``type``, ``$ref``, ``enum``, ``const``,
    ``anyOf``, ``items`` and ``minItems``: ``boolean``, ``string``, ``absolute path``
    (``$ref`` to ``absolutePath``), ``one of "a", "b"``, ``array of absolute path``,
    ``"" or absolute path``.

    Raises:
        KeyError: a ``$ref`` names no definition of ``defs``.
    """
    if str(prop.get("$ref", "")).endswith("/absolutePath"):
        return "absolute path"
    prop = _resolve(prop, defs)
    if "enum" in prop:
        return "one of " + ", ".join(toml_value(v) for v in prop["enum"])
    if "const" in prop:
        return toml_value(prop["const"])
    if "anyOf" in prop:
        return " or ".join(type_text(p, defs) for p in prop["anyOf"])
    kind = str(prop.get("type", "any"))
    if kind == "array":
        text = "array of " + type_text(prop.get("items", {}), defs)
        if prop.get("minItems"):
            text += f" (at least {prop['minItems']})"
        return text
    return kind


def _patterns(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> list[str]:
    """The ``pattern`` of ``prop`` and of what it is made of (items, ``anyOf``)."""
    if str(prop.get("$ref", "")).endswith("/absolutePath"):
        return []  # "absolute path" says it
    prop = _resolve(prop, defs)
    found = [str(prop["pattern"])] if "pattern" in prop else []
    for part in [*prop.get("anyOf", ()), *([prop["items"]] if "items" in prop else [])]:
        found += _patterns(part, defs)
    return found


def render_reference(schema: Mapping[str, Any]) -> str:
    """The Markdown reference of the configuration schema ``schema`` (the parsed
    ``config.schema.json``): a summary table (key, type, default), then one section per
    key in the schema's order with its meaning (``description``), type, default, the
    pattern a string must match when the type does not say it, and the toolkit key it
    replaces (``$comment``). Ends with a newline.

    Raises:
        KeyError: the schema has no ``properties``, a property no ``default``, or a
            ``$ref`` that names no definition.
        TypeError: a default with no TOML form (:func:`toml_value`).
    """
    defs: Mapping[str, Any] = schema.get("$defs", {})
    props: Mapping[str, Mapping[str, Any]] = schema["properties"]
    out = [
        _BANNER,
        "",
        "# Configuration reference: `/etc/ocihook/config.toml`",
        "",
        str(schema.get("description", "")),
        "",
        "All keys are top-level (the file has no sections). A path is absolute and has no "
        "NUL character. `ocihook config default` prints the commented default file, "
        "`ocihook config check` checks a file against this schema.",
        "",
        "| key | type | default |",
        "|---|---|---|",
    ]
    for key, prop in props.items():
        out.append(
            f"| [`{key}`](#{key}) | {type_text(prop, defs)} | `{toml_value(prop['default'])}` |"
        )
    for key, prop in props.items():
        out += ["", f"## `{key}`", "", str(prop.get("description", "")), ""]
        out.append(f"- Type: {type_text(prop, defs)}")
        out.append(f"- Default: `{key} = {toml_value(prop['default'])}`")
        out += [f"- Matches: `{p}`" for p in _patterns(prop, defs)]
        comment = str(prop.get("$comment", ""))
        if comment.startswith("toolkit: "):
            out.append(f"- NVIDIA Container Toolkit: {comment.removeprefix('toolkit: ')}")
        elif comment:
            out.append(f"- NVIDIA Container Toolkit: none ({comment})")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ocihook.config.reference [--check] [PATH]``: write the reference of
    the packaged schema to ``PATH`` (default :data:`DOCUMENT`), or with ``--check`` exit
    1 when ``PATH`` differs from it (and 0 when it is the same)."""
    from ..schemas import load_schema

    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    paths = [a for a in args if a != "--check"]
    path = paths[0] if paths else DOCUMENT
    text = render_reference(load_schema("config"))
    if check:
        try:
            with open(path, encoding="utf-8") as f:
                same = f.read() == text
        except FileNotFoundError:
            same = False
        if not same:
            print(
                f"{path} is out of date: python -m ocihook.config.reference {path}",
                file=sys.stderr,
            )
        return 0 if same else 1
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
