"""Requests read from process.env (NVIDIA Container Toolkit semantics)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.errors import RequestError, SpecError
from ocihook.discovery.nvidia import Gpu
from ocihook.plan.select import select_gpus
from ocihook.request.nvidia import (
    ALL_CAPABILITIES,
    DEFAULT_CAPABILITIES,
    request_from_env,
    request_from_spec,
)
from ocihook.request.sources import parse_env

UUIDS = [
    "GPU-11111111-2222-3333-4444-555555555555",
    "GPU-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee",
    "GPU-01234567-89ab-cdef-0123-456789abcdef",
]
GPUS = tuple(
    Gpu(i, m, u, f"00000000:{i:02x}:00.0", "T", "/x")
    for i, (m, u) in enumerate(zip([0, 2, 1], UUIDS, strict=True))
)


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        (None, "void"),
        ("", "void"),
        ("void", "void"),
        ("0,void", "void"),
        ("none", "none"),
        ("all", "all"),
        ("ALL", "all"),
        ("0,all", "all"),
        (" 1 , 0 ", "list"),
    ],
)
def test_visible_devices_kinds(value: str | None, kind: str) -> None:
    env = {} if value is None else {"NVIDIA_VISIBLE_DEVICES": value}
    assert request_from_env(env).kind == kind


def test_list_keeps_request_order_and_dedupes() -> None:
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": f"2,0,{UUIDS[1].lower()},2"})
    assert r.devices == ("2", "0", UUIDS[1].lower())
    assert [g.index for g in select_gpus(r, GPUS)] == [2, 0, 1]


def test_uuid_is_case_insensitive() -> None:
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": UUIDS[2].upper().replace("GPU-", "gpu-")})
    assert select_gpus(r, GPUS) == (GPUS[2],)


def test_unknown_gpu_lists_what_exists() -> None:
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": "7"})
    with pytest.raises(RequestError) as ei:
        select_gpus(r, GPUS)
    assert ei.value.value == "7"
    assert ei.value.field == "process.env[NVIDIA_VISIBLE_DEVICES]"
    assert UUIDS[0] in str(ei.value) and "0 (" in str(ei.value)


@pytest.mark.parametrize("bad", ["0-1", "GPU-123", "-1", "0x1", "1:2:3", "MIG-x", "3b:00"])
def test_malformed_device_entries(bad: str) -> None:
    with pytest.raises(RequestError) as ei:
        request_from_env({"NVIDIA_VISIBLE_DEVICES": bad})
    assert ei.value.value == bad


def test_capabilities() -> None:
    base = {"NVIDIA_VISIBLE_DEVICES": "all"}
    assert request_from_env(base).capabilities == DEFAULT_CAPABILITIES
    assert request_from_env({**base, "NVIDIA_DRIVER_CAPABILITIES": ""}).capabilities == (
        DEFAULT_CAPABILITIES
    )
    assert request_from_env({**base, "NVIDIA_DRIVER_CAPABILITIES": "utility"}).capabilities == {
        "utility"
    }
    assert request_from_env({**base, "NVIDIA_DRIVER_CAPABILITIES": "compute,all"}).capabilities == (
        ALL_CAPABILITIES
    )
    with pytest.raises(RequestError) as ei:
        request_from_env({**base, "NVIDIA_DRIVER_CAPABILITIES": "compute,gaming"})
    assert ei.value.value == "gaming"
    assert ei.value.field == "process.env[NVIDIA_DRIVER_CAPABILITIES]"


def test_legacy_cuda_image() -> None:
    r = request_from_env({"CUDA_VERSION": "11.8.0"})
    assert r.kind == "all" and r.capabilities == ALL_CAPABILITIES
    assert request_from_env({"CUDA_VERSION": "11.8.0", "NVIDIA_REQUIRE_CUDA": "cuda>=11"}).is_void


def test_parse_env_last_wins_and_ignores_junk() -> None:
    assert parse_env(["A=1", "junk", "A=2", "B=x=y", "=z"]) == {"A": "2", "B": "x=y"}


def test_request_from_spec_errors_name_the_file() -> None:
    with pytest.raises(SpecError) as ei:
        request_from_spec({"process": {"env": "A=1"}}, path="/b/config.json")
    assert ei.value.path == "/b/config.json" and ei.value.field == "process.env"
    with pytest.raises(RequestError) as ei2:
        request_from_spec({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=x"]}}, path="/b/config.json")
    assert ei2.value.path == "/b/config.json"
    assert "/b/config.json" in str(ei2.value)


@given(
    st.lists(st.sampled_from(["0", "1", "2", *UUIDS, "all", "none", "void", " ", ""]), max_size=6)
)
def test_any_combination_parses_or_raises_request_error(items: list[str]) -> None:
    value = ",".join(items)
    stripped = [i.strip().lower() for i in items if i.strip()]
    special = [i for i in stripped if i in ("all", "none")]
    if not stripped or "void" in stripped:
        assert request_from_env({"NVIDIA_VISIBLE_DEVICES": value}).kind == "void"
    elif special:  # the toolkit's reading: void anywhere, else the first all or none
        assert request_from_env({"NVIDIA_VISIBLE_DEVICES": value}).kind == special[0]
    else:
        r = request_from_env({"NVIDIA_VISIBLE_DEVICES": value})
        assert r.kind == "list"
        assert len(r.devices) == len(set(r.devices))
        assert set(select_gpus(r, GPUS)) <= set(GPUS)


@given(st.text(max_size=40))
def test_arbitrary_text_never_crashes(value: str) -> None:
    try:
        r = request_from_env({"NVIDIA_VISIBLE_DEVICES": value, "NVIDIA_DRIVER_CAPABILITIES": value})
    except RequestError:
        return
    assert r.kind in {"void", "none", "all", "list"}


def test_cdi_names_are_refused_for_now() -> None:
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=0"})
    with pytest.raises(RequestError, match="CDI device names"):
        select_gpus(r, GPUS)


@pytest.mark.parametrize(
    ("item", "kind"),
    [
        ("0", "index"),
        ("GPU-11111111-2222-3333-4444-555555555555", "uuid"),
        ("0000:01:00.0", "bus-id"),
        ("00000000:01:00.0", "bus-id"),
        ("01:00.0", "bus-id"),
        ("0:1", "mig-index"),
        ("MIG-11111111-2222-3333-4444-555555555555", "mig-uuid"),
        ("MIG-GPU-11111111-2222-3333-4444-555555555555/1/0", "mig-uuid"),
        ("nvidia.com/gpu=0", "cdi"),
        ("x", None),
        ("0:", None),
        ("MIG-GPU-1/1/0", None),
    ],
)
def test_classify(item: str, kind: str | None) -> None:
    from ocihook.request.nvidia import classify_device

    assert classify_device(item) == kind


def test_bus_ids_select() -> None:
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": "0000:02:00.0,00000000:00:00.0"})
    assert [g.index for g in select_gpus(r, GPUS)] == [2, 0]


# --- malformed and edge-case requests -------------------------------------------------------------


def test_capability_list_order_does_not_matter() -> None:
    for value in ("all,foo", "foo,all"):
        with pytest.raises(RequestError) as ei:
            request_from_env({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": value})
        assert ei.value.value == "foo"


def test_huge_index_is_a_request_error_with_a_short_message() -> None:
    with pytest.raises(RequestError) as ei:
        request_from_env({"NVIDIA_VISIBLE_DEVICES": "1" * 5000})
    assert len(str(ei.value)) < 400
