"""Compiled edits (:mod:`ocihook.pipeline.compiled`): a replayed plan edits a bundle
exactly as the pipeline does, and no change to anything the plan depends on lets a stored
plan be used for it.

Each case edits three copies of one bundle with :func:`ocihook.appliers.spec.edit_bundle`:
with no store (the pipeline, the oracle), with an empty store (a miss, which stores), and
with that store again (a hit, with the planner made to fail if it is called). The three
``config.json`` files must be byte-identical, and so must the three root file systems
(every path's type, mode, link target and bytes) — or the three runs must fail with the
same error.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ocihook.appliers.spec import edit_bundle
from ocihook.config.options import Options
from ocihook.core.errors import OcihookError
from ocihook.core.hostroot import HostRoot
from ocihook.linux import cachestore
from ocihook.pipeline import compiled
from ocihook.sim import host as simhost
from ocihook.sim.demo import default_config
from ocihook.sim.elfwrite import make_executable, make_shared_object

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the store is used only by its owner")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> list[simhost.SimulatedHost]:
    base = tmp_path_factory.mktemp("compiled-hosts")
    return [
        simhost.build(str(base / "a")),
        simhost.build(str(base / "b"), gpus=2, driver_version="550.127.05"),
    ]


class Image:
    """What the test varies in the image and its ``config.json``."""

    def __init__(
        self,
        debian: bool,
        occupied: str | None,
        etc_mount: bool,
        userns: bool,
        env: list[str],
    ) -> None:
        self.debian, self.occupied, self.etc_mount, self.userns = (
            debian,
            occupied,
            etc_mount,
            userns,
        )
        self.env = env

    def make(self, bundle: Path) -> None:
        rootfs = bundle / "rootfs"
        for d in ("bin", "dev", "proc", "sys", "etc", "tmp", "usr/lib/x86_64-linux-gnu"):
            (rootfs / d).mkdir(parents=True, exist_ok=True)
        (rootfs / "bin/sh").write_bytes(b"#!not run\n")
        if self.debian:
            (rootfs / "etc/debian_version").write_text("12.0\n")
        if self.occupied:  # the image ships its own copy of a driver library
            p = rootfs / self.occupied.lstrip("/")
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(b"an image's own stub\n")
        doc: dict[str, Any] = default_config(["sh"], self.env)
        if self.etc_mount:
            doc["mounts"].append(
                {"destination": "/etc", "type": "tmpfs", "source": "tmpfs", "options": ["rw"]}
            )
        if self.userns:
            doc["linux"]["namespaces"].append({"type": "user"})
            doc["linux"]["uidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
            doc["linux"]["gidMappings"] = [{"containerID": 0, "hostID": 100000, "size": 65536}]
        (bundle / "config.json").write_text(json.dumps(doc, indent="\t") + "\n")


def tree(root: Path) -> dict[str, object]:
    """Every path below ``root``: its type and mode, and a link's target or a file's bytes."""
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            s = os.lstat(p)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir", s.st_mode)
            else:
                out[rel] = ("file", s.st_mode, Path(p).read_bytes())
    return out


def edit(bundle: Path, root: HostRoot, options: Options, store: Path) -> tuple[object, ...]:
    """Edit ``bundle`` with the store ``store``: the new config.json and rootfs, or the error."""
    with mock.patch.object(cachestore, "DEFAULT_DIR", str(store)):
        try:
            edit_bundle(str(bundle), root, options=options, indent=None, durable=False)
        except OcihookError as e:
            return ("error", type(e).__name__, str(e).replace(str(bundle), "BUNDLE"))
    return ("done", (bundle / "config.json").read_bytes(), tree(bundle / "rootfs"))


@pytest.fixture
def work(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


def _store(path: Path) -> Path:
    path.mkdir(mode=0o755, parents=True)
    return path


CAPS = ["utility", "compute", "graphics", "video", "display", "compat32", "ngx"]
#: Each thing a case varies, with the values it takes.
PARTS: dict[str, st.SearchStrategy[Any]] = {
    "host": st.integers(0, 1),
    "visible": st.sampled_from(["all", "none", "0", "1", "0,1", "1,0", "7", "GPU-x", ""]),
    "caps": st.one_of(
        st.none(),
        st.just("all"),
        st.lists(st.sampled_from(CAPS), unique=True).map(",".join),
    ),
    "require": st.sampled_from(
        [
            None,
            "NVIDIA_REQUIRE_CUDA=cuda>=11.0",
            "NVIDIA_REQUIRE_CUDA=cuda>=99.0",
            "NVIDIA_REQUIRE_DRIVER=driver>=999",
        ]
    ),
    "debian": st.booleans(),
    "occupied": st.sampled_from(
        [
            None,
            "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
            "/usr/lib64/libnvidia-ml.so.1",
            "/usr/lib/x86_64-linux-gnu/libcuda.so",
        ]
    ),
    "etc_mount": st.booleans(),
    "userns": st.booleans(),
    "supported": st.one_of(st.none(), st.frozensets(st.sampled_from(CAPS), min_size=1)),
    "check_requirements": st.booleans(),
    "cuda_compat": st.booleans(),
}

Case = dict[str, Any]
cases = st.fixed_dictionaries(PARTS)


def image_of(c: Case) -> Image:
    env = [f"NVIDIA_VISIBLE_DEVICES={c['visible']}"]
    if c["caps"] is not None:
        env.append(f"NVIDIA_DRIVER_CAPABILITIES={c['caps']}")
    if c["require"]:
        env.append(c["require"])
    return Image(c["debian"], c["occupied"], c["etc_mount"], c["userns"], env)


def options_of(c: Case) -> Options:
    return Options(
        supported=c["supported"],
        check_requirements=c["check_requirements"],
        cuda_compat=c["cuda_compat"],
    )


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=cases)
def test_replay_equals_the_pipeline(case: Case, hosts: list[simhost.SimulatedHost]) -> None:
    image, options = image_of(case), options_of(case)
    root = HostRoot.single(hosts[case["host"]].root)
    # one directory per process (hypothesis runs examples without tmp_path): two runs of
    # the suite at once never share it
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"ocihook-compiled-{os.getpid()}"
    shutil.rmtree(d, ignore_errors=True)
    bundles = [d / n for n in ("oracle", "miss", "hit")]
    for b in bundles:
        image.make(b)
    store = _store(d / "store")
    oracle = edit(bundles[0], root, options, d / "no-store")
    miss = edit(bundles[1], root, options, store)
    assert miss == oracle
    stored = sorted(p.name for p in store.iterdir() if p.name.startswith("compiled-"))
    counted = mock.patch.object(compiled, "_make", wraps=compiled._make)
    with counted as planner:
        hit = edit(bundles[2], root, options, store)
    assert hit == oracle, (image.env, stored)
    if stored:  # a stored plan was replayed, never made again
        assert planner.call_count == 0, (image.env, stored)
    shutil.rmtree(d, ignore_errors=True)


@st.composite
def neighbours(draw: st.DrawFn) -> tuple[Case, Case]:
    """A case whose plan can be made (so that it is stored), and one that differs from it
    in exactly one part."""
    first = draw(cases)
    first["visible"] = draw(st.sampled_from(["all", "0", "1,0", "none"]))
    first["require"] = draw(st.sampled_from([None, "NVIDIA_REQUIRE_CUDA=cuda>=11.0"]))
    part = draw(st.sampled_from(sorted(PARTS)))
    value = draw(PARTS[part].filter(lambda v: v != first[part]))
    return first, {**first, part: value}


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pair=neighbours())
def test_a_stored_plan_is_never_used_for_anything_else(
    pair: tuple[Case, Case], hosts: list[simhost.SimulatedHost]
) -> None:
    """After the plan of one case was stored, a case that differs in any one part (the
    host, the request, a setting, the image) is edited as the pipeline edits it."""
    first, second = pair
    d = Path(os.environ.get("TMPDIR", "/tmp")) / f"ocihook-compiled2-{os.getpid()}"
    shutil.rmtree(d, ignore_errors=True)
    store = _store(d / "store")
    image_of(first).make(d / "first")
    edit(d / "first", HostRoot.single(hosts[first["host"]].root), options_of(first), store)
    image = image_of(second)
    image.make(d / "oracle")
    image.make(d / "again")
    root = HostRoot.single(hosts[second["host"]].root)
    options = options_of(second)
    assert edit(d / "again", root, options, store) == edit(d / "oracle", root, options, d / "x")
    shutil.rmtree(d, ignore_errors=True)


def test_a_changed_driver_is_planned_again(tmp_path: Path) -> None:
    """A library taken away from the driver's directory after its plan was stored is not
    mounted: the entry is stale once a source directory changes."""
    sim = simhost.build(str(tmp_path / "host"), gpus=1)
    root = HostRoot.single(sim.root)
    store = _store(tmp_path / "store")
    image = Image(
        True, None, False, False, ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=all"]
    )
    image.make(tmp_path / "b1")
    first = edit(tmp_path / "b1", root, Options(), store)
    assert first[0] == "done" and b"libnvidia-ml.so" in first[1]  # type: ignore[operator]
    assert any(p.name.startswith("compiled-") for p in store.iterdir())
    libs = [p for p in Path(sim.root).rglob("libnvidia-ml.so.*") if not p.is_symlink()]
    assert libs
    for p in libs:
        p.unlink()
    image.make(tmp_path / "b2")
    image.make(tmp_path / "b3")
    again = edit(tmp_path / "b2", root, Options(), store)
    assert again == edit(tmp_path / "b3", root, Options(), tmp_path / "none")
    assert again[0] != "done" or b"libnvidia-ml.so." + sim.driver_version.encode() not in again[1]  # type: ignore[operator]


def _destroy_last_gpu_instance(root: Path) -> None:
    """``nvidia-smi mig -dci; -dgi`` of the MIG GPU's last GPU instance."""
    gis = sorted((root / "proc/driver/nvidia/capabilities").glob("gpu*/mig/gi*"))
    shutil.rmtree(gis[-1])


