"""ocihook.core.jsonfast parses and writes as the json module does, without importing it."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import modules_after

from ocihook.core import jsonfast

documents = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(documents, st.booleans())
def test_dumps_is_json_dumps_compact(doc: object, ascii_only: bool) -> None:
    assert jsonfast.dumps(doc, ensure_ascii=ascii_only) == json.dumps(
        doc, separators=(",", ":"), ensure_ascii=ascii_only
    )


@given(documents, st.sampled_from(["", " ", "\n\t", "\r\n "]))
def test_loads_is_json_loads(doc: object, space: str) -> None:
    text = space + json.dumps(doc, indent="\t") + space
    assert jsonfast.loads(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", "{", "[1,]", "1 2", '{"a":1}x', "nul", '"\x01"'])
def test_errors_are_json_errors(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as fast:
        jsonfast.loads(text)
    with pytest.raises(json.JSONDecodeError) as slow:
        json.loads(text)
    assert (fast.value.msg, fast.value.pos) == (slow.value.msg, slow.value.pos)


def test_constants_go_through_parse_constant() -> None:
    assert math.isinf(jsonfast.loads("[Infinity]")[0])

    def reject(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    with pytest.raises(ValueError, match="NaN is not JSON"):
        jsonfast.loads('{"a": NaN}', parse_constant=reject)


def test_dumps_refuses_what_json_cannot_hold() -> None:
    with pytest.raises(TypeError):
        jsonfast.dumps({"a": object()})
    with pytest.raises(ValueError):
        jsonfast.dumps([float("nan")])
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(ValueError):
        jsonfast.dumps(loop)


indented_documents = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text() | st.integers() | st.booleans() | st.none(), inner, max_size=4)
    ),
    max_leaves=25,
)


@given(indented_documents, st.sampled_from(["\t", 2, 0, "  ", "\n"]), st.booleans())
def test_dumps_indented_is_json_dumps_indented(
    doc: object, indent: int | str, ascii_only: bool
) -> None:
    """The same text as ``json.dumps(indent=...)``: NaN and infinities, keys that are not
    strings, empty containers, tuples as lists, every indent form."""
    expected = json.dumps(doc, indent=indent, ensure_ascii=ascii_only)
    assert jsonfast.dumps_indented(doc, indent, ensure_ascii=ascii_only) == expected


def test_dumps_indented_imports_no_json() -> None:
    loaded = modules_after(
        "from ocihook.core import jsonfast\n"
        "jsonfast.dumps_indented({'a': [1, 2.5, None, {'b': 'c'}]}, 2)\n"
        "jsonfast.loads('{\"a\": [1]}', object_pairs_hook=dict)\n"
    )
    assert "ocihook.core.jsonfast" in loaded
    assert not {"json", "json.decoder", "json.encoder"} & loaded


def test_object_pairs_hook_sees_every_pair_and_may_raise() -> None:
    seen: list[list[tuple[str, object]]] = []

    def hook(pairs: list[tuple[str, object]]) -> dict[str, object]:
        seen.append(pairs)
        if len({k for k, _ in pairs}) != len(pairs):
            raise KeyError("duplicate")
        return dict(pairs)

    assert jsonfast.loads('{"a": {"b": 1}, "c": 2}', object_pairs_hook=hook) == {
        "a": {"b": 1},
        "c": 2,
    }
    assert seen == [[("b", 1)], [("a", {"b": 1}), ("c", 2)]]
    with pytest.raises(KeyError):
        jsonfast.loads('{"a": 1, "a": 2}', object_pairs_hook=hook)
