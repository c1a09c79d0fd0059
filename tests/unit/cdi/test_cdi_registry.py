"""CDI registry: spec directory priorities, file selection, broken files, conflicts and
lookups (``ocihook.cdi.registry``; reference ``pkg/cdi/cache.go``, ``spec-dirs.go``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from support import GOOD_CDI_YAML as GOOD_YAML

from ocihook.cdi import DEFAULT_SPEC_DIRS, CdiError, Registry, load_spec
from ocihook.cdi.registry import Collision


def spec_data(kind: str, *devices: str, env: str = "X=1") -> dict[str, Any]:
    return {
        "cdiVersion": "0.6.0",
        "kind": kind,
        "devices": [{"name": d, "containerEdits": {"env": [f"{env}-{d}"]}} for d in devices],
    }


def write(directory: Path, name: str, data: dict[str, Any] | str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def env_of(registry: Registry, name: str) -> tuple[str, ...]:
    found = registry.device(name)
    assert found is not None
    return found[1].container_edits.env


def test_default_dirs() -> None:
    assert DEFAULT_SPEC_DIRS == ("/etc/cdi", "/var/run/cdi")


def test_later_dir_wins(tmp_path: Path) -> None:
    low, high = tmp_path / "etc", tmp_path / "run"
    write(low, "a.json", spec_data("vendor.com/gpu", "0", "1", env="LOW=1"))
    write(high, "b.json", spec_data("vendor.com/gpu", "1", "2", env="HIGH=1"))
    reg = Registry.load([str(low), str(high)])
    assert reg.list_devices() == ["vendor.com/gpu=0", "vendor.com/gpu=1", "vendor.com/gpu=2"]
    assert env_of(reg, "vendor.com/gpu=0") == ("LOW=1-0",)
    assert env_of(reg, "vendor.com/gpu=1") == ("HIGH=1-1",)
    assert not reg.errors and not reg.conflicts
    entry = reg.resolve("vendor.com/gpu=1")
    assert entry is not None and entry.priority == 1 and entry.path == str(high / "b.json")
    # the reverse order gives the other file priority
    rev = Registry.load([str(high), str(low)])
    assert env_of(rev, "vendor.com/gpu=1") == ("LOW=1-1",)


def test_only_json_and_yaml_not_recursive_missing_dir_skipped(tmp_path: Path) -> None:
    d = tmp_path / "cdi"
    write(d, "a.json", spec_data("v.com/a", "0"))
    write(d, "b.yaml", "cdiVersion: 0.6.0\nkind: v.com/b\ndevices:\n"
          "- name: '0'\n  containerEdits: {env: [A=1]}\n")  # fmt: skip
    write(d, "c.yml", spec_data("v.com/c", "0"))
    write(d, "d.json.bak", spec_data("v.com/d", "0"))
    write(d, "e.txt", spec_data("v.com/e", "0"))
    write(d / "sub", "f.json", spec_data("v.com/f", "0"))
    os.mkdir(d / "dir.json")  # a directory with a spec-like name is ignored
    reg = Registry.load([str(tmp_path / "missing"), str(d)])
    assert reg.list_devices() == ["v.com/a=0", "v.com/b=0"]
    assert reg.errors == {}


def test_broken_file_reported_others_load(tmp_path: Path) -> None:
    d = tmp_path / "cdi"
    write(d, "a.json", spec_data("v.com/a", "0"))
    bad = write(d, "b.json", "{not json: [")
    invalid = write(d, "c.yaml", spec_data("v.com/c", "0") | {"cdiVersion": "0.1.0"})
    write(d, "d.json", spec_data("v.com/d", "0"))
    reg = Registry.load([str(d)])
    assert reg.list_devices() == ["v.com/a=0", "v.com/d=0"]
    assert set(reg.errors) == {bad, invalid}
    assert all(isinstance(e, CdiError) and e.path == p for p, e in reg.errors.items())
    assert reg.vendors() == ["v.com"]


def test_unreadable_file_reported(tmp_path: Path) -> None:
    d = tmp_path / "cdi"
    path = write(d, "a.json", spec_data("v.com/a", "0"))
    os.chmod(path, 0)
    try:
        if os.access(path, os.R_OK):  # root reads anything
            return
        reg = Registry.load([str(d)])
        assert path in reg.errors and reg.list_devices() == []
    finally:
        os.chmod(path, 0o644)


def test_same_priority_conflict_dropped(tmp_path: Path) -> None:
    d = tmp_path / "cdi"
    a = write(d, "a.json", spec_data("v.com/gpu", "0", "1"))
    b = write(d, "b.json", spec_data("v.com/gpu", "1", "2"))
    reg = Registry.load([str(d)])
    assert reg.list_devices() == ["v.com/gpu=0", "v.com/gpu=2"]
    assert reg.device("v.com/gpu=1") is None
    assert reg.conflicts == {"v.com/gpu=1": (a, b)}


def test_higher_priority_overrides_lower_conflict(tmp_path: Path) -> None:
    low, high = tmp_path / "low", tmp_path / "high"
    write(low, "a.json", spec_data("v.com/gpu", "1"))
    write(low, "b.json", spec_data("v.com/gpu", "1"))
    write(high, "c.json", spec_data("v.com/gpu", "1", env="HIGH=1"))
    reg = Registry.load([str(low), str(high)])
    assert env_of(reg, "v.com/gpu=1") == ("HIGH=1-1",)
    assert reg.conflicts == {}


def test_conflict_at_higher_priority_drops_lower_too(tmp_path: Path) -> None:
    low, high = tmp_path / "low", tmp_path / "high"
    write(low, "a.json", spec_data("v.com/gpu", "1"))
    b = write(high, "b.json", spec_data("v.com/gpu", "1"))
    c = write(high, "c.json", spec_data("v.com/gpu", "1"))
    reg = Registry.load([str(low), str(high)])
    assert reg.list_devices() == []
    assert reg.conflicts == {"v.com/gpu=1": (b, c)}


def test_collisions_one_per_pair_of_files(tmp_path: Path) -> None:
    """Two producers of one kind in one directory: one Collision naming both files and
    every name they share, its message one line; a later directory's file overriding an
    earlier one is a collision of its own kind (the used file first)."""
    low, high = tmp_path / "etc", tmp_path / "run"
    names = [str(i) for i in range(17)]
    a = write(high, "a-nvidia.yaml", spec_data("nvidia.com/gpu", *names))
    b = write(high, "b-ocihook.json", spec_data("nvidia.com/gpu", *names, "all"))
    old = write(low, "old.json", spec_data("nvidia.com/gpu", "all", "x"))
    reg = Registry.load([str(low), str(high)])
    assert reg.list_devices() == ["nvidia.com/gpu=all", "nvidia.com/gpu=x"]
    assert reg.overridden == {"nvidia.com/gpu=all": (old,)}
    conflict, override = reg.collisions()
    assert (conflict.paths, conflict.overrides, len(conflict.names)) == ((a, b), False, 17)
    message = conflict.message()
    assert "\n" not in message and message.count(a) == message.count(b) == 1
    assert message == (
        f"CDI specs {a} and {b} all define nvidia.com/gpu=0, nvidia.com/gpu=1, "
        "nvidia.com/gpu=10 and 14 more at one priority: a CDI registry uses none of these "
        "devices"
    )
    assert override == Collision((b, old), ("nvidia.com/gpu=all",), overrides=True)
    assert override.message() == (
        f"CDI spec {b} overrides {old} for nvidia.com/gpu=all (a later spec directory wins)"
    )
    assert reg.conflict_of("nvidia.com/gpu=3") == conflict
    assert reg.conflict_of("nvidia.com/gpu=all") is None
    # three files: every one named
    c = write(high, "c.json", spec_data("nvidia.com/gpu", "0"))
    (three,) = [c for c in Registry.load([str(high)]).collisions() if len(c.paths) == 3]
    assert three.paths == (a, b, c) and three.names == ("nvidia.com/gpu=0",)
    assert f"CDI specs {a}, {b}, {c} all define nvidia.com/gpu=0 at" in three.message()


_SPEC_FILES = st.lists(
    st.tuples(st.integers(0, 2), st.sets(st.sampled_from("0123"), min_size=1)),
    min_size=1,
    max_size=5,
)


@given(_SPEC_FILES)
def test_collisions_account_for_every_second_definition(
    files: list[tuple[int, set[str]]],
) -> None:
    """Whatever the files and priorities (given lowest first, as load reads them): every
    name is resolved or in conflict, never both; a name in conflict is in one collision
    naming exactly the files of the highest priority defining it; a resolved name
    defined more than once is in one override naming the used file first, then every
    other file defining it."""
    specs = []
    for i, (priority, names) in enumerate(sorted(files, key=lambda f: f[0])):
        spec = load_spec(json.dumps(spec_data("v.com/gpu", *sorted(names))), path=f"/d/{i}.json")
        specs.append((priority, f"/d{priority}/{i}.json", spec))
    reg = Registry.from_specs(specs)
    defined: dict[str, list[tuple[int, str]]] = {}
    for priority, path, spec in specs:
        for d in spec.devices:
            defined.setdefault(f"v.com/gpu={d.name}", []).append((priority, path))
    for name, where in defined.items():
        entry = reg.resolve(name)
        assert (entry is None) == (name in reg.conflicts)
        found = [c for c in reg.collisions() if name in c.names]
        top = max(p for p, _ in where)
        if entry is None:
            (c,) = found
            assert not c.overrides and c.paths == tuple(path for p, path in where if p == top)
        elif len(where) == 1:
            assert not found
        else:
            (c,) = found
            assert c.overrides and c.paths[0] == entry.path
            assert sorted(c.paths) == sorted(path for _, path in where)


def test_lookups_from_specs() -> None:
    gpu = load_spec(json.dumps(spec_data("nvidia.com/gpu", "0", "all")), path="/x/gpu.json")
    nic = load_spec(json.dumps(spec_data("acme.io/net.x", "eth")), path="/x/nic.json")
    reg = Registry.from_specs([(0, "/x/gpu.json", gpu), (0, "/x/nic.json", nic)])
    assert reg.list_devices() == ["acme.io/net.x=eth", "nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    assert reg.vendors() == ["acme.io", "nvidia.com"]
    assert reg.classes() == ["gpu", "net.x"]
    assert reg.device("nvidia.com/gpu=0") == (gpu, gpu.devices[0])
    assert reg.device("nvidia.com/gpu=7") is None
    assert reg.device("not a name") is None
    assert list(reg.devices()) == reg.list_devices()
    assert reg.devices()["acme.io/net.x=eth"] == (nic, nic.devices[0])
    assert "3 devices" in repr(reg)


def test_empty_registry() -> None:
    reg = Registry.from_specs([])
    assert reg.list_devices() == [] and reg.vendors() == [] and reg.classes() == []


# --- malformed and hostile input to the CDI generator and loader ----------------------------------


def test_registry_survives_a_spec_with_a_huge_integer(tmp_path: Path) -> None:
    """One broken file in a spec dir goes to Registry.errors; the other specs still load
    (CDI pkg/cdi/cache.go). A huge integer made Registry.load raise ValueError instead, so
    every CDI request on the host failed with a traceback."""
    (tmp_path / "a-good.yaml").write_text(GOOD_YAML)
    bad = GOOD_YAML.replace("example.com/gpu", "other.com/gpu").replace(
        "env: [A=1]", "deviceNodes: [{path: /dev/x, minor: 0b" + "1" * 20000 + "}]"
    )
    (tmp_path / "b-bad.yaml").write_text(bad)
    registry = Registry.load([str(tmp_path)])
    assert registry.list_devices() == ["example.com/gpu=gpu0"]
    assert list(registry.errors) == [str(tmp_path / "b-bad.yaml")]


# --- the parsed-spec cache (no PyYAML on a start) -----------------------------------------


def _yaml_spec(path: Any, env: str = "A=1") -> None:
    import yaml

    doc = {
        "cdiVersion": "0.5.0",
        "kind": "example.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"env": [env]}}],
        "containerEdits": {
            "mounts": [{"hostPath": "/x", "containerPath": "/y", "options": ["ro", "bind"]}]
        },
    }
    path.write_text(yaml.safe_dump(doc))


def test_yaml_spec_cached_by_identity(tmp_path: Any) -> None:
    """The first load parses the YAML spec and keeps it; the next, in a fresh interpreter,
    gets the same spec without importing yaml; a changed file (even with its size and
    mtime put back) is parsed again."""
    import subprocess
    import sys

    specs = tmp_path / "cdi"
    specs.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    spec_file = specs / "a.yaml"
    _yaml_spec(spec_file)
    first = Registry.load([str(specs)], cache_dir=str(cache))
    assert [p.name[:9] for p in cache.iterdir()] == ["cdi-spec-"]
    probe = (
        "import sys; from ocihook.cdi.registry import Registry; "
        f"r = Registry.load([{str(specs)!r}], cache_dir={str(cache)!r}); "
        "print(r.list_devices(), 'yaml' in sys.modules, r.device('example.com/gpu=0')[1].container_edits.env)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['example.com/gpu=0'] False ('A=1',)"
    assert first.device("example.com/gpu=0") == Registry.load([str(specs)]).device(
        "example.com/gpu=0"
    )
    # same size, same mtime, other content: the ctime tells
    st = spec_file.stat()
    _yaml_spec(spec_file, env="B=1")
    os.utime(spec_file, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert spec_file.stat().st_size == st.st_size
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['example.com/gpu=0'] True ('B=1',)"


def test_broken_yaml_spec_is_not_cached(tmp_path: Any) -> None:
    specs = tmp_path / "cdi"
    specs.mkdir()
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o755)
    (specs / "bad.yaml").write_text("cdiVersion: [\n")
    for _ in range(2):
        registry = Registry.load([str(specs)], cache_dir=str(cache))
        assert list(registry.errors) == [str(specs / "bad.yaml")]
    assert list(cache.iterdir()) == []
