"""The JSON Schemas shipped in the package, and checking a document against one.

The files beside this module are package data, installed with ocihook (wheel or editable):

=============================  ========================================================
``cdi.schema.json``            a CDI spec file, versions 0.3.0 to 1.1.0 (``ocihook cdi
                               validate``)
``config.schema.json``         the configuration file ``/etc/ocihook/config.toml``
                               (``ocihook config check``)
``plan.schema.json``           ``ocihook plan``'s JSON output
``doctor-record.schema.json``  ``ocihook doctor --record``'s deployment record
``config.toml.example``        the commented default configuration (``ocihook config
                               default``)
=============================  ========================================================

They are copies of the repository's ``specs/*.json`` and ``packaging/config.toml.example``
(the tests keep them identical). :func:`violations` validates with :mod:`jsonschema`,
imported on first use only: the hook and the spec editor never call it (the start path
checks documents with hand-written code that the tests hold to the same verdicts).

This module imports nothing from ocihook but :mod:`ocihook.core.records`, so any layer may
use it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable
from typing import Any

from ..core.records import Record

__all__ = ["SCHEMA_NAMES", "Violation", "json_path", "load_schema", "schema_path", "violations"]

#: The schemas shipped, by the name :func:`load_schema` takes.
SCHEMA_NAMES = ("cdi", "config", "plan", "doctor-record")

#: At most this many characters of one violation's message (jsonschema quotes the value).
MAX_MESSAGE = 240

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class Violation(Record):
    """One way a document breaks a schema.

    Attributes:
        path: where, as a JSON path from the document's root (``$``,
            ``$.devices[0].containerEdits.mounts[1]``, ``$.annotations['cdi.k8s.io/x']``).
        message: jsonschema's message, whitespace collapsed, cut at :data:`MAX_MESSAGE`
            characters (``'hostPath' is a required property``).
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def schema_path(name: str) -> str:
    """The installed file of schema ``name`` (one of :data:`SCHEMA_NAMES`).

    Raises:
        ValueError: ``name`` is not a shipped schema.
    """
    if name not in SCHEMA_NAMES:
        raise ValueError(f"no schema {name!r}; one of {', '.join(SCHEMA_NAMES)}")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.schema.json")


def load_schema(name: str) -> dict[str, Any]:
    """Schema ``name`` (see :func:`schema_path`) as a JSON object.

    Raises:
        ValueError: ``name`` is not a shipped schema.
        OSError: the installation lacks the file.
    """
    with open(schema_path(name), encoding="utf-8") as f:
        schema: dict[str, Any] = json.load(f)
    return schema


def json_path(parts: Iterable[str | int]) -> str:
    """A JSON path (``$.devices[0].name``) from the keys and indexes leading to a value;
    keys that are not plain identifiers are quoted (``$.annotations['a.b/c']``)."""
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.fullmatch(part):
            out += f".{part}"
        else:
            out += "[" + repr(str(part)) + "]"
    return out


def _message(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def _leaves(error: Any) -> list[Any]:
    """The errors to report for ``error``: itself, or for an ``anyOf``/``oneOf`` whose
    alternatives all but one fail on the value's type alone (``null`` or an object), the
    errors of that one alternative, flattened the same way."""
    if error.validator not in ("anyOf", "oneOf") or not error.context:
        return [error]
    branches: dict[int, list[Any]] = {}
    for sub in error.context:
        branches.setdefault(int(sub.relative_schema_path[0]), []).append(sub)
    here = list(error.absolute_path)
    real = {
        i: subs
        for i, subs in branches.items()
        if not all(s.validator == "type" and list(s.absolute_path) == here for s in subs)
    }
    if len(real) != 1:
        return [error]
    (subs,) = real.values()
    return [leaf for sub in subs for leaf in _leaves(sub)]


def violations(document: Any, schema: str | dict[str, Any]) -> list[Violation]:
    """Every way ``document`` (parsed JSON, YAML or TOML) breaks ``schema`` (a name from
    :data:`SCHEMA_NAMES`, or a schema object), ordered by path; empty when it conforms.

    Validates with :mod:`jsonschema` (JSON Schema draft 2020-12, the ``$schema`` of the
    shipped files), imported here on first use.

    Raises:
        ValueError: an unknown schema name.
        OSError: the installation lacks the schema file.
    """
    import jsonschema

    if isinstance(schema, str):
        schema = load_schema(schema)
    validator_class = jsonschema.validators.validator_for(schema)
    validator = validator_class(schema)
    found: dict[tuple[str, str], Violation] = {}
    for error in validator.iter_errors(document):
        for leaf in _leaves(error):
            v = Violation(json_path(leaf.absolute_path), _message(leaf.message))
            found.setdefault((v.path, v.message), v)
    return sorted(found.values(), key=lambda v: _sort_key(v.path))


def _sort_key(path: str) -> str:
    # $.devices[10] after $.devices[9]: indexes compare as numbers
    return re.sub(r"\[(\d+)\]", lambda m: f"[{int(m.group(1)):012d}]", path)