def _unload_nvidia_drm(root: Path) -> None:
    """``rmmod nvidia-drm``: the GPUs' sysfs ``drm`` directories go, and the nodes and
    links in ``/dev/dri`` (the directory stays)."""
    for d in (root / "sys/bus/pci/devices").glob("*/drm"):
        shutil.rmtree(d)
    for p in (root / "dev/dri").iterdir():
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def _install_nvidia_smi(root: Path) -> None:
    """A package puts ``nvidia-smi`` in ``/usr/bin`` (not there when the plan was made)."""
    path = root / "usr/bin/nvidia-smi"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(make_executable(machine=platform.machine()))
    path.chmod(0o755)


def _add_fallback_library(root: Path) -> None:
    """The driver's ``libnvidia-compiler`` in ``/usr/lib64``, unknown to ``ld.so.cache``:
    discovery finds it by searching the fallback library directories."""
    version = simhost.DEFAULT_DRIVER_VERSION
    path = root / f"usr/lib64/libnvidia-compiler.so.{version}"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        make_shared_object(f"libnvidia-compiler.so.{version}", machine=platform.machine())
    )


#: Host changes after a plan was stored, each with the request whose plan it changes:
#: what -> (NVIDIA_VISIBLE_DEVICES, NVIDIA_DRIVER_CAPABILITIES, change(host root)).
HOST_CHANGES: dict[str, tuple[str, str, Any]] = {
    "a MIG GPU instance destroyed": ("1:1", "utility,compute", _destroy_last_gpu_instance),
    "nvidia-drm unloaded": ("0", "graphics", _unload_nvidia_drm),
    "nvidia-smi installed": ("all", "utility", _install_nvidia_smi),
    "a library the loader cache lacks, in a fallback directory": (
        "all",
        "compute",
        _add_fallback_library,
    ),
}


