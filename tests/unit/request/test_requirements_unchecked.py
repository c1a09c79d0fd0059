"""A requirement a host fact leaves unchecked is never a silent pass
(:func:`ocihook.request.requirements.unchecked`): the plan carries the warning, ``ocihook
edit``, the hook and the wrapper print it, and the log has it.

The host whose CUDA version nobody knows is a simulated one with driver 600.10.01: no NVML,
no CUDA note in its libcuda, a branch above the driver-branch table.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import WRAPPER, make_executable, run_cli

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.plan.build import ContainerLayout, make_plan
from ocihook.request.nvidia import request_from_env
from ocihook.request.requirements import (
    KEYS,
    LEGACY_REQUIREMENT_NAME,
    UNCHECKED,
    parse_requirement,
    requirements_from_env,
    unchecked,
)
from ocihook.sim import host as simhost

UNKNOWN_DRIVER = "600.10.01"


@pytest.fixture(scope="module")
def unknown(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    """A host whose CUDA version no source knows."""
    dest = str(tmp_path_factory.mktemp("unknown"))
    return simhost.build(dest, gpus=2, driver_version=UNKNOWN_DRIVER)


def test_a_cuda_requirement_with_an_unknown_cuda_version() -> None:
    reqs = requirements_from_env({"NVIDIA_REQUIRE_CUDA": "cuda>=13.0 brand=tesla"})
    (warning,) = unchecked(reqs, cuda_version=None, driver_version="600.10.01")
    assert warning == (
        "NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=tesla not checked: the CUDA version driver "
        "600.10.01 supports is unknown (no NVML, no CUDA note in its libcuda.so, a branch "
        "outside the driver-branch table)"
    )
    assert unchecked(reqs, cuda_version="12.2", driver_version="535.261.03") == []


def test_the_legacy_requirement_and_the_driver_version() -> None:
    reqs = requirements_from_env({"CUDA_VERSION": "12.4.1", "NVIDIA_REQUIRE_DRV": "driver>=535"})
    warnings = unchecked(reqs, cuda_version=None, driver_version="")
    assert warnings == [
        "NVIDIA_REQUIRE_DRV=driver>=535 not checked: the driver version is unknown",
        f"{LEGACY_REQUIREMENT_NAME} (legacy image: cuda>=12.4) not checked: the CUDA version "
        "the driver supports is unknown (no NVML, no CUDA note in its libcuda.so, a branch "
        "outside the driver-branch table)",
    ]
    assert unchecked(reqs, cuda_version="12.4", driver_version="550.1") == []


constraint = st.tuples(
    st.sampled_from(KEYS), st.sampled_from(["=", "!=", ">=", "<"]), st.integers(0, 999)
).map(lambda c: f"{c[0]}{'=' if c[0] == 'brand' and c[1] != '!=' else c[1]}{c[2]}")
requirement = st.lists(st.lists(constraint, min_size=1, max_size=3), min_size=1, max_size=3).map(
    lambda terms: " ".join(",".join(t) for t in terms)
)


@given(
    st.dictionaries(st.sampled_from(["A", "B", "CUDA"]), requirement, max_size=3),
    st.none() | st.just("12.2"),
    st.none() | st.just("") | st.just("535.261.03"),
)
def test_a_warning_exactly_for_each_requirement_testing_an_unknown_fact(
    values: dict[str, str], cuda: str | None, driver: str | None
) -> None:
    reqs = [(f"NVIDIA_REQUIRE_{k}", parse_requirement(v)) for k, v in sorted(values.items())]
    warnings = unchecked(reqs, cuda_version=cuda, driver_version=driver)
    tested = {name: r.keys() for name, r in reqs}
    expected = [
        name
        for name, keys in tested.items()
        if ("cuda" in keys and not cuda) or ("driver" in keys and not driver)
    ]
    assert [w.split("=", 1)[0] for w in warnings] == expected
    assert all(UNCHECKED in w for w in warnings)


def _plan_warnings(host_root: str, env: dict[str, str], check: bool = True) -> tuple[str, ...]:
    host = discover(HostRoot.single(host_root))
    request = request_from_env({"NVIDIA_VISIBLE_DEVICES": "all", **env})
    return make_plan(host, request, ContainerLayout(), check_requirements=check).warnings


def test_the_plan_carries_the_warning(unknown: simhost.SimulatedHost) -> None:
    env = {"NVIDIA_REQUIRE_CUDA": "cuda>=13.0"}
    assert [w for w in _plan_warnings(unknown.root, env) if UNCHECKED in w] == [
        f"NVIDIA_REQUIRE_CUDA=cuda>=13.0 not checked: the CUDA version driver {UNKNOWN_DRIVER} "
        "supports is unknown (no NVML, no CUDA note in its libcuda.so, a branch outside the "
        "driver-branch table)"
    ]
    # not asked to check (disable-require, NVIDIA_DISABLE_REQUIRE): nothing to warn about
    assert not [w for w in _plan_warnings(unknown.root, env, check=False) if UNCHECKED in w]
    off = {**env, "NVIDIA_DISABLE_REQUIRE": "true"}
    assert not [w for w in _plan_warnings(unknown.root, off) if UNCHECKED in w]


def test_edit_says_so_on_stderr_and_in_the_log(
    unknown: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    log = tmp_path / "ocihook.log"
    log.write_text("")
    config = tmp_path / "config.toml"
    config.write_text(f'log-file = "{log}"\nlog-syslog = false\n')
    bundle = bundle_factory(
        ["true"], ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=13.0"]
    )
    roots = ["--driver-root", unknown.root, "--dev-root", unknown.root]
    proc = run_cli("edit", "--config", str(config), "-b", bundle, *roots)
    assert proc.returncode == 0, proc.stderr
    warning = "NVIDIA_REQUIRE_CUDA=cuda>=13.0 not checked: the CUDA version driver 600.10.01"
    assert f"ocihook: warning: {warning}" in proc.stderr
    assert "written" in proc.stderr
    assert warning in log.read_text()


def test_the_wrapper_says_so_on_stderr(
    unknown: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    if not os.path.exists(WRAPPER):
        pytest.fail(f"{WRAPPER} missing: pip install -e . installs the console script")
    record = tmp_path / "runc-called"
    make_executable(tmp_path / "bin/runc", f'#!/bin/sh\necho "$@" > {record}\n')
    config = tmp_path / "ocihook.toml"
    config.write_text(f'driver-root = "{unknown.root}"\ndev-root = "{unknown.root}"\n')
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0", "CUDA_VERSION=13.0.1"])
    environ = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "OCIHOOK_CONFIG": str(config)}
    proc = subprocess.run(
        [WRAPPER, "create", "--bundle", bundle, "cid"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert record.read_text().split() == ["create", "--bundle", bundle, "cid"]
    (line,) = [x for x in proc.stderr.splitlines() if UNCHECKED in x]
    assert line.startswith(f"ocihook-runtime: warning: {bundle}/config.json: CUDA_VERSION ")
    assert "(legacy image: cuda>=13.0) not checked" in line


def test_a_known_cuda_version_is_enforced_by_the_wrapper(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    """The simulated 550 host: CUDA 12.4 from the table; a 12.5 image is refused before
    the runtime is run."""
    record = tmp_path / "runc-called"
    make_executable(tmp_path / "bin/runc", f'#!/bin/sh\necho "$@" > {record}\n')
    config = tmp_path / "ocihook.toml"
    config.write_text(f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0", "CUDA_VERSION=12.5.0"])
    before = Path(bundle, "config.json").read_bytes()
    environ = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "OCIHOOK_CONFIG": str(config)}
    proc = subprocess.run(
        [WRAPPER, "create", "--bundle", bundle, "cid"],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 5, proc.stderr
    assert "legacy CUDA image" in proc.stderr and "the host has cuda=12.4" in proc.stderr
    assert not record.exists()
    assert Path(bundle, "config.json").read_bytes() == before
