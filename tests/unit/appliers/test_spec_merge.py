"""apply_plan's merge of device and mount entries: the first entry with the same path
(destination) is replaced, else the new one is appended, whatever else the list holds."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ocihook.appliers.spec import _first_index, _replace_or_append

_KEYS = st.sampled_from(["/a", "/b", "/c", "/dev/nvidia0"])
_ENTRY = st.one_of(
    st.fixed_dictionaries({"destination": _KEYS, "n": st.integers(0, 3)}),
    st.fixed_dictionaries({"destination": st.one_of(st.none(), st.lists(_KEYS, max_size=1))}),
    st.just({}),
    st.sampled_from(["/a", 3, None]),
)


def _naive(entries: list[Any], wanted: list[dict[str, Any]]) -> list[Any]:
    out = list(entries)
    for new in wanted:
        for i, old in enumerate(out):
            if isinstance(old, dict) and old.get("destination") == new["destination"]:
                out[i] = new
                break
        else:
            out.append(new)
    return out


@given(
    entries=st.lists(_ENTRY, max_size=8),
    wanted=st.lists(st.fixed_dictionaries({"destination": _KEYS, "w": st.integers(0, 3)})),
)
def test_merge_as_the_entry_by_entry_search(
    entries: list[Any], wanted: list[dict[str, Any]]
) -> None:
    got = list(entries)
    at = _first_index(got, "destination")
    for new in wanted:
        _replace_or_append(got, at, new["destination"], new)
    assert got == _naive(entries, wanted)
