"""The discovery cache (``ocihook.discovery.cache`` keys in ``ocihook.linux.cachestore``):
discovery records round-trip exactly, no stale entry is ever used, corrupt, foreign or
unreadable entries mean rediscovery."""

from __future__ import annotations

import json
import marshal
import os
import platform
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ocihook.core.hostroot import HostRoot
from ocihook.discovery import cache
from ocihook.discovery.nvidia import _CACHED_TYPES, NvidiaHost, discover, discover_cached
from ocihook.discovery.records import Gpu, HostDeviceNode, MigDevice
from ocihook.linux import cachestore
from ocihook.sim import host as simhost
from ocihook.sim.elfwrite import make_executable, make_shared_object

text = st.text(max_size=12)
nodes = st.builds(
    HostDeviceNode,
    path=text,
    host_path=text,
    major=st.integers(0, 4095),
    minor=st.integers(0, 1 << 20),
    file_mode=st.integers(0, 0o7777),
    uid=st.integers(0, 1 << 31),
    gid=st.integers(0, 1 << 31),
    present=st.booleans(),
)
migs = st.builds(
    MigDevice,
    parent_index=st.integers(0, 16),
    parent_minor=st.integers(0, 253),
    gi=st.integers(0, 8),
    ci=st.integers(0, 8),
    gi_node=nodes,
    ci_node=nodes,
    gi_cap_file=text,
    ci_cap_file=text,
    uuid=st.none() | text,
    nvml_index=st.none() | st.integers(0, 100),
)
gpus = st.builds(
    Gpu,
    index=st.integers(0, 64),
    minor=st.integers(0, 253),
    uuid=text,
    bus_id=text,
    model=text,
    proc_dir=text,
    brand=st.none() | text,
    architecture=st.none() | text,
    mig_devices=st.lists(migs, max_size=2).map(tuple),
)
values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
    | nodes
    | gpus,
    lambda inner: (
        st.lists(inner, max_size=3).map(tuple)
        | st.lists(inner, max_size=3)
        | st.frozensets(st.integers() | text, max_size=3)
        | st.dictionaries(st.integers() | text, inner, max_size=3)
    ),
    max_leaves=12,
)


@given(values)
@settings(max_examples=200)
def test_encode_decode_round_trips_exactly(value: object) -> None:
    back = cachestore.decode(marshal.loads(marshal.dumps(cachestore.encode(value))), _CACHED_TYPES)
    assert back == value
    assert type(back) is type(value)
    if isinstance(value, float):
        assert back.hex() == value.hex()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    return simhost.build(str(tmp_path_factory.mktemp("sim")), make_dev_nodes=False)


def _root(sim: simhost.SimulatedHost) -> HostRoot:
    return HostRoot(driver_root=sim.root, dev_root=sim.root)


