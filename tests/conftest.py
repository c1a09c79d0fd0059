"""Shared fixtures: the simulated host, the realistic host, busybox bundles, the wrapper's
stage, the container engines. The plain helpers are in the ``support`` package.

Markers come from the folder: everything under ``tests/e2e/`` is ``e2e``, everything
under ``tests/realistic/`` is ``realistic`` and everything under ``tests/fuzz/`` is
``fuzz`` (declared in pyproject.toml), so ``-m "not e2e"`` leaves out the real-runtime
tests without a marker in each module."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import support
from support import (  # noqa: F401 (re-exported: test modules once imported them from here)
    REPO,
    edit_cli,
    edit_with_cdi,
    modules_after,
    need_root_and,
    packaged_hook,
    realistic_dir,
    register_hook,
)

from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost

#: Folder (under tests/) -> the marker every test in it gets.
FOLDER_MARKERS = {
    "e2e": pytest.mark.e2e,
    "realistic": pytest.mark.realistic,
    "fuzz": pytest.mark.fuzz,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by the folder its module is in (see :data:`FOLDER_MARKERS`)."""
    tests = Path(support.TESTS)
    for item in items:
        try:
            folder = item.path.relative_to(tests).parts[0]
        except ValueError:
            continue
        marker = FOLDER_MARKERS.get(folder)
        if marker is not None:
            item.add_marker(marker)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fuzz campaign's figures: executions per target (also written as JSON to
    ``$OCIHOOK_FUZZ_STATS`` when set)."""
    if not support.FUZZ_COUNTS:
        return
    terminalreporter.section("fuzz executions per target")
    for target, count in sorted(support.FUZZ_COUNTS.items()):
        terminalreporter.write_line(f"{target:<28} {count}")
    where = os.environ.get("OCIHOOK_FUZZ_STATS")
    if where:
        with open(where, "w") as f:
            json.dump(support.FUZZ_COUNTS, f, indent=1, sort_keys=True)


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    """The built-in simulated host (8 GPUs), built once per session."""
    return simhost.build(str(tmp_path_factory.mktemp("simhost")))


@pytest.fixture(scope="session")
def sim_root(sim: simhost.SimulatedHost) -> HostRoot:
    return HostRoot.single(sim.root)


@pytest.fixture(scope="session")
def realistic() -> dict[str, Any]:
    """Facts of the realistic host built by fixtures/realistic/build.py (skips if absent)."""
    root = realistic_dir()
    meta = os.path.join(root, ".ocihook-fixture.json")
    if not os.path.exists(meta):
        pytest.skip(f"realistic host not built at {root}: run python fixtures/realistic/build.py")
    with open(meta) as f:
        data: dict[str, Any] = json.load(f)
    data["root"] = root
    return data


@pytest.fixture
def bundle_factory(tmp_path: Any) -> Callable[..., str]:
    """Make busybox bundles: factory(args, env, debian=False) -> bundle path
    (:func:`support.busybox_bundle` in the test's temporary directory)."""
    counter = iter(range(1000))

    def make(args: list[str], env: list[str], *, debian: bool = False) -> str:
        path = os.path.join(str(tmp_path), f"bundle{next(counter)}")
        return support.busybox_bundle(path, args, env, debian=debian)

    return make


@pytest.fixture(scope="module")
def host_guard() -> Iterator[str]:
    """A cgroup parent of our own for every container (its name is yielded), removed at the
    end once the processes in it are gone; host paths the engines create restored
    (:func:`support.guard_host`)."""
    yield from support.guard_host()


@pytest.fixture(scope="module")
def podman(tmp_path_factory: pytest.TempPathFactory, host_guard: str) -> Iterator[support.Podman]:
    """podman 4 with a private store, confined to temporary directories; skips unless root
    with podman and runc (:func:`support.start_podman`)."""
    yield from support.start_podman(tmp_path_factory.mktemp("podman"), host_guard)


@pytest.fixture(scope="module")
def containerd(
    tmp_path_factory: pytest.TempPathFactory, host_guard: str
) -> Iterator[support.Containerd]:
    """containerd with a private config, root, state and socket (CRI disabled), stopped
    at the end; skips unless root with containerd, ctr and runc
    (:func:`support.start_containerd`)."""
    yield from support.start_containerd(tmp_path_factory.mktemp("containerd"), host_guard)


@pytest.fixture(scope="module", params=sorted(support.CONTAINERD_SUITES))
def cri(
    request: Any, tmp_path_factory: pytest.TempPathFactory, host_guard: str
) -> Iterator[support.CriContainerd]:
    """containerd of each Debian suite of :data:`support.CONTAINERD_SUITES` (1.7, 2.x)
    with CRI and CDI (:func:`support.start_cri_containerd`; skips, saying why, when its
    .deb cannot be had)."""
    suite = request.param
    for engine in support.start_cri_containerd(
        tmp_path_factory.mktemp(f"cri-{suite}"), suite, host_guard
    ):
        assert engine.version.startswith(support.CONTAINERD_SUITES[suite]), engine.version
        yield engine


@pytest.fixture(scope="module")
def rootless_user() -> Iterator[support.RootlessUser]:
    """An unprivileged user with subuid/subgid ranges, a workspace it can read and a
    simulated host there; removed at the end (:func:`support.start_rootless_user`)."""
    yield from support.start_rootless_user()


@pytest.fixture(scope="session", autouse=True)
def _nothing_written_outside() -> Any:
    """The suite runs as root and builds hostile trees full of links: fail if anything
    appeared in ``/`` (a link followed out of a test's temporary directory)."""
    before = set(os.listdir("/"))
    yield
    added = set(os.listdir("/")) - before
    assert not added, f"the tests wrote outside their temporary directories: {sorted(added)}"
