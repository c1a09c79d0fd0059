"""JSON for a container's start path without importing :mod:`json`.

``import json`` imports :mod:`re` and :mod:`enum` (with :mod:`functools`,
:mod:`collections`...): about as much as starting the interpreter. The C accelerator
:mod:`_json` that :mod:`json` itself uses needs none of them, so :func:`loads` and
:func:`dumps` drive it directly:

* :func:`loads` parses exactly as ``json.loads(text, parse_constant=...)`` does (the same
  C scanner, strict, ``int``/``float`` numbers); on any error, and where :mod:`_json` is
  missing, it calls :func:`json.loads` so that the error (a :class:`json.JSONDecodeError`
  with position) is the standard one;
* :func:`dumps` writes compact JSON (``","`` and ``":"``, no indent) with the C encoder,
  as ``json.dumps(doc, separators=(",", ":"), ensure_ascii=...)`` would;
* :func:`dumps_indented` writes what ``json.dumps(doc, indent=...)`` writes (documents
  people read), its scalars by the C encoder.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WHITESPACE = " \t\n\r"


class _Context:
    """What :func:`_json.make_scanner` reads from a decoder."""

    def __init__(
        self,
        parse_constant: Callable[[str], Any] | None,
        object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
    ) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = object_pairs_hook
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = parse_constant if parse_constant is not None else _constant
        self.memo: dict[str, str] = {}


def _constant(name: str) -> float:
    return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


def loads(
    text: str,
    *,
    parse_constant: Callable[[str], Any] | None = None,
    object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None,
) -> Any:
    """``json.loads(text, parse_constant=parse_constant, object_pairs_hook=...)`` without
    importing :mod:`json` unless ``text`` is not valid JSON (then
    :class:`json.JSONDecodeError` is raised, as :func:`json.loads` raises it; so is
    anything ``parse_constant`` or ``object_pairs_hook`` raises)."""
    scanner: Any = None
    try:  # noqa: SIM105 (contextlib is not imported on a container's start path)
        from _json import make_scanner as scanner
    except ImportError:  # pragma: no cover (CPython always has it)
        pass
    if scanner is not None and isinstance(text, str):
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = scanner(_Context(parse_constant, object_pairs_hook))(text, start)
        except (StopIteration, SystemError):
            # json.loads says where; _json raises its errors only once json.decoder is
            # imported (a SystemError before)
            pass
        else:
            if not text[end:].strip(_WHITESPACE):
                return value
    import json

    return json.loads(text, parse_constant=parse_constant, object_pairs_hook=object_pairs_hook)


def _default(value: object) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def dumps(value: Any, *, ensure_ascii: bool = True, sort_keys: bool = False) -> str:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=ensure_ascii,
    sort_keys=sort_keys)`` with the C encoder, without importing :mod:`json` (except where
    :mod:`_json` lacks it).

    Raises:
        TypeError: a value JSON cannot hold.
        ValueError: a circular reference, or a non-finite float.
        UnicodeEncodeError: never (lone surrogates are kept as they are in the ``str``).
    """
    try:
        import _json

        encoder = _json.make_encoder(
            {},
            _default,
            _json.encode_basestring_ascii if ensure_ascii else _json.encode_basestring,
            None,
            ":",
            ",",
            sort_keys,
            False,
            False,
        )
    except (ImportError, AttributeError, TypeError):  # pragma: no cover (other Pythons)
        import json

        return json.dumps(
            value,
            separators=(",", ":"),
            ensure_ascii=ensure_ascii,
            allow_nan=False,
            sort_keys=sort_keys,
        )
    return "".join(encoder(value, 0))


def _leaf(value: Any, ensure_ascii: bool) -> str:
    """A scalar as :func:`json.dumps` writes it (``NaN``/``Infinity`` included)."""
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), float("-inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    return dumps(value, ensure_ascii=ensure_ascii)


def dumps_indented(value: Any, indent: int | str = "\t", *, ensure_ascii: bool = True) -> str:
    """``json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)`` (for documents
    people read: ``ocihook edit``'s ``config.json``, ``cdi generate --format json``)
    without importing :mod:`json`: containers are laid out here, scalars written by the C
    encoder (:func:`dumps`). Keys that are not strings are converted as :mod:`json` does.

    Raises:
        TypeError: a value JSON cannot hold.
        RecursionError: nesting deeper than the interpreter's recursion limit.
    """
    pad = indent if isinstance(indent, str) else " " * indent
    parts: list[str] = []

    def key(k: Any) -> str:
        if isinstance(k, str):
            return dumps(k, ensure_ascii=ensure_ascii)
        if k is None or isinstance(k, bool | int | float):
            return dumps(_leaf(k, ensure_ascii), ensure_ascii=ensure_ascii)
        raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")

    def put(v: Any, level: int) -> None:
        if isinstance(v, dict):
            if not v:
                parts.append("{}")
                return
            inner = "\n" + pad * (level + 1)
            sep = "{" + inner
            for k, item in v.items():
                parts.append(sep + key(k) + ": ")
                sep = "," + inner
                put(item, level + 1)
            parts.append("\n" + pad * level + "}")
        elif isinstance(v, list | tuple):
            if not v:
                parts.append("[]")
                return
            inner = "\n" + pad * (level + 1)
            sep = "[" + inner
            for item in v:
                parts.append(sep)
                sep = "," + inner
                put(item, level + 1)
            parts.append("\n" + pad * level + "]")
        else:
            parts.append(_leaf(v, ensure_ascii))

    put(value, 0)
    return "".join(parts)
