"""Editing TOML engine files (containerd's ``config.toml``, CRI-O drop-ins) with
:mod:`tomlkit`, which keeps comments and layout, and checking each edit with a strict
reader (:mod:`tomllib`): the file after the edit must mean what it meant before plus
exactly what ocihook wrote (:func:`check_toml`).

:mod:`tomlkit` is imported inside the functions, only when a TOML file is edited.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import EngineConfigError

__all__ = [
    "canonical",
    "check_toml",
    "edit_error",
    "indent_table",
    "key_indent",
    "parse_toml",
    "same_toml",
    "set_key",
    "strip_paths",
    "style_like",
    "sub_table",
    "unchanged_meaning",
]


def parse_toml(text: str, path: str) -> Any:
    """``text`` as a tomlkit document (``path`` names the file in errors).

    Raises:
        EngineConfigError: not valid TOML.
    """
    import tomlkit
    from tomlkit.exceptions import TOMLKitError

    try:
        return tomlkit.parse(text)
    except (TOMLKitError, ValueError) as e:  # ValueError: an integer int() refuses
        raise EngineConfigError(f"not valid TOML: {e}", path=path) from None


def sub_table(parent: Any, key: str, *, path: str, field: str, super_table: bool = True) -> Any:
    """``parent[key]`` as a table, created when missing (a super table: written only as
    the dotted header of its sub-tables).

    Raises:
        EngineConfigError: ``parent[key]`` is not a table (``field`` names it).
    """
    import tomlkit
    from tomlkit.items import InlineTable, Table

    if key not in parent:
        parent[key] = tomlkit.table(is_super_table=super_table)
    value = parent[key]
    if not isinstance(value, Table | InlineTable | dict):
        raise EngineConfigError(f"{field} must be a table", path=path, field=field)
    return value


def key_indent(table: Any) -> str:
    """The indentation of the first plain key of a tomlkit table (``""`` if none, or for
    a table defined in several out-of-order parts, which tomlkit gives as a proxy)."""
    from tomlkit.items import Table

    for key, item in getattr(getattr(table, "value", table), "body", ()):
        if key is not None and not isinstance(item, Table) and hasattr(item, "trivia"):
            return str(item.trivia.indent)
    return ""


def set_key(table: Any, key: str, value: object) -> None:
    """Set ``table[key]`` only when it differs, so an unchanged file keeps its bytes; a
    new key is indented as the table's other keys."""
    current = table.get(key)
    plain = current.unwrap() if hasattr(current, "unwrap") else current
    if key in table and plain == value and type(plain) is type(value):
        return
    indent = key_indent(table)
    table[key] = value
    container = getattr(table, "value", table)
    if current is None and hasattr(container, "item"):
        item = container.item(key)
        if hasattr(item, "trivia"):
            item.trivia.indent = indent


def strip_paths(doc: dict[str, Any], paths: list[tuple[str, ...]]) -> None:
    """Remove each path of ``paths`` from ``doc`` (plain dicts), and the tables on the
    way that are empty then, whether the removal or the file left them empty: an edit
    that fills an empty table (``[plugins."io.containerd.grpc.v1.cri"]`` alone) compares
    equal to the file before it once both are stripped."""
    for keys in paths:
        chain = [doc]
        for key in keys[:-1]:
            sub = chain[-1].get(key)
            if not isinstance(sub, dict):
                break
            chain.append(sub)
        if len(chain) == len(keys):
            chain[-1].pop(keys[-1], None)
        for parent, key in zip(reversed(chain[:-1]), reversed(keys[: len(chain) - 1]), strict=True):
            if parent.get(key) == {}:
                del parent[key]


