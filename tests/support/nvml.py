"""The ``pynvml`` double (tests/doubles/pynvml.py): :func:`load_pynvml_double` and
:func:`sim_nvml`, the simulated host as the double's description."""

from __future__ import annotations

import os
from typing import Any

from ocihook.sim import host as simhost
from support.paths import DOUBLES


def load_pynvml_double() -> Any:
    """A fresh instance of the ``pynvml`` double (tests/doubles/pynvml.py), not installed;
    ``monkeypatch.setitem(sys.modules, "pynvml", module)`` makes ocihook use it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pynvml", os.path.join(DOUBLES, "pynvml.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sim_nvml(sim: simhost.SimulatedHost, cuda_version: int = 12040) -> dict[str, Any]:
    """The simulated host as the ``pynvml`` double's description: every GPU (brand tesla,
    compute capability 8.0, :attr:`~ocihook.sim.host.SimulatedGpu.memory_mib`), MIG
    enabled on the GPUs that have MIG devices (their slots, UUIDs and profiles, and the
    profile tables of :data:`ocihook.sim.host.MIG_PROFILES`), disabled on the others."""
    gi_profiles = {
        p.gi_profile: {"id": p.gi_profile_id, "slices": p.slices, "memory_mib": p.memory_mib}
        for p in simhost.MIG_PROFILES.values()
    }
    ci_profiles = {
        p.ci_profile: {"id": p.ci_profile_id, "slices": p.slices}
        for p in simhost.MIG_PROFILES.values()
    }
    gpus = []
    for g in sim.gpus:
        devices = {
            m.slot: {
                "gi": m.gi,
                "ci": m.ci,
                "uuid": m.uuid,
                "gi_profile_id": m.profile.gi_profile_id,
                "ci_profile_id": m.profile.ci_profile_id,
                "memory_mib": m.profile.memory_mib,
            }
            for m in g.mig_devices
        }
        gpus.append({
            "uuid": g.uuid, "minor": g.minor, "bus_id": g.bus_id, "name": g.model,
            "brand": 2, "compute_capability": (8, 0), "memory_mib": g.memory_mib,
            "mig": {
                "current": int(bool(devices)), "pending": int(bool(devices)), "max_devices": 7,
                "devices": devices, "gi_profiles": gi_profiles, "ci_profiles": ci_profiles,
            },
        })  # fmt: skip
    return {"driver_version": sim.driver_version, "cuda_version": cuda_version, "gpus": gpus}
