"""Pins of reading ``NVIDIA_VISIBLE_DEVICES`` and ``NVIDIA_DRIVER_CAPABILITIES``: a GPU
index is ASCII digits only (``isdigit`` also accepts other scripts' digits, which ``int``
would read); ``all`` is recognised in any case; the old MIG form has exactly
``MIG-GPU-<uuid>/<gi>/<ci>``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.errors import RequestError
from ocihook.request.nvidia import classify_device, request_from_env

UUID = "GPU-3b0c6e3c-6b3d-4a6d-9e4e-5a1f2b3c4d5e"


@given(st.text(alphabet=st.characters(categories=["Nd"]), min_size=1, max_size=8))
def test_an_index_is_ascii_digits(text: str) -> None:
    want = "index" if text.isascii() and len(text) <= 6 else None
    if want is None and text.isascii():
        return  # seven or more ASCII digits: may still be something else (a bus id)
    assert (classify_device(text) == "index") == (want == "index")


@pytest.mark.parametrize("value", ["\u0661", "\u0967", "1\u0662"])
def test_non_ascii_digits_are_refused(value: str) -> None:
    with pytest.raises(RequestError) as err:
        request_from_env({"NVIDIA_VISIBLE_DEVICES": value})
    assert err.value.value == value


@pytest.mark.parametrize("value", ["ALL", "All", "compute,ALL", " all "])
def test_all_capabilities_in_any_case(value: str) -> None:
    everything = request_from_env(
        {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": "all"}
    ).capabilities
    req = request_from_env({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": value})
    assert req.capabilities == everything
    assert {"compute", "utility", "graphics", "video", "display"} <= everything


@pytest.mark.parametrize(
    ("item", "kind"),
    [
        (f"MIG-{UUID}/1/2", "mig-uuid"),
        (f"MIG-{UUID}/1/2/3", None),
        (f"MIG-{UUID}/1", None),
        (f"mig-{UUID.lower()}/0/0", "mig-uuid"),
        (f"MIG-{UUID}/1/x", None),
    ],
)
def test_old_mig_form_has_exactly_gi_and_ci(item: str, kind: str | None) -> None:
    assert classify_device(item) == kind
