"""The fuzz campaign, process part: ``ocihook edit`` and ``ocihook-runtime create`` on a
bundle whose config.json hypothesis mutates (grafted values and byte edits of a GPU
container's document), on the simulated host.

Asserted, per input: the exit status is a documented one (0, 2, or a code of
:data:`~ocihook.core.errors.EXIT_CODES`; never 1, the code of a bug), stderr holds no
traceback, the process ends within :data:`LIMIT` seconds, and on an error config.json is
exactly as it was and the bundle holds no temporary file. Each process costs a Python
start, so the CI budget is small (:data:`EXAMPLES`; ``OCIHOOK_FUZZ_DEEP=1`` multiplies
it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from support import (
    FUZZ_COUNTS,
    WRAPPER,
    fuzz_json_bytes,
    fuzz_record,
    fuzz_settings,
    make_executable,
)

from ocihook.core.errors import EXIT_CODES
from ocihook.sim import host as simhost
from ocihook.sim.demo import default_config

#: Processes per target in the default (CI) run.
EXAMPLES = 40
#: Seconds one process may take.
LIMIT = 60.0
#: The exit statuses docs/reference/exit-codes.md documents (1 is "a bug").
DOCUMENTED = {0, 2, 9, *EXIT_CODES.values()}


def _doc() -> dict[str, Any]:
    doc = default_config(
        ["sh"],
        [
            "NVIDIA_VISIBLE_DEVICES=0,1:0",
            "NVIDIA_DRIVER_CAPABILITIES=compute,utility,compat32",
            "NVIDIA_REQUIRE_CUDA=cuda>=11.0",
        ],
    )
    doc["annotations"] = {"org.example/fuzz": "1"}
    return doc


def _bundle(tmp: Path, data: bytes) -> Path:
    bundle = tmp / "bundle"
    if bundle.exists():
        for p in sorted(bundle.rglob("*"), reverse=True):
            p.unlink() if not p.is_dir() or p.is_symlink() else p.rmdir()
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_bytes(data)
    return bundle


def _check(
    target: str, proc: subprocess.CompletedProcess[bytes], bundle: Path, data: bytes
) -> None:
    err = proc.stderr.decode(errors="replace")
    problems = []
    if proc.returncode not in DOCUMENTED:
        problems.append(f"exit {proc.returncode} is not a documented status")
    if "Traceback" in err:
        problems.append("a traceback on stderr")
    if proc.returncode != 0 and (bundle / "config.json").read_bytes() != data:
        problems.append("config.json changed although the command failed")
    left = sorted(set(os.listdir(bundle)) - {"config.json", "rootfs"})
    if left:
        problems.append(f"left in the bundle: {left}")
    if proc.returncode == 0 and (bundle / "config.json").read_bytes() != data:
        json.loads((bundle / "config.json").read_bytes())  # a written file is whole JSON
    fuzz_record(target, data, AssertionError() if problems else None)
    key = f"{target} exit {proc.returncode}"  # the outcomes, for the figures
    FUZZ_COUNTS[key] = FUZZ_COUNTS.get(key, 0) + 1
    assert not problems, f"{target}: {problems}; stderr: {err[-800:]}"


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzzproc")


def test_fuzz_edit(sim: simhost.SimulatedHost, work: Path) -> None:
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    config = work / "empty.toml"
    config.write_bytes(b"")

    @fuzz_settings(EXAMPLES)
    @given(fuzz_json_bytes(_doc()))
    def run(data: bytes) -> None:
        bundle = _bundle(work, data)
        proc = subprocess.run(
            [sys.executable, "-m", "ocihook", "edit", "-b", str(bundle), *roots],
            capture_output=True,
            timeout=LIMIT,
            env={**os.environ, "OCIHOOK_CONFIG": str(config)},
        )
        _check("process_edit", proc, bundle, data)

    run()


def test_fuzz_runtime_wrapper(sim: simhost.SimulatedHost, work: Path) -> None:
    if not os.path.exists(WRAPPER):
        pytest.fail(f"{WRAPPER} missing: pip install -e . installs the console script")
    bin_dir = work / "bin"
    make_executable(bin_dir / "runc")  # the real runtime: exits 0
    config = work / "ocihook.toml"
    config.write_text(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
    env = {
        "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
        "OCIHOOK_CONFIG": str(config),
    }

    @fuzz_settings(EXAMPLES)
    @given(fuzz_json_bytes(_doc()))
    def run(data: bytes) -> None:
        bundle = _bundle(work, data)
        proc = subprocess.run(
            [WRAPPER, "create", "--bundle", str(bundle), "fuzz"],
            capture_output=True,
            timeout=LIMIT,
            env=env,
        )
        _check("process_runtime", proc, bundle, data)

    run()
