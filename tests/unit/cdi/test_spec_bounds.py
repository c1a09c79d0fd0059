"""CDI specs are bounded before they are parsed: size (16 MiB) and nesting (32 levels),
in JSON and in YAML, with libyaml's loader and with PyYAML's pure-Python one; the
errors' values are shown in bounded form."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from ocihook.cdi import spec as cdispec
from ocihook.cdi.names import CdiError
from ocihook.cdi.spec import MAX_SPEC_BYTES, MAX_SPEC_DEPTH, load_spec
from ocihook.core.errors import OcihookError


@pytest.fixture(params=["libyaml", "pure"])
def loader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with the C loader (when PyYAML has it) and the pure-Python one."""
    if request.param == "pure":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif not hasattr(yaml, "CSafeLoader"):
        pytest.skip("PyYAML without libyaml")
    monkeypatch.setattr(cdispec, "_yaml_loader", None)
    return str(request.param)


HOSTILE = {
    "flow": "[" * 100_000,
    "block": "- " * 5000 + "x",
    "mapping": "{a: " * 3000 + "x",
    "indent": "a:\n" + "".join(" " * i + "b:\n" for i in range(1, 3000)),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_deep_yaml_refused_cleanly(loader: str, name: str) -> None:
    with pytest.raises(CdiError) as err:
        load_spec(HOSTILE[name], path="/etc/cdi/deep.yaml")
    text = str(err.value)
    assert "/etc/cdi/deep.yaml" in text and len(text) < 1000
    assert "nesting depth" in text or f"nested deeper than {MAX_SPEC_DEPTH} levels" in text


@pytest.mark.parametrize("depth", [MAX_SPEC_DEPTH, MAX_SPEC_DEPTH + 1])
def test_depth_limit_exact(loader: str, depth: int) -> None:
    """32 levels pass the nesting check (and fail as a wrong type); 33 do not."""
    yaml_text = "- " * depth + "x"
    json_text = "[" * depth + "]" * depth
    for text in (yaml_text, json_text):
        with pytest.raises(CdiError) as err:
            load_spec(text, path="x")
        deep = f"nested deeper than {MAX_SPEC_DEPTH} levels" in str(err.value)
        assert deep == (depth > MAX_SPEC_DEPTH), str(err.value)


def test_real_spec_depth_well_under_limit() -> None:
    """The deepest field of the CDI schema (devices[].containerEdits.hooks[].args[]) is 7."""
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "example.com/gpu",
        "devices": [
            {
                "name": "a",
                "containerEdits": {
                    "hooks": [{"hookName": "prestart", "path": "/x", "args": ["x"]}]
                },
            }
        ],
    }
    assert load_spec(json.dumps(doc), path="x").devices[0].name == "a"
    assert load_spec(yaml.safe_dump(doc), path="x").devices[0].name == "a"


def test_size_limit() -> None:
    assert MAX_SPEC_BYTES == 16 << 20
    with pytest.raises(CdiError, match=f"larger than {MAX_SPEC_BYTES} bytes"):
        load_spec(b" " * (MAX_SPEC_BYTES + 1), path="x")


@given(
    st.recursive(
        st.none() | st.integers() | st.text(max_size=5),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=30,
    )
)
def test_error_value_is_bounded(value: object) -> None:
    text = str(OcihookError("m", value=value))
    assert len(text) < 200


def test_error_value_nested_beyond_recursion_limit() -> None:
    value: list[object] = []
    inner = value
    for _ in range(50_000):
        nxt: list[object] = []
        inner.append(nxt)
        inner = nxt
    text = str(OcihookError("m", path="p", value=value))
    assert text.startswith("m (file p, value [[[[") and len(text) < 200
