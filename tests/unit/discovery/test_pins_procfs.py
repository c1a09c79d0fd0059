"""Pins of the procfs number readers: at most 18 ASCII digits are turned into an ``int``
(no unbounded conversion of a driver file's text), canonical forms have no leading zero."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.errors import DiscoveryError
from ocihook.discovery.procfs import canonical_decimal, decimal, parse_capability_file


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


def test_capability_file_mode_is_at_most_0o7777() -> None:
    """``DeviceFileMode`` of a MIG capability file is a decimal mode (``nvidia-caps``):
    4095 (``0o7777``) is the largest; 4096 is refused naming the field and the value."""
    text = "DeviceFileMinor: 7\nDeviceFileMode: {}\n"
    assert parse_capability_file(text.format(4095), path="/p") == (7, 0o7777)
    assert parse_capability_file(text.format(292), path="/p") == (7, 0o444)
    with pytest.raises(DiscoveryError) as err:
        parse_capability_file(text.format(4096), path="/p")
    assert (err.value.field, err.value.value) == ("DeviceFileMode", "4096")