def test_a_discovered_host_round_trips_through_the_cache(
    sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    root = _root(sim)
    for caps in (("compute", "utility"), None):
        fresh = discover(root, capabilities=caps)
        stored = discover_cached(root, capabilities=caps, cache_dir=str(tmp_path), warm=True)
        assert stored == fresh
        entries = sorted(tmp_path.iterdir())
        assert entries and all(p.stat().st_mode & 0o777 == 0o600 for p in entries)
        hit = discover_cached(root, capabilities=caps, cache_dir=str(tmp_path))
        assert isinstance(hit, NvidiaHost)
        assert hit == fresh
        assert hit.libraries and hit.gpus == fresh.gpus


def test_no_cache_directory_means_nothing_written(
    sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    missing = tmp_path / "none"
    assert discover_cached(_root(sim), cache_dir=str(missing)) == discover(_root(sim))
    assert not missing.exists()


#: The capabilities whose discovery reads the DRM state and the graphics files.
GRAPHICS = frozenset({"graphics", "display"})
#: The capabilities that bring the compute files.
COMPUTE = frozenset({"compute", "video"})
MACHINE = platform.machine()
VERSION = simhost.DEFAULT_DRIVER_VERSION
#: A change to a copy of the host: change(root dir), whether the key sees it ("key") or
#: the directories the entry records do ("dirs"), and the capabilities whose discovery it
#: changes (``None``: every capability's).
Change = tuple[Callable[[Path], None], str, frozenset[str] | None]
#: Each change the cache must see, by what it is: every one but those of
#: :data:`KEY_COMPONENTS` changes what discovery finds.
CHANGES: dict[str, Change] = {
    "driver version file": (
        lambda r: _rewrite(r / "proc/driver/nvidia/version", b"Release", b"release"),
        "key",
        None,
    ),
    "/proc/devices": (lambda r: _append(r / "proc/devices", b"240 nvidia-extra\n"), "key", None),
    "ld.so.cache identity": (lambda r: _append(r / "etc/ld.so.cache", b"\0"), "key", None),
    "device node set": (lambda r: _add_node(r), "key", None),
    "GPU set": (lambda r: (r / "proc/driver/nvidia/gpus/0000:ff:00.0").mkdir(), "key", None),
    "a driver library directory": (lambda r: _add_beside_library(r), "dirs", None),
    "a MIG GPU instance destroyed": (lambda r: shutil.rmtree(_gi_dirs(r)[-1]), "key", None),
    "a MIG compute instance created": (lambda r: _add_compute_instance(r), "key", None),
    "a MIG capability node made": (lambda r: _add_cap_node(r), "key", None),
    "nvidia-drm unloaded (sysfs)": (lambda r: shutil.rmtree(_drm_dirs(r)[0]), "key", GRAPHICS),
    "a DRM node made": (lambda r: (r / "dev/dri/card1").write_bytes(b""), "key", GRAPHICS),
    "a binary in a searched directory": (
        lambda r: _write(r / "usr/bin/nvidia-smi", make_executable(machine=MACHINE)),
        "dirs",
        None,
    ),
    "a binary in a directory that was missing": (
        lambda r: _write(r / "usr/local/nvidia/bin/nvidia-smi", make_executable(machine=MACHINE)),
        "dirs",
        None,
    ),
    "GSP firmware of the driver's version": (
        lambda r: _write(r / f"lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin", b"gsp"),
        "dirs",
        None,
    ),
    "a Vulkan ICD file": (
        lambda r: _write(r / "usr/share/vulkan/icd.d/nvidia_icd.json", b"{}"),
        "dirs",
        GRAPHICS,
    ),
    "an OpenCL ICD file in a new directory": (
        lambda r: _write(r / "etc/OpenCL/vendors/nvidia.icd", b"libnvidia-opencl.so.1\n"),
        "dirs",
        COMPUTE,
    ),
    "a library the cache lacks, in a fallback directory": (
        lambda r: _write(
            r / f"usr/lib64/libnvidia-compiler.so.{VERSION}",
            make_shared_object(f"libnvidia-compiler.so.{VERSION}", machine=MACHINE),
        ),
        "dirs",
        COMPUTE,
    ),
}
#: Changes of something the key reads that need not change what discovery finds.
KEY_COMPONENTS = frozenset(
    {
        "driver version file",
        "/proc/devices",
        "ld.so.cache identity",
        "device node set",
        "GPU set",
        "a driver library directory",
    }
)
#: Directories a host has before the changes above (made at boot, or by packages).
BEFORE = (
    "dev/nvidia-caps",
    "dev/dri",
    "usr/bin",
    "lib/firmware/nvidia",
    "usr/share/vulkan/icd.d",
    "usr/lib64",
)


def _drm_dirs(root: Path) -> list[Path]:
    found = sorted((root / "sys/bus/pci/devices").glob("*/drm"))
    assert found
    return found


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(0o755)


def _rewrite(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert old in data
    path.write_bytes(data.replace(old, new, 1))


def _append(path: Path, more: bytes) -> None:
    with open(path, "ab") as f:
        f.write(more)


def _add_node(root: Path) -> None:
    (root / "dev").mkdir(exist_ok=True)
    (root / "dev/nvidia-extra").write_bytes(b"")


def _add_beside_library(root: Path) -> None:
    host = discover(HostRoot(driver_root=str(root), dev_root=str(root)))
    (Path(host.libraries[0].host_path).parent / "libnew.so.1").write_bytes(b"")


def _gi_dirs(root: Path) -> list[Path]:
    """The GPU instances of the simulated host's MIG GPU (``capabilities/gpu<m>/mig/gi<G>``)."""
    found = sorted((root / "proc/driver/nvidia/capabilities").glob("gpu*/mig/gi*"))
    assert found
    return found


def _access_minor(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("DeviceFileMinor:"):
            return int(line.split(":")[1])
    raise AssertionError(path)


def _add_compute_instance(root: Path) -> None:
    """``nvidia-smi mig -cci``: compute instance 1 in the first GPU instance, with the
    minor ``mig-minors`` gives it (the GPU instance's + 2)."""
    gi = _gi_dirs(root)[0]
    minor = _access_minor(gi / "access") + 2
    (gi / "ci1").mkdir()
    (gi / "ci1/access").write_text(
        f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    )


def _add_cap_node(root: Path) -> None:
    """A node in ``/dev/nvidia-caps`` for the first GPU instance (a plain file: discovery
    refuses it, and the cache must not hide that)."""
    minor = _access_minor(_gi_dirs(root)[0] / "access")
    (root / f"dev/nvidia-caps/nvidia-cap{minor}").write_bytes(b"")


@pytest.mark.parametrize("what", sorted(CHANGES))
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(caps=st.sampled_from([("compute", "utility"), ("graphics", "utility"), None]))
@example(caps=None)
def test_a_stale_entry_is_never_used(
    tmp_path_factory: pytest.TempPathFactory, what: str, caps: tuple[str, ...] | None
) -> None:
    """After any change of :data:`CHANGES`, discovery through the cache finds what
    discovery finds; the entry stored before the change is not used when the change
    matters to the capabilities asked for (the key, or a directory the entry names, saw
    it)."""
    base = tmp_path_factory.mktemp("host")
    sim = simhost.build(str(base / "root"), make_dev_nodes=False)
    cache_dir = str(base / "cache")
    root = _root(sim)
    for d in BEFORE:
        (Path(sim.root) / d).mkdir(parents=True)
    key_before = cache.host_key(root, {"capabilities": caps})
    before = discover_cached(root, capabilities=caps, cache_dir=cache_dir, warm=True)
    change, seen_by, only = CHANGES[what]
    change(Path(sim.root))
    key_after = cache.host_key(root, {"capabilities": caps})
    found = cachestore.lookup(key_after, _CACHED_TYPES, cache_dir, prefix=cache.PREFIX)
    matters = caps is None or only is None or bool(only & set(caps))
    if matters:
        assert (key_after == key_before) is (seen_by == "dirs"), what
        # the old entry is there (its key) but never returned for the changed host
        assert found is None, what
    try:
        fresh = discover(root, capabilities=caps)
    except Exception as e:  # the change may break the host; the cache must not hide it
        with pytest.raises(type(e)):
            discover_cached(root, capabilities=caps, cache_dir=cache_dir)
        return
    if matters and what not in KEY_COMPONENTS:
        assert fresh != before, f"{what}: discovery finds the same"
    assert found is None or found == fresh, what
    assert discover_cached(root, capabilities=caps, cache_dir=cache_dir) == fresh


def test_other_parameters_are_other_keys(sim: simhost.SimulatedHost, tmp_path: Path) -> None:
    root = _root(sim)
    other = HostRoot(driver_root=sim.root, dev_root=sim.root, library_dirs=("/opt/x",))
    a = cache.host_key(root, {"capabilities": ["compute"]})
    assert a != cache.host_key(root, {"capabilities": ["utility"]})
    assert a != cache.host_key(other, {"capabilities": ["compute"]})
    # a proc or sys root of its own, even one that reads the same, is another host: the
    # key reads only part of what discovery reads there
    for name in ("proc", "sys"):
        copy = tmp_path / name
        shutil.copytree(Path(sim.root, name), copy)
        moved = HostRoot(driver_root=sim.root, dev_root=sim.root, **{f"{name}_root": str(copy)})
        assert a != cache.host_key(moved, {"capabilities": ["compute"]}), name
    cachestore.store(a, "value", [], str(tmp_path), create=True, prefix=cache.PREFIX)
    assert cachestore.lookup(a, _CACHED_TYPES, str(tmp_path), prefix=cache.PREFIX) == "value"
    b = cache.host_key(other, {"capabilities": ["compute"]})
    assert cachestore.lookup(b, {}, str(tmp_path), prefix=cache.PREFIX) is None


def _with_driver_version(raw: bytes, version: str) -> bytes:
    """The discovery entry ``raw`` with its host's driver version (the record's second
    field, in the value only) changed to ``version``."""
    form, key_text, dirs, (tag, name, fields) = marshal.loads(raw)
    fields = (fields[0], version, *fields[2:])
    return marshal.dumps((form, key_text, dirs, (tag, name, fields)))


@pytest.mark.parametrize(
    "damage",
    ["garbage", "truncated", "other key", "unknown record", "empty", "directory"],
)
def test_corrupt_entries_mean_rediscovery(
    sim: simhost.SimulatedHost, tmp_path: Path, damage: str
) -> None:
    root = _root(sim)
    fresh = discover_cached(root, cache_dir=str(tmp_path), warm=True)
    (entry,) = tmp_path.iterdir()
    raw = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(b"\xff{not json")
    elif damage == "truncated":
        entry.write_bytes(raw[: len(raw) // 2])
    elif damage == "other key":
        form, key_text, dirs, value = marshal.loads(raw)
        key = json.loads(key_text)
        key["version"] = "other"
        entry.write_bytes(marshal.dumps((form, json.dumps(key), dirs, value)))
    elif damage == "unknown record":
        gpu = marshal.dumps("Gpu")[1:]  # the name's length and text
        assert gpu in raw
        entry.write_bytes(raw.replace(gpu, marshal.dumps("Evl")[1:]))
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        entry.unlink()
        entry.mkdir()
    assert discover_cached(root, cache_dir=str(tmp_path)) == fresh


def test_an_unwritable_directory_is_not_an_error(
    sim: simhost.SimulatedHost, tmp_path: Path
) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    assert discover_cached(_root(sim), cache_dir=str(blocker / "sub"), warm=True) == discover(
        _root(sim)
    )


@pytest.mark.parametrize("capabilities", [("compute", "utility"), None])
def test_an_ipc_path_that_comes_or_goes_makes_the_entry_stale(
    tmp_path: Path, capabilities: tuple[str, ...] | None
) -> None:
    """The MPS pipe directory and the daemons' sockets come and go with their daemons, in
    directories no entry watches (``/tmp``): their presence is part of the key."""
    sim = simhost.build(str(tmp_path / "root"), make_dev_nodes=False)
    root, cache_dir = _root(sim), str(tmp_path / "cache")
    mps = Path(sim.root, "tmp/nvidia-mps")
    assert not mps.exists()

    def ipc_paths() -> list[str]:
        host = discover_cached(root, capabilities=capabilities, cache_dir=cache_dir)
        assert host == discover(root, capabilities=capabilities)  # never stale
        return [f.path for f in host.files if f.kind == "ipc"]

    discover_cached(root, capabilities=capabilities, cache_dir=cache_dir, warm=True)
    assert "/tmp/nvidia-mps" not in ipc_paths()
    mps.mkdir(parents=True)  # an MPS daemon started after the boot unit
    assert "/tmp/nvidia-mps" in ipc_paths()
    mps.rmdir()
    assert "/tmp/nvidia-mps" not in ipc_paths()


def test_an_ipc_socket_behind_an_absolute_link_in_the_root_makes_the_entry_stale(
    tmp_path: Path,
) -> None:
    """A driver root whose ``var/run`` is ``/run`` (a driver container's layout): the key
    looks where discovery looks, inside the root, not at the host's ``/run`` the link
    names: a persistenced socket appearing in the root makes a new key, so the cached
    entry without it is not used."""
    sim = simhost.build(str(tmp_path / "root"), make_dev_nodes=False)
    root, cache_dir = _root(sim), str(tmp_path / "cache")
    var_run = Path(sim.root, "var/run")
    if var_run.is_dir() and not var_run.is_symlink():
        shutil.rmtree(var_run)
    var_run.parent.mkdir(parents=True, exist_ok=True)
    var_run.symlink_to("/run")
    sockets = Path(sim.root, "run/nvidia-persistenced")
    sockets.mkdir(parents=True)

    def ipc_paths() -> list[str]:
        host = discover_cached(root, cache_dir=cache_dir)
        assert host == discover(root)  # never stale
        return [f.path for f in host.files if f.kind == "ipc"]

    discover_cached(root, cache_dir=cache_dir, warm=True)  # the boot unit: makes the dir
    assert "/var/run/nvidia-persistenced/socket" not in ipc_paths()
    assert len(list(Path(cache_dir).iterdir())) == 1
    with socket.socket(socket.AF_UNIX) as daemon:
        daemon.bind(str(sockets / "socket"))  # the daemon starts after the boot unit
        assert "/var/run/nvidia-persistenced/socket" in ipc_paths()


def test_warm_rediscovers_and_replaces_the_entry(tmp_path: Path) -> None:
    """``warm`` (``cdi generate --warm-cache``: the boot unit, the refresh rules) never
    returns an entry: it discovers and replaces it, so a change no key sees is picked up
    by the next refresh."""
    sim = simhost.build(str(tmp_path / "root"), make_dev_nodes=False)
    root, cache_dir = _root(sim), str(tmp_path / "cache")
    first = discover_cached(root, cache_dir=cache_dir, warm=True)
    (entry,) = [p for p in Path(cache_dir).iterdir() if p.name.startswith("discovery-")]
    # the driver version, in the value only (not the key): a change no key sees, as far
    # as the cache can tell
    entry.write_bytes(_with_driver_version(entry.read_bytes(), "1.2.3"))
    os.chmod(entry, 0o600)
    assert discover_cached(root, cache_dir=cache_dir).driver_version == "1.2.3"
    assert discover_cached(root, cache_dir=cache_dir, warm=True) == first
    assert discover_cached(root, cache_dir=cache_dir) == first


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod and chown need root")
def test_a_device_node_given_another_owner_makes_the_entry_stale(tmp_path: Path) -> None:
    """A container's node is made with the host node's owner and group: a ``chown`` (a
    udev rule applied after the boot unit ran) makes a new key."""
    sim = simhost.build(str(tmp_path / "root"), gpus=1, make_dev_nodes=True)
    root, cache_dir = _root(sim), str(tmp_path / "cache")
    discover_cached(root, cache_dir=cache_dir, warm=True)
    node = Path(sim.root, "dev/nvidia0")
    os.chown(node, 0, 44)
    host = discover_cached(root, cache_dir=cache_dir)
    assert host == discover(root)
    assert host.gpu_nodes[0].gid == 44


def _no_cubins(store: Path) -> None:
    (store / "nvcubins.bin").unlink()


#: Changes to a simulated WSL2 host: what -> (prepare(store) before the entry is
#: stored, change(root, store) after).
WSL_CHANGES: dict[str, tuple[Callable[[Path], None], Callable[[Path, Path], None]]] = {
    "a file in /usr/lib/wsl/lib": (
        lambda store: None,
        lambda root, store: _write(root / "usr/lib/wsl/lib/libnvidia-encode.so.1", b"x"),
    ),
    "a driver file in the NVIDIA driver store": (
        _no_cubins,
        lambda root, store: _write(store / "nvcubins.bin", b"cubins"),
    ),
    "another driver store with NVIDIA files": (
        lambda store: None,
        lambda root, store: shutil.copytree(
            store, root / "usr/lib/wsl/drivers/nv_dispi.inf_amd64_0000000000000000"
        ),
    ),
}


@pytest.mark.skipif(os.geteuid() != 0, reason="/dev/dxg is made with mknod")
@pytest.mark.parametrize("what", sorted(WSL_CHANGES))
def test_a_wsl_driver_file_that_appears_makes_the_entry_stale(tmp_path: Path, what: str) -> None:
    """A WSL2 host's driver files are in ``/usr/lib/wsl/lib`` and the driver stores of
    ``/usr/lib/wsl/drivers``, none in a directory the key reads: the entry records those
    directories, so a file or a store that appears there later is found."""
    from ocihook.sim import wsl as simwsl

    sim = simwsl.build(str(tmp_path / "root"), make_dev_nodes=True)
    root, cache_dir = HostRoot.single(sim.root), str(tmp_path / "cache")
    prepare, change = WSL_CHANGES[what]
    prepare(Path(sim.store))
    before = discover_cached(root, cache_dir=cache_dir, warm=True)
    assert before.gpu_backend == "wsl"
    change(Path(sim.root), Path(sim.store))
    fresh = discover(root)
    assert fresh != before, what
    assert discover_cached(root, cache_dir=cache_dir) == fresh, what