@pytest.mark.parametrize("what", sorted(HOST_CHANGES))
def test_a_host_change_the_plan_depends_on_is_planned_again(tmp_path: Path, what: str) -> None:
    """After the plan was stored, a change to the host that changes the plan: the next
    start edits the bundle as the pipeline does, not with the stored plan."""
    visible, caps, change = HOST_CHANGES[what]
    sim = simhost.build(str(tmp_path / "host"), gpus=2)
    for d in ("usr/bin", "usr/lib64"):  # a host has them, empty of the driver's files
        Path(sim.root, d).mkdir(parents=True)
    root = HostRoot.single(sim.root)
    store = _store(tmp_path / "store")
    image = Image(
        True,
        None,
        False,
        False,
        [f"NVIDIA_VISIBLE_DEVICES={visible}", f"NVIDIA_DRIVER_CAPABILITIES={caps}"],
    )
    image.make(tmp_path / "b1")
    before = edit(tmp_path / "b1", root, Options(), store)
    assert any(p.name.startswith("compiled-") for p in store.iterdir())
    change(Path(sim.root))
    image.make(tmp_path / "b2")
    image.make(tmp_path / "b3")
    after = edit(tmp_path / "b2", root, Options(), store)
    oracle = edit(tmp_path / "b3", root, Options(), tmp_path / "none")
    assert oracle != before, "the change must change the plan"
    assert after == oracle, what


