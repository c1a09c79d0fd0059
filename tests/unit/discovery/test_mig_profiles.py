"""MIG profiles and GPU memory: the naming rule (go-nvlib's, pure, under hypothesis), the
NVML backend finding each MIG device's profile and memory through the ``pynvml`` double
described from the simulated host, and the procfs backend reporting them unknown."""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import load_pynvml_double, sim_nvml

from ocihook.core.hostroot import HostRoot
from ocihook.discovery import nvml
from ocihook.discovery.nvidia import enumerate_gpus
from ocihook.discovery.procfs import parse_devices
from ocihook.sim import host as simhost

A100_80GB = 81920 << 20  # bytes, nvmlDeviceGetMemoryInfo().total
_NAME = re.compile(r"(?:(\d+)c\.)?(\d+)g\.(\d+)gb(\+me|\+me\.all|\+gfx|-me)?")


# -- the naming rule --------------------------------------------------------------------------


def test_mig_memory_gb_of_known_profiles() -> None:
    """The size in a profile's name: the MIG memory's fraction of the GPU's, rounded up to
    eighths, of the GPU's whole GiB, rounded to the nearest."""
    assert nvml.mig_memory_gb(A100_80GB, 9728) == 10
    assert nvml.mig_memory_gb(A100_80GB, 19968) == 20
    assert nvml.mig_memory_gb(A100_80GB, 40192) == 40
    assert nvml.mig_memory_gb(A100_80GB, 80384) == 80
    assert nvml.mig_memory_gb(40960 << 20, 4864) == 5  # 1/8 of 40 GiB
    assert nvml.mig_memory_gb(97871 << 20, 11008) == 12  # 1/8 of 96 (95.58 rounded up) GiB
    assert nvml.mig_memory_gb(A100_80GB, 10241) == 20  # just over 1/8: 2/8
    assert nvml.mig_memory_gb((2 << 30) + 1, 100) == 0  # 1/8 of 3 GiB is 0.375
    with pytest.raises(ValueError):
        nvml.mig_memory_gb(0, 10)
    with pytest.raises(ValueError):
        nvml.mig_memory_gb(A100_80GB, -1)


