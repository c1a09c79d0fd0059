"""`ocihook info` and `ocihook list` (what nvidia-container-cli info / list print)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from support import run_cli

from ocihook.core.cudaversion import cuda_for_driver
from ocihook.sim import host as simhost


def _roots(root: str) -> list[str]:
    return ["--driver-root", root, "--dev-root", root]


def test_info_json_simulated(sim: simhost.SimulatedHost) -> None:
    proc = run_cli("info", "--json", "--gpu-backend", "procfs", *_roots(sim.root))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["driverVersion"] == sim.driver_version
    assert data["gpuBackend"] == "procfs"
    # no NVML and no note in the simulated libcuda: the driver-branch table
    assert (data["cudaVersion"], data["cudaVersionSource"]) == (
        cuda_for_driver(sim.driver_version),
        "driver-branch",
    )
    assert [(g["index"], g["minor"], g["uuid"], g["busId"], g["model"]) for g in data["gpus"]] == [
        (g.index, g.minor, g.uuid, g.bus_id, g.model) for g in sim.gpus
    ]
    # what only NVML knows: the memory sizes and MIG profiles
    assert {g["memoryMiB"] for g in data["gpus"]} == {None}
    assert [(m["gi"], m["profile"], m["memoryMiB"]) for m in data["gpus"][1]["migDevices"]] == [
        (1, None, None),
        (2, None, None),
    ]


def test_info_text_realistic(realistic: dict[str, Any]) -> None:
    proc = run_cli("info", *_roots(realistic["root"]))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "NVRM version:   535.261.03"
    # Debian's 535 libcuda has no .note.cuda.fwd_compatibility: the branch table says it
    assert lines[1] == "CUDA version:   12.2 (driver-branch table)"
    gpu3 = sorted(realistic["gpus"], key=lambda g: g["index"])[3]
    block = lines[lines.index("Device Index:   3") : lines.index("Device Index:   3") + 7]
    assert block[1] == f"Device Minor:   {gpu3['minor']}"
    assert block[2] == "Model:          NVIDIA H100 80GB HBM3"
    assert block[4] == f"GPU UUID:       {gpu3['uuid']}"
    assert block[5] == f"Bus Location:   {gpu3['bus_id']}"


def test_list_realistic_kinds_and_devices(realistic: dict[str, Any]) -> None:
    root = realistic["root"]
    gpus = sorted(realistic["gpus"], key=lambda g: g["index"])
    proc = run_cli("list", "--json", "-d", gpus[2]["uuid"].lower(), "-d", "5", *_roots(root))
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert set(data) == {"devices", "binaries", "libraries", "ipcs", "firmwares"}
    gpu_nodes = [p for p in data["devices"] if os.path.basename(p)[6:].isdigit()]
    assert gpu_nodes == [
        os.path.join(root, f"dev/nvidia{gpus[2]['minor']}"),
        os.path.join(root, f"dev/nvidia{gpus[5]['minor']}"),
    ]
    assert os.path.join(root, "dev/nvidiactl") in data["devices"]
    assert os.path.join(root, "usr/lib/nvidia/current/nvidia-smi") in data["binaries"]
    assert all(".535.261.03" in p and "i386" not in p for p in data["libraries"])
    assert len(data["firmwares"]) == 2
    only = json.loads(run_cli("list", "--json", "-l", "--compat32", *_roots(root)).stdout)
    assert set(only) == {"devices", "libraries"}
    assert any("/i386-linux-gnu/" in p for p in only["libraries"])
    assert len(only["libraries"]) == len(data["libraries"]) + 20  # the 20 i386 libraries


def test_list_plain_matches_json(sim: simhost.SimulatedHost) -> None:
    plain = run_cli("list", *_roots(sim.root)).stdout.splitlines()
    data = json.loads(run_cli("list", "--json", *_roots(sim.root)).stdout)
    assert plain == [p for paths in data.values() for p in paths]
    assert all(p.startswith(sim.root + "/") for p in plain)


def test_list_unknown_device(sim: simhost.SimulatedHost) -> None:
    proc = run_cli("list", "-d", "9", *_roots(sim.root))
    assert proc.returncode == 5
    assert "no such GPU" in proc.stderr and "'9'" in proc.stderr


def test_closed_stdout_is_not_an_error(sim: simhost.SimulatedHost) -> None:
    """`ocihook list | head -1`: the reader goes away; exit 0, no traceback."""
    for args in (["list"], ["info"], ["edit", "--dry-run", "--diff", "-b", "/nonexistent"]):
        proc = subprocess.Popen(
            [sys.executable, "-m", "ocihook", *args, *_roots(sim.root)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before anything is written: EPIPE
        err = proc.stderr.read().decode()
        code = proc.wait(timeout=60)
        if args[0] == "edit":
            assert code == 3  # no bundle there: a real error still counts
            continue
        assert code == 0, err
        assert "Traceback" not in err
