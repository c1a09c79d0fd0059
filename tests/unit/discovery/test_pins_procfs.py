"""Pins of the procfs number readers: at most 18 ASCII digits are turned into an ``int``
(no unbounded conversion of a driver file's text), canonical forms have no leading zero."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ocihook.discovery.procfs import canonical_decimal, decimal


@given(st.text(alphabet="0123456789", min_size=1, max_size=40))
def test_decimal_reads_at_most_18_digits(text: str) -> None:
    assert decimal(text) == (int(text) if len(text) <= 18 else None)
    want = int(text) if len(text) <= 18 and (text == "0" or text[0] != "0") else None
    assert canonical_decimal(text) == want


def test_decimal_edges() -> None:
    assert decimal("9" * 18) == 10**18 - 1
    assert decimal("1" + "0" * 18) is None
    assert decimal("") is None and decimal("-1") is None and decimal("\u0661") is None
    assert canonical_decimal("00") is None and canonical_decimal("0") == 0
    assert canonical_decimal("") is None
