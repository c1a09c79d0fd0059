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
  as ``json.dumps(doc, separators=(",", ":"), ensure_ascii=...)`` would; for indented
  output (documents people read) use :mod:`json`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_WHITESPACE = " \t\n\r"


class _Context:
    """What :func:`_json.make_scanner` reads from a decoder."""

    def __init__(self, parse_constant: Callable[[str], Any] | None) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = parse_constant if parse_constant is not None else _constant
        self.memo: dict[str, str] = {}


def _constant(name: str) -> float:
    return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[name]


def loads(text: str, *, parse_constant: Callable[[str], Any] | None = None) -> Any:
    """``json.loads(text, parse_constant=parse_constant)`` without importing :mod:`json`
    unless ``text`` is not valid JSON (then :class:`json.JSONDecodeError` is raised, as
    :func:`json.loads` raises it; so is anything ``parse_constant`` raises)."""
    scanner: Any = None
    try:  # noqa: SIM105 (contextlib is not imported on a container's start path)
        from _json import make_scanner as scanner
    except ImportError:  # pragma: no cover (CPython always has it)
        pass
    if scanner is not None and isinstance(text, str):
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = scanner(_Context(parse_constant))(text, start)
        except (StopIteration, SystemError):
            # json.loads says where; _json raises its errors only once json.decoder is
            # imported (a SystemError before)
            pass
        else:
            if not text[end:].strip(_WHITESPACE):
                return value
    import json

    return json.loads(text, parse_constant=parse_constant)


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