def test_another_proc_root_is_another_host(tmp_path: Path) -> None:
    """A host root with a proc root of its own whose files the key reads the same (the
    driver version, ``/proc/devices``, the GPUs' directory names) but whose GPU is
    another (its UUID, in the ``information`` file the key does not read): the plan
    stored for the first root is not used for the second."""
    sim = simhost.build(str(tmp_path / "host"), gpus=1)
    proc = tmp_path / "proc"
    shutil.copytree(Path(sim.root, "proc"), proc)
    (info,) = proc.glob("driver/nvidia/gpus/*/information")
    uuid = sim.gpus[0].uuid
    info.write_text(info.read_text().replace(uuid, "GPU-" + "0" * 8 + uuid[12:]))
    first = HostRoot.single(sim.root)
    second = HostRoot(driver_root=sim.root, dev_root=sim.root, proc_root=str(proc))
    store = _store(tmp_path / "store")
    image = Image(True, None, False, False, [f"NVIDIA_VISIBLE_DEVICES={uuid}"])
    for b in ("b1", "b2", "b3"):
        image.make(tmp_path / b)
    assert edit(tmp_path / "b1", first, Options(), store)[0] == "done"
    assert any(p.name.startswith("compiled-") for p in store.iterdir())
    again = edit(tmp_path / "b2", second, Options(), store)
    oracle = edit(tmp_path / "b3", second, Options(), tmp_path / "none")
    assert oracle[0] == "error"  # no GPU of that UUID behind the second proc root
    assert again == oracle


def test_a_request_over_the_limit_is_planned_afresh_and_not_stored(tmp_path: Path) -> None:
    """A request whose encoding is over ``MAX_REQUEST_BYTES`` (here: hundreds of
    ``NVIDIA_REQUIRE_*`` variables) is planned as the pipeline plans it, and nothing is
    stored for it; the store stays bounded by the size of what it keys."""
    sim = simhost.build(str(tmp_path / "host"), gpus=1)
    root = HostRoot.single(sim.root)
    store = _store(tmp_path / "store")
    env = ["NVIDIA_VISIBLE_DEVICES=all"]
    env += [f"NVIDIA_REQUIRE_X{i:04d}=cuda>=11.0 driver>=500" for i in range(400)]
    image = Image(True, None, False, False, env)
    for b in ("b1", "b2", "oracle"):
        image.make(tmp_path / b)
    oracle = edit(tmp_path / "oracle", root, Options(), tmp_path / "none")
    assert oracle[0] == "done"
    assert edit(tmp_path / "b1", root, Options(), store) == oracle
    assert not [p.name for p in store.iterdir() if p.name.startswith("compiled-")]
    assert edit(tmp_path / "b2", root, Options(), store) == oracle
    # the same request with fewer variables is stored
    small = Image(True, None, False, False, env[:3])
    small.make(tmp_path / "b4")
    assert edit(tmp_path / "b4", root, Options(), store)[0] == "done"
    assert [p.name for p in store.iterdir() if p.name.startswith("compiled-")]


def test_compilable() -> None:
    from ocihook.request.nvidia import Request

    assert compiled.compilable(Request("all"))
    assert not compiled.compilable(Request("void"))
    assert not compiled.compilable(Request("all", features=frozenset({"gds"})))
    assert not compiled.compilable(Request("all", imex_channels=("0",)))
    assert not compiled.compilable(Request("all", mig_config=True))


def test_a_replay_loads_neither_discovery_nor_the_planner(
    hosts: list[simhost.SimulatedHost], tmp_path: Path
) -> None:
    """The second start of a container asking the same (a fresh interpreter, as every
    start) reads the plan from the store: the discovery and planner modules stay unloaded."""
    image = Image(True, None, False, False, ["NVIDIA_VISIBLE_DEVICES=all"])
    store = _store(tmp_path / "store")
    code = (
        "import sys\n"
        "from ocihook.linux import cachestore\n"
        f"cachestore.DEFAULT_DIR = {str(store)!r}\n"
        "from ocihook.appliers.spec import edit_bundle\n"
        "from ocihook.core.hostroot import HostRoot\n"
        f"edit_bundle(sys.argv[1], HostRoot.single({hosts[0].root!r}), indent=None)\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith('ocihook.'))))\n"
    )
    loaded = []
    for n in range(2):
        b = tmp_path / f"b{n}"
        image.make(b)
        out = subprocess.run(
            [sys.executable, "-c", code, str(b)], capture_output=True, text=True, check=True
        )
        loaded.append(set(out.stdout.split()))
    for m in ("ocihook.discovery.nvidia", "ocihook.plan.build", "ocihook.pipeline.extras"):
        assert m in loaded[0] and m not in loaded[1], m
    assert (tmp_path / "b0/config.json").read_bytes() == (tmp_path / "b1/config.json").read_bytes()
