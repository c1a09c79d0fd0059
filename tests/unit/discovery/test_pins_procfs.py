"""Pins of the procfs number readers: at most 18 ASCII digits are turned into an ``int``
(no unbounded conversion of a driver file's text), canonical forms have no leading zero."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.errors import DiscoveryError
from ocihook.discovery.procfs import (
    canonical_decimal,
    decimal,
    parse_capability_file,
    parse_device_file_params,
)


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


def test_capability_minor_is_below_2_to_the_20() -> None:
    text = "DeviceFileMinor: {}\nDeviceFileMode: 292\n"
    assert parse_capability_file(text.format((1 << 20) - 1), path="/p") == ((1 << 20) - 1, 0o444)
    with pytest.raises(DiscoveryError) as err:
        parse_capability_file(text.format(1 << 20), path="/p")
    assert (err.value.field, err.value.value) == ("DeviceFileMinor", str(1 << 20))


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("DeviceFileMode: 4095", (0o7777, 0, 0)),
        ("DeviceFileMode: 4096", None),
        ("DeviceFileGID: 4294967295", (0o666, 0, 2**32 - 1)),
        ("DeviceFileGID: 4294967296", None),
        ("DeviceFileUID: 4294967296", None),
    ],
)
def test_device_file_params_in_range(line: str, want: tuple[int, int, int] | None) -> None:
    """The nvidia.ko parameters of ``/proc/driver/nvidia/params``: a mode above ``0o7777``
    or an id of ``2**32`` makes the whole set unusable (``None``)."""
    assert parse_device_file_params(f"ModifyDeviceFiles: 1\n{line}\n") == want