def check_toml(before: str, after: str, wrote: dict[tuple[str, ...], object], *, path: str) -> None:
    """Check the edit tomlkit made: ``after`` read by a strict TOML reader (:mod:`tomllib`)
    holds each value of ``wrote`` (path of keys -> plain value) and, apart from those
    paths, the same as ``before``. tomlkit keeps layout but can misplace what it adds to
    some valid layouts (a table written with dotted keys, tables out of order): such a
    file is refused rather than written wrong.

    Raises:
        EngineConfigError: ``before`` is not TOML for tomllib, or the edit is not as
            meant.
    """
    import tomllib

    try:
        old = tomllib.loads(before)
    except tomllib.TOMLDecodeError as e:
        raise EngineConfigError(f"not valid TOML: {e}", path=path) from None
    try:
        new = tomllib.loads(after)
    except tomllib.TOMLDecodeError:
        new = None
    ok = new is not None
    for keys, value in wrote.items():
        got: Any = new
        for key in keys:
            got = got.get(key) if isinstance(got, dict) else None
        ok = ok and same_toml(got, value)
    if ok and new is not None:
        strip_paths(old, list(wrote))
        strip_paths(new, list(wrote))
        ok = same_toml(old, new)
    if not ok:
        raise EngineConfigError(
            "cannot edit this layout of TOML and keep its meaning (tables written with "
            "dotted keys or inline, or defined in parts)",
            path=path,
            field=".".join(
                k if k.replace("_", "").isalnum() else f'"{k}"' for k in next(iter(wrote))
            )
            if wrote
            else None,
            hint="write the tables ocihook edits with [table] headers, each in one place, "
            "or add the runtime by hand (see ocihook runtime configure --dry-run on an "
            "empty file)",
        )


def canonical(value: Any) -> Any:
    """``value`` (tomllib output) for comparing meanings: NaN made equal to NaN, dates and
    times as their text, containers recursively. Integers stay integers: comparing them
    needs no conversion to text, which :func:`int` refuses past 4300 digits."""
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    if isinstance(value, float) and value != value:
        return ("nan",)
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)  # datetime, date, time


def same_toml(a: Any, b: Any) -> bool:
    """Whether two parsed TOML values mean the same (:func:`canonical`)."""
    return bool(canonical(a) == canonical(b))


def _typed(value: Any) -> Any:
    """``value`` (:func:`canonical` output) with each leaf tagged with its type: ``1``
    and ``true`` differ (Python's ``1 == True`` does not tell them apart)."""
    if isinstance(value, dict):
        return {k: _typed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    return (type(value).__name__, value)


def unchanged_meaning(before: str, after: str) -> bool:
    """Whether ``after`` means exactly what ``before`` means (:mod:`tomllib`, values of
    the same types): an edit that adds nothing keeps the file's bytes. tomlkit does not
    always give back the bytes it read (a table whose parent tables are implied under an
    indented header is indented once more on each parse), so comparing its output with
    the file's bytes does not tell whether anything was edited. ``False`` when either
    is not TOML for :mod:`tomllib` (:func:`check_toml` says why)."""
    import tomllib

    try:
        old, new = tomllib.loads(before), tomllib.loads(after)
    except tomllib.TOMLDecodeError:
        return False
    return bool(_typed(canonical(old)) == _typed(canonical(new)))


def edit_error(e: Exception, path: str) -> EngineConfigError:
    """A tomlkit error raised while editing (such as ``Inline tables cannot contain a
    table``) as the file's error (exit 13), not a usage error."""
    return EngineConfigError(f"cannot edit this TOML layout: {e}", path=path)


def style_like(new: Any, like: Any) -> None:
    """Indent a table ocihook added (its header, keys and sub-tables) as ``like``, a
    sibling table of the same shape (containerd's ``runc`` runtime)."""
    from tomlkit.items import Table

    new.trivia.indent = like.trivia.indent
    indent = key_indent(like)
    for key, item in new.value.body:
        if key is None:
            continue
        if isinstance(item, Table):
            sub = like.get(key.key)
            if isinstance(sub, Table):
                style_like(item, sub)
        elif hasattr(item, "trivia"):
            item.trivia.indent = indent


def indent_table(new: Any, indent: str) -> None:
    """Indent a table ocihook added (its header, keys and sub-tables) by ``indent``."""
    from tomlkit.items import Table

    new.trivia.indent = indent
    for key, item in new.value.body:
        if key is not None and (isinstance(item, Table) or hasattr(item, "trivia")):
            if isinstance(item, Table):
                indent_table(item, indent)
            else:
                item.trivia.indent = indent