@given(st.integers(1024, 400_000), st.integers(1, 8), st.data())
def test_mig_memory_gb_is_eighths_of_the_whole(total_mib: int, eighths: int, data: Any) -> None:
    """Any MIG size just below k/8 of the GPU names k/8 of its whole GiB, rounded."""
    below = data.draw(st.integers(0, total_mib // 16))
    mig_mib = total_mib * eighths // 8 - below
    whole_gib = math.ceil(total_mib / 1024)
    expected = math.floor(eighths * whole_gib / 8 + 0.5)
    assert nvml.mig_memory_gb(total_mib << 20, mig_mib) == expected


@given(st.integers(1024, 400_000), st.integers(0, 400_000), st.integers(0, 400_000))
def test_mig_memory_gb_is_monotone(total_mib: int, a: int, b: int) -> None:
    small, large = sorted((a, b))
    assert nvml.mig_memory_gb(total_mib << 20, small) <= nvml.mig_memory_gb(total_mib << 20, large)


def test_mig_profile_names() -> None:
    assert nvml.mig_profile_name(0x0, 0x0, 10) == "1g.10gb"
    assert nvml.mig_profile_name(0x2, 0x2, 40) == "3g.40gb"
    assert nvml.mig_profile_name(0x2, 0x0, 40) == "1c.3g.40gb"
    assert nvml.mig_profile_name(0x7, 0x0, 10) == "1g.10gb+me"
    assert nvml.mig_profile_name(0xF, 0x0, 10) == "1g.10gb+me.all"
    assert nvml.mig_profile_name(0xB, 0x1, 20) == "2g.20gb+gfx"
    assert nvml.mig_profile_name(0xD, 0x0, 10) == "1g.10gb-me"
    assert nvml.mig_profile_name(0x9, 0x0, 20) == "1g.20gb"  # REV2: more memory, no suffix
    assert nvml.mig_profile_name(0x11, 0x0, 30) is None  # a profile ocihook cannot name
    assert nvml.mig_profile_name(0x0, 0x8, 10) is None


@given(
    st.sampled_from(sorted(nvml.GPU_INSTANCE_PROFILES)),
    st.sampled_from(sorted(nvml.COMPUTE_INSTANCE_PROFILES)),
    st.integers(0, 2000),
)
def test_mig_profile_name_shape(gi: int, ci: int, gb: int) -> None:
    name = nvml.mig_profile_name(gi, ci, gb)
    assert name is not None
    match = _NAME.fullmatch(name)
    assert match is not None, name
    g, suffix = nvml.GPU_INSTANCE_PROFILES[gi]
    c = nvml.COMPUTE_INSTANCE_PROFILES[ci]
    assert (int(match[2]), int(match[3]), match[4] or "") == (g, gb, suffix)
    assert (match[1] is None) == (c == g) and (match[1] is None or int(match[1]) == c)


# -- the NVML backend against the double --------------------------------------------------------


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    module = load_pynvml_double()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    yield module
    assert module.init_refcount() == 0, "nvmlInit without nvmlShutdown"


def _majors(root: HostRoot) -> dict[str, int]:
    with open(root.proc("devices")) as f:
        return parse_devices(f.read())


def _migs(inv: Any) -> list[tuple[Any, ...]]:
    return [(m.gi, m.ci, m.profile, m.memory_mib) for g in inv.gpus for m in g.mig_devices]


def test_nvml_gives_profiles_and_memory(
    sim: simhost.SimulatedHost, sim_root: HostRoot, fake_nvml: ModuleType
) -> None:
    fake_nvml.load(sim_nvml(sim))
    inv = enumerate_gpus(sim_root, _majors(sim_root), backend="nvml")
    assert inv.backend == "nvml" and inv.warnings == ()
    assert [g.memory_mib for g in inv.gpus] == [81920] * 8
    assert _migs(inv) == [(1, 0, "3g.40gb", 40192), (2, 0, "1g.10gb", 9728)]
    assert [m.uuid for m in inv.gpus[1].mig_devices] == [m.uuid for m in sim.gpus[1].mig_devices]
    calls = fake_nvml.history()
    assert "nvmlGpuInstanceGetInfo" in calls and "nvmlComputeInstanceGetInfo" in calls


def test_procfs_knows_no_profile_nor_memory(sim: simhost.SimulatedHost, sim_root: HostRoot) -> None:
    """The capability tree gives each MIG device's GI and CI ids, never its profile; the
    driver's procfs files give no memory size."""
    inv = enumerate_gpus(sim_root, _majors(sim_root), backend="procfs")
    assert [g.memory_mib for g in inv.gpus] == [None] * 8
    assert _migs(inv) == [(1, 0, None, None), (2, 0, None, None)]


def _mig_gpu(description: dict[str, Any]) -> dict[str, Any]:
    (gpu,) = [g for g in description["gpus"] if g["mig"]["devices"]]
    return gpu


def test_nvml_compute_instance_smaller_than_its_gpu_instance(
    sim: simhost.SimulatedHost, sim_root: HostRoot, fake_nvml: ModuleType
) -> None:
    description = sim_nvml(sim)
    _mig_gpu(description)["mig"]["devices"][0]["ci_profile_id"] = 0  # 1 slice of the 3g
    fake_nvml.load(description)
    inv = enumerate_gpus(sim_root, _majors(sim_root), backend="nvml")
    assert _migs(inv) == [(1, 0, "1c.3g.40gb", 40192), (2, 0, "1g.10gb", 9728)]


def test_nvml_media_extension_profile(
    sim: simhost.SimulatedHost, sim_root: HostRoot, fake_nvml: ModuleType
) -> None:
    description = sim_nvml(sim)
    mig = _mig_gpu(description)["mig"]
    mig["gi_profiles"][fake_nvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1] = {
        "id": 20,
        "slices": 1,
        "memory_mib": 9728,
    }
    mig["devices"][1]["gi_profile_id"] = 20
    fake_nvml.load(description)
    inv = enumerate_gpus(sim_root, _majors(sim_root), backend="nvml")
    assert _migs(inv)[1] == (2, 0, "1g.10gb+me", 9728)


def test_nvml_profile_id_ocihook_cannot_name(
    sim: simhost.SimulatedHost, sim_root: HostRoot, fake_nvml: ModuleType
) -> None:
    description = sim_nvml(sim)
    _mig_gpu(description)["mig"]["devices"][0]["gi_profile_id"] = 99
    fake_nvml.load(description)
    inv = enumerate_gpus(sim_root, _majors(sim_root), backend="nvml")
    assert _migs(inv) == [(1, 0, None, 40192), (2, 0, "1g.10gb", 9728)]
    assert inv.warnings == (
        "GPU 1 MIG 0 profile unknown: NVML's profile id 99 is none ocihook can name",
    )


def test_nvml_refusing_instance_queries_warns(
    sim: simhost.SimulatedHost, sim_root: HostRoot, fake_nvml: ModuleType
) -> None:
    """NVML may refuse GPU instance queries (an unprivileged caller): the profiles are
    unknown, with the reason; the memory sizes still come."""
    description = sim_nvml(sim)
    _mig_gpu(description)["errors"] = {
        "nvmlDeviceGetGpuInstanceById": fake_nvml.NVML_ERROR_NO_PERMISSION
    }
    fake_nvml.load(description)
    inv = enumerate_gpus(sim_root, _majors(sim_root), backend="nvml")
    assert _migs(inv) == [(1, 0, None, 40192), (2, 0, None, 9728)]
    assert inv.warnings == tuple(
        f"GPU 1 MIG {j} profile unknown: nvmlDeviceGetGpuInstanceById failed: "
        "Insufficient Permissions (NVML error 4)"
        for j in (0, 1)
    )


def test_nvml_without_memory_info(
    sim: simhost.SimulatedHost, sim_root: HostRoot, fake_nvml: ModuleType
) -> None:
    """A GPU whose memory NVML does not report: no memory, and no MIG profile (its size is
    part of the name), silently (NOT_SUPPORTED), as for the other optional facts."""
    description = sim_nvml(sim)
    for g in description["gpus"]:
        del g["memory_mib"]
    fake_nvml.load(description)
    inv = enumerate_gpus(sim_root, _majors(sim_root), backend="nvml")
    assert [g.memory_mib for g in inv.gpus] == [None] * 8
    assert _migs(inv) == [(1, 0, None, 40192), (2, 0, None, 9728)]
    assert inv.warnings == ()
    assert "nvmlDeviceGetGpuInstanceById" not in fake_nvml.history()
