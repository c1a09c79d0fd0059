"""Shared fixtures: the simulated host, the realistic host, busybox bundles."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from typing import Any

import pytest

from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def packaged_hook(stage: str, root: str) -> dict[str, Any]:
    """ocihook's hook entry as packaging/config.json-hooks-snippet.json.in gives it, with
    ``@PYTHON@`` replaced by this interpreter, for ``stage``, reading the simulated host
    at ``root`` (the README's registration, so the tests exercise the documented one)."""
    with open(os.path.join(REPO, "packaging/config.json-hooks-snippet.json.in")) as f:
        snippet = json.loads(f.read().replace("@PYTHON@", __import__("sys").executable))
    hook: dict[str, Any] = snippet["hooks"]["prestart"][0]
    hook["args"] = [*hook["args"][:-1], stage, "--driver-root", root, "--dev-root", root]
    return hook


def edit_cli(bundle: str, root: str, *, check: bool = False) -> Any:
    """Run ``ocihook edit -b bundle`` against the host tree ``root`` (driver root and dev
    root); returns the ``subprocess.CompletedProcess`` (text)."""
    import subprocess
    import sys

    args = ["edit", "-b", bundle, "--driver-root", root, "--dev-root", root]
    return subprocess.run(
        [sys.executable, "-m", "ocihook", *args],
        capture_output=True,
        text=True,
        check=check,
    )


def edit_with_cdi(bundle: str, spec_dir: Any, work: Any) -> str:
    """``ocihook edit -b bundle`` with a configuration file (written in ``work``) whose
    ``cdi-spec-dirs`` is ``spec_dir``; asserts it wrote ``config.json`` and returns its
    stderr."""
    import subprocess
    import sys

    cfg = os.path.join(str(work), "config.toml")
    with open(cfg, "w") as f:
        f.write(f'cdi-spec-dirs = ["{spec_dir}"]\n')
    r = subprocess.run(
        [sys.executable, "-m", "ocihook", "edit", "--config", cfg, "-b", str(bundle)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0 and "written" in r.stderr, r.stderr
    return r.stderr


def register_hook(bundle: str, root: str, stage: str = "prestart") -> None:
    """Add :func:`packaged_hook` to the bundle's ``config.json`` under ``stage``."""
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    doc.setdefault("hooks", {}).setdefault(stage, []).append(packaged_hook(stage, root))
    with open(path, "w") as f:
        json.dump(doc, f, indent="\t")


def modules_after(code: str) -> set[str]:
    """The modules a fresh ``python -I`` has loaded after running ``code`` (for the
    import-cost tests: the start path must not load heavy modules)."""
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-I", "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.split())


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    """The built-in simulated host (8 GPUs), built once per session."""
    return simhost.build(str(tmp_path_factory.mktemp("simhost")))


@pytest.fixture(scope="session")
def sim_root(sim: simhost.SimulatedHost) -> HostRoot:
    return HostRoot.single(sim.root)


def realistic_dir() -> str:
    cache = os.environ.get("OCIHOOK_CACHE") or os.path.expanduser("~/.cache/ocihook")
    return os.path.join(cache, "realistic-535.261.03", "root")


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


def need_root_and(*tools: str) -> None:
    """Skip unless root and every tool is installed; the reason is printed by -ra."""
    if os.geteuid() != 0:
        pytest.skip("end-to-end test needs root")
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"end-to-end test needs {tool} (apt-get install {tool})")


@pytest.fixture
def bundle_factory(tmp_path: Any) -> Callable[..., str]:
    """Make busybox bundles: factory(args, env, debian=False) -> bundle path."""
    from ocihook.sim.demo import find_busybox, make_busybox_bundle

    counter = iter(range(1000))

    def make(args: list[str], env: list[str], *, debian: bool = False) -> str:
        if find_busybox() is None:
            pytest.skip("needs busybox (apt-get install busybox-static)")
        path = os.path.join(str(tmp_path), f"bundle{next(counter)}")
        return make_busybox_bundle(path, args, env, debian=debian)

    return make


@pytest.fixture(scope="session", autouse=True)
def _nothing_written_outside() -> Any:
    """The suite runs as root and builds hostile trees full of links: fail if anything
    appeared in ``/`` (a link followed out of a test's temporary directory)."""
    before = set(os.listdir("/"))
    yield
    added = set(os.listdir("/")) - before
    assert not added, f"the tests wrote outside their temporary directories: {sorted(added)}"
