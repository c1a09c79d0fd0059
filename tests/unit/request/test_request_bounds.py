"""Bounded work on an image's request: every request variable lists at most
:data:`MAX_REQUEST_ENTRIES` entries (more is a :class:`RequestError` naming the variable
and the count), and the device list is deduplicated in order in linear time (a dict, not
a list scanned per entry), as the quadratic reference below would do it.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocihook.core.errors import RequestError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import NvidiaHost, discover
from ocihook.plan.select import select_devices, select_gpus
from ocihook.request.drm import drm_request_from_env
from ocihook.request.nvidia import request_from_env, request_from_spec
from ocihook.request.sources import MAX_REQUEST_ENTRIES, devices_from_mounts, split_entries
from ocihook.sim import host as simhost

UUID = "GPU-4ab1e5c4-1d55-4c4f-b5e2-9c3a0d1e2f01"


def quadratic_dedup(items: list[str]) -> list[str]:
    """The reference: each entry once, first appearance first, by scanning the list."""
    out: list[str] = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


_ENTRIES = st.sampled_from(["0", "1", "2", "00", " 1 ", UUID, UUID.lower(), "3b:00.0", "0:1", ""])


@settings(max_examples=400, deadline=None)
@given(st.lists(_ENTRIES, max_size=12))
def test_dedup_equals_the_quadratic_reference(entries: list[str]) -> None:
    raw = ",".join(entries)
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": raw})
    stripped = [e.strip() for e in entries if e.strip()]
    if not stripped:
        assert r.kind == "void"
        return
    assert r.kind == "list"
    assert list(r.devices) == quadratic_dedup(stripped)
    assert split_entries(raw, field="f") == stripped


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "cdi/nvidia.com/gpu/0", "imex/1", "c"]), max_size=10))
def test_mount_requests_dedup_equals_the_reference(names: list[str]) -> None:
    config = {
        "mounts": [
            {"destination": f"/var/run/nvidia-container-devices/{n}", "source": "/dev/null"}
            for n in names
        ]
    }
    expected = quadratic_dedup(
        ["nvidia.com/gpu=0" if n == "cdi/nvidia.com/gpu/0" else n for n in names if n != "imex/1"]
    )
    assert devices_from_mounts(config) == expected


def test_the_limit_is_4096() -> None:
    assert MAX_REQUEST_ENTRIES == 4096


def test_exactly_the_limit_parses() -> None:
    raw = ",".join(str(i) for i in range(MAX_REQUEST_ENTRIES))
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": raw})
    assert r.kind == "list" and len(r.devices) == MAX_REQUEST_ENTRIES
    assert r.devices[0] == "0" and r.devices[-1] == "4095"
    # duplicates count as entries: the limit is on what the image wrote
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": ",".join(["7"] * MAX_REQUEST_ENTRIES)})
    assert r.devices == ("7",)


@pytest.mark.parametrize("count", [MAX_REQUEST_ENTRIES + 1, 100_000])
def test_over_the_limit_is_refused_naming_the_variable_and_count(count: int) -> None:
    raw = ",".join(str(i % 1000) for i in range(count)) + ",,, ,"
    with pytest.raises(RequestError) as e:
        request_from_env({"NVIDIA_VISIBLE_DEVICES": raw})
    assert e.value.field == "process.env[NVIDIA_VISIBLE_DEVICES]"
    assert e.value.value == f"{count} entries"
    assert "at most 4096" in str(e.value) and len(str(e.value)) < 300


def test_limit_applies_before_special_words_and_to_every_variable() -> None:
    over = ",".join(["all"] * (MAX_REQUEST_ENTRIES + 1))
    with pytest.raises(RequestError):
        request_from_env({"NVIDIA_VISIBLE_DEVICES": over})
    with pytest.raises(RequestError) as e:
        request_from_spec(
            {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0", f"NVIDIA_IMEX_CHANNELS={over}"]}}
        )
    assert e.value.field == "process.env[NVIDIA_IMEX_CHANNELS]"
    with pytest.raises(RequestError) as e:
        drm_request_from_env("amd", {"AMD_VISIBLE_DEVICES": over})
    assert e.value.field == "process.env[AMD_VISIBLE_DEVICES]"
    assert e.value.value == f"{MAX_REQUEST_ENTRIES + 1} entries"


@pytest.fixture(scope="module")
def host(sim: simhost.SimulatedHost) -> NvidiaHost:
    return discover(HostRoot.single(sim.root))


def test_selection_of_a_full_request_of_aliases(host: NvidiaHost) -> None:
    """4,096 entries naming the host's GPUs by index, zero-padded index, UUID and bus id
    select each GPU once, in first-mention order."""
    gpus = host.gpus
    forms: list[str] = []
    for g in reversed(gpus):
        forms += [str(g.index), f"{g.index:03d}", g.uuid.upper(), g.uuid, g.bus_id]
    items = (forms * (MAX_REQUEST_ENTRIES // len(forms) + 1))[:MAX_REQUEST_ENTRIES]
    r = request_from_env({"NVIDIA_VISIBLE_DEVICES": ",".join(items)})
    selected: Any = select_devices(r, gpus)
    assert [s.gpu for s in selected] == list(reversed(gpus))
    assert select_gpus(r, gpus) == tuple(reversed(gpus))
