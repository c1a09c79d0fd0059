"""``ocihook.linux.cachestore``: the root-owned store that discovery and the configuration
share: exact round trips, entries used only when private to this user, corrupt entries
ignored, prefixes kept apart, the directory bounded."""

from __future__ import annotations

import marshal
import os
import pwd
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import REPO

from ocihook.core.records import Record
from ocihook.linux import cachestore


class Point(Record):
    """A record for the round trips."""

    x: int
    label: str | None = None


TYPES: dict[str, type[Record]] = {"Point": Point}

values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.builds(Point, x=st.integers(), label=st.none() | st.text(max_size=4)),
    lambda inner: (
        st.lists(inner, max_size=3).map(tuple)
        | st.lists(inner, max_size=3)
        | st.frozensets(st.integers() | st.text(max_size=4), max_size=3)
        | st.dictionaries(st.integers() | st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)


@given(values)
def test_encode_decode_round_trips_exactly(value: object) -> None:
    back = cachestore.decode(marshal.loads(marshal.dumps(cachestore.encode(value))), TYPES)
    assert back == value
    assert type(back) is type(value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), object(), {1, 2}])
def test_values_it_cannot_keep_are_refused(value: object) -> None:
    with pytest.raises(TypeError):
        cachestore.encode(value)


@pytest.mark.parametrize(
    "data",
    [
        (0, "Evil", ()),  # a class not in the types
        (0, "Point", (1, 2, 3)),  # a wrong number of fields
        (0, "Point", [1]),  # fields not a tuple
        (9, ()),  # an unknown tag
        (1, [1]),  # items not a tuple
        (4, ((1,),)),  # a mapping item that is not a pair
        (4, (((2, ()), 1),)),  # an unhashable key (a list)
        (),  # no tag
        [1],  # a list: encode never writes one
        b"x",  # bytes
        {"m": 1},  # the earlier JSON form
    ],
)
def test_malformed_values_are_refused(data: object) -> None:
    with pytest.raises(ValueError):
        cachestore.decode(data, TYPES)


def test_a_value_is_stored_and_found(tmp_path: Path) -> None:
    key = {"format": 1, "what": "x"}
    assert cachestore.store(key, Point(3, "a"), [], str(tmp_path), prefix="t")
    (entry,) = tmp_path.iterdir()
    assert entry.name == f"t-{cachestore.digest(key)}.entry"
    assert entry.stat().st_mode & 0o777 == 0o600
    assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="t") == Point(3, "a")
    # another prefix or another key: not found
    assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="u") is None
    assert cachestore.lookup({"format": 1}, TYPES, str(tmp_path), prefix="t") is None


def test_a_changed_source_directory_makes_it_stale(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    store = tmp_path / "store"
    assert cachestore.store({"k": 1}, "v", [str(source)], str(store), create=True, prefix="t")
    assert cachestore.lookup({"k": 1}, {}, str(store), prefix="t") == "v"
    (source / "new").write_bytes(b"")
    assert cachestore.lookup({"k": 1}, {}, str(store), prefix="t") is None


def test_a_source_directory_on_another_file_system_makes_it_stale(tmp_path: Path) -> None:
    """A file system mounted on a source directory may have a root of the same inode
    number and mtime (a fresh tmpfs or ext4 root is inode 1 or 2): the device number
    tells them apart."""
    source = tmp_path / "src"
    source.mkdir()
    store = tmp_path / "store"
    assert cachestore.store({"k": 1}, "v", [str(source)], str(store), create=True, prefix="t")
    real_stat = os.stat

    def mounted(path: str, *args: Any, **kwargs: Any) -> os.stat_result:
        st = real_stat(path, *args, **kwargs)
        if str(path) != str(source):
            return st
        fields = list(st[:10])
        fields[2] = st.st_dev + 1  # st_dev
        extra = {n: getattr(st, n) for n in ("st_atime_ns", "st_mtime_ns", "st_ctime_ns")}
        return os.stat_result(fields, extra)

    with mock.patch.object(cachestore.os, "stat", mounted):
        assert cachestore.lookup({"k": 1}, {}, str(store), prefix="t") is None
    assert cachestore.lookup({"k": 1}, {}, str(store), prefix="t") == "v"


def test_no_directory_nothing_written(tmp_path: Path) -> None:
    missing = tmp_path / "none"
    assert not cachestore.store({"k": 1}, "v", [], str(missing), prefix="t")
    assert not missing.exists()
    assert cachestore.lookup({"k": 1}, {}, str(missing), prefix="t") is None


def test_entries_writable_by_others_are_not_used(tmp_path: Path) -> None:
    key = {"x": 1}
    assert cachestore.store(key, ("a",), [], str(tmp_path), create=True, prefix="t")
    (entry,) = tmp_path.iterdir()
    entry.chmod(0o666)
    assert cachestore.lookup(key, {}, str(tmp_path), prefix="t") is None
    entry.chmod(0o600)
    tmp_path.chmod(0o777)
    try:
        assert cachestore.lookup(key, {}, str(tmp_path), prefix="t") is None
        assert not cachestore.store(key, ("b",), [], str(tmp_path), prefix="t")
    finally:
        tmp_path.chmod(0o755)
    assert cachestore.lookup(key, {}, str(tmp_path), prefix="t") == ("a",)
    assert cachestore.owned_and_private(os.stat(entry))


def test_the_directory_is_bounded_per_prefix(tmp_path: Path) -> None:
    assert cachestore.store({"other": 1}, 1, [], str(tmp_path), create=True, prefix="u")
    os.utime(tmp_path / f"u-{cachestore.digest({'other': 1})}.entry", ns=(0, 0))  # the oldest
    for i in range(cachestore.MAX_ENTRIES + 5):
        assert cachestore.store({"i": i}, i, [], str(tmp_path), create=True, prefix="t")
        written = tmp_path / f"t-{cachestore.digest({'i': i})}.entry"
        os.utime(written, ns=(i + 1, i + 1))  # older entries: older mtimes
    names = [p.name for p in tmp_path.iterdir()]
    assert len([n for n in names if n.startswith("t-")]) == cachestore.MAX_ENTRIES
    last = cachestore.MAX_ENTRIES + 4
    assert cachestore.lookup({"i": last}, {}, str(tmp_path), prefix="t") == last
    assert cachestore.lookup({"other": 1}, {}, str(tmp_path), prefix="u") == 1


def test_entries_of_the_json_layout_are_not_read_and_go_at_the_next_write(
    tmp_path: Path,
) -> None:
    key = {"format": 1, "what": "x"}
    old = tmp_path / f"t-{cachestore.digest(key)}.json"
    old.write_text('{"key":{"format":1,"what":"x"},"dirs":[],"value":3}')
    old.chmod(0o600)
    other = tmp_path / "u-0000000000000000.json"  # another prefix: left alone
    other.write_text("{}")
    assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="t") is None
    assert cachestore.store(key, 4, [], str(tmp_path), prefix="t")
    assert not old.exists() and other.exists()
    assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="t") == 4


@pytest.mark.parametrize(
    "damage",
    ["empty", "truncated", "garbage", "other format", "not a tuple", "code object"],
)
def test_damaged_entries_are_a_miss(tmp_path: Path, damage: str) -> None:
    key = {"format": 1, "what": "x"}
    assert cachestore.store(key, (Point(1, "a"), [2.5, None]), [], str(tmp_path), prefix="t")
    (entry,) = tmp_path.iterdir()
    raw = entry.read_bytes()
    form, key_text, dirs, value = marshal.loads(raw)
    damaged = {
        "empty": b"",
        "truncated": raw[: len(raw) // 2],
        "garbage": b"\xff\x00not marshal",
        "other format": marshal.dumps(("ocihook-cachestore-1", key_text, dirs, value)),
        "not a tuple": marshal.dumps([form, key_text, dirs, value]),
        "code object": marshal.dumps((form, key_text, dirs, compile("1", "x", "eval"))),
    }[damage]
    entry.write_bytes(damaged)
    assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="t") is None


class Checked(Record):
    """A record whose constructor refuses a negative field."""

    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise AttributeError("negative")


@pytest.mark.parametrize(
    "data",
    [
        (4, ("ab",)),  # a mapping item that is a string of two characters, not a pair
        (1.0, ()),  # a tag that is not an int
        (False, ()),
        float("nan"),
        (1, (float("inf"),)),
        (0, "Checked", (-1,)),  # refused by its __post_init__ (AttributeError)
        (1, (), ()),  # a container with a third item
    ],
)
def test_decode_refuses_what_encode_never_writes(data: object) -> None:
    with pytest.raises(ValueError):
        cachestore.decode(data, {**TYPES, "Checked": Checked})


def test_a_value_is_decoded_within_its_budget() -> None:
    """Containers that refer to each other (marshal can write a DAG whose expansion is
    2**n values in a few hundred bytes) are refused once more values than the budget are
    built, not expanded."""
    node: object = (1, ())
    for _ in range(40):
        node = (1, (node, node))
    raw = marshal.dumps(node)
    assert len(raw) < 1000
    with pytest.raises(ValueError, match="more values"):
        cachestore.decode(marshal.loads(raw), TYPES, budget=len(raw))
    value = (Point(1, "a"), [2.5, None], frozenset({"x"}), {"k": (1,)})
    encoded = marshal.dumps(cachestore.encode(value))
    assert cachestore.decode(marshal.loads(encoded), TYPES, budget=len(encoded)) == value


def test_an_entry_that_expands_too_far_or_exhausts_memory_is_a_miss(tmp_path: Path) -> None:
    key = {"format": 1, "what": "x"}
    assert cachestore.store(key, 1, [], str(tmp_path), prefix="t")
    (entry,) = tmp_path.iterdir()
    form, key_text, dirs, _value = marshal.loads(entry.read_bytes())
    node: object = (1, ())
    for _ in range(40):
        node = (1, (node, node))
    entry.write_bytes(marshal.dumps((form, key_text, dirs, node)))
    assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="t") is None
    assert cachestore.store(key, 1, [], str(tmp_path), prefix="t")
    with mock.patch("marshal.loads", side_effect=MemoryError):
        assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="t") is None
    assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="t") == 1


def test_a_fifo_at_an_entry_is_not_waited_on(tmp_path: Path) -> None:
    key = {"format": 1, "what": "x"}
    os.mkfifo(tmp_path / f"t-{cachestore.digest(key)}.entry", 0o600)
    assert cachestore.lookup(key, TYPES, str(tmp_path), prefix="t") is None


def test_pruning_one_prefix_leaves_a_longer_prefix_alone(tmp_path: Path) -> None:
    for i in range(3):
        assert cachestore.store({"i": i}, i, [], str(tmp_path), prefix="runtime-version")
    for i in range(3):
        cachestore.store({"j": i}, i, [], str(tmp_path), prefix="runtime", max_entries=1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert sum(n.startswith("runtime-version-") for n in names) == 3
    assert len(names) == 4


def test_a_value_nested_too_deeply_is_not_stored(tmp_path: Path) -> None:
    deep: object = 0
    for _ in range(5000):
        deep = (deep,)
    assert not cachestore.store({"k": 1}, deep, [], str(tmp_path), prefix="t")
    assert not list(tmp_path.iterdir())


def test_a_dead_writers_temporary_file_goes_at_the_next_write(tmp_path: Path) -> None:
    name = f"t-{cachestore.digest({'i': 1})}.entry"
    gone = tmp_path / f"{name}.999999999.tmp"  # above pid_max: no such process
    live = tmp_path / f"{name}.{os.getppid()}.tmp"  # a running process's
    for p in (gone, live):
        p.write_bytes(b"partial")
    assert cachestore.store({"i": 2}, 2, [], str(tmp_path), prefix="t")
    assert not gone.exists() and live.exists()


# -- whose store: store_dir ---------------------------------------------------------------

_map_lines = st.lists(
    st.tuples(st.integers(0, 1 << 32), st.integers(0, 1 << 32), st.integers(1, 1 << 32)),
    max_size=5,
)


@given(_map_lines, st.integers(0, 1 << 32))
def test_host_uid_follows_the_first_range_holding_the_id(
    lines: list[tuple[int, int, int]], euid: int
) -> None:
    """user_namespaces(7): ``INSIDE OUTSIDE COUNT`` maps ``INSIDE..INSIDE+COUNT-1`` to
    ``OUTSIDE...``; an id no line holds is unmapped (None)."""
    text = "".join(f"{a:>10} {b:>10} {c:>10}\n" for a, b, c in lines).encode()
    want = next((b + euid - a for a, b, c in lines if a <= euid < a + c), None)
    assert cachestore.host_uid(euid, text) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (b"         0          0 4294967295\n", 0),  # the initial namespace
        (b"         0       1000          1\n", 1000),  # root of a rootless engine
        (b"         0       1000          1\n         1     100000      65536\n", 1000),
        (b"      1000       1000          1\n", None),  # root not mapped
        (b"garbage\n0 x 1\n", None),
    ],
)
def test_host_uid_of_root(text: bytes, want: int | None) -> None:
    assert cachestore.host_uid(0, text) == want


def _uid_map(tmp_path: Path, outside: int) -> str:
    """A uid_map mapping this process's effective user to ``outside`` on the host."""
    path = tmp_path / "uid_map"
    path.write_text(f"{os.geteuid()} {outside} 1\n")
    return str(path)


def test_root_of_the_host_keeps_roots_store(tmp_path: Path) -> None:
    """Root of the host: /run/ocihook (the boot unit's), even with a runtime directory of
    its own."""
    runtime = tmp_path / "run-user"
    (runtime / "0").mkdir(parents=True, mode=0o700)
    got = cachestore.store_dir(uid_map=_uid_map(tmp_path, 0), runtime_dir=str(runtime))
    assert got == cachestore.DEFAULT_DIR
    assert not (runtime / "0" / "ocihook").exists()


def test_another_user_gets_a_private_store_of_its_own(tmp_path: Path) -> None:
    """An unprivileged user, or root of a user namespace mapped to one (rootless podman):
    ``<runtime dir>/<host uid>/ocihook``, made with mode 0700 at the first call, used
    as is at the next; entries stored there are found again."""
    runtime = tmp_path / "run-user"
    (runtime / "1000").mkdir(parents=True, mode=0o700)
    args = {"uid_map": _uid_map(tmp_path, 1000), "runtime_dir": str(runtime)}
    got = cachestore.store_dir(**args)
    assert got == str(runtime / "1000" / "ocihook")
    assert oct(os.stat(got).st_mode & 0o7777) == oct(0o700)
    assert cachestore.store_dir(**args) == got
    assert cachestore.store({"k": 1}, ("v",), (), got, prefix="t")
    assert cachestore.lookup({"k": 1}, {}, got, prefix="t") == ("v",)


@pytest.mark.parametrize("case", ["missing", "group-readable", "another owner", "a file"])
def test_no_usable_runtime_directory_no_user_store(tmp_path: Path, case: str) -> None:
    """A runtime directory that is missing, open to the group or others, someone else's
    or no directory: nothing is made; /run/ocihook is answered, where nothing of this
    user's is kept."""
    runtime = tmp_path / "run-user"
    runtime.mkdir()
    parent = runtime / "1000"
    if case == "a file":
        parent.write_text("")
    elif case != "missing":
        parent.mkdir(mode=0o700)
        if case == "group-readable":
            parent.chmod(0o750)
        else:
            os.chown(parent, os.geteuid() + 1, -1)
    got = cachestore.store_dir(uid_map=_uid_map(tmp_path, 1000), runtime_dir=str(runtime))
    assert got == cachestore.DEFAULT_DIR
    assert not (parent / "ocihook").exists() or case == "a file"


def test_an_unmapped_user_or_no_procfs(tmp_path: Path) -> None:
    """A euid the map does not hold: no user store; no uid_map to read (no procfs): the
    euid is the host's."""
    runtime = tmp_path / "run-user"
    (runtime / str(os.geteuid())).mkdir(parents=True, mode=0o700)
    unmapped = tmp_path / "unmapped"
    unmapped.write_text(f"{os.geteuid() + 1} 5000 1\n")
    got = cachestore.store_dir(uid_map=str(unmapped), runtime_dir=str(runtime))
    assert got == cachestore.DEFAULT_DIR
    got = cachestore.store_dir(uid_map=str(tmp_path / "none"), runtime_dir=str(runtime))
    mine = str(runtime / str(os.geteuid()) / "ocihook")
    assert got == (cachestore.DEFAULT_DIR if os.geteuid() == 0 else mine)


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_file_or_link_at_the_user_store_turns_it_off(tmp_path: Path, kind: str) -> None:
    """``touch /run/user/<uid>/ocihook`` turns a user's store off; a link there is never
    followed into a store."""
    runtime = tmp_path / "run-user"
    (runtime / "1000").mkdir(parents=True, mode=0o700)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    at = runtime / "1000" / "ocihook"
    if kind == "file":
        at.write_text("")
    else:
        at.symlink_to(elsewhere)
    got = cachestore.store_dir(uid_map=_uid_map(tmp_path, 1000), runtime_dir=str(runtime))
    assert got == cachestore.DEFAULT_DIR


@pytest.mark.parametrize(
    ("outside", "runtime_dir_made", "want"),
    [(0, True, "default"), (1000, True, "user"), (1000, False, None)],
)
def test_own_store_is_the_one_warm_cache_fills(
    tmp_path: Path, outside: int, runtime_dir_made: bool, want: str | None
) -> None:
    """``own_store`` (what ``cdi generate --warm-cache`` fills): root's /run/ocihook for
    the host's root, the user's own store for anyone else, and none (``None``, not
    root's) for a user without a runtime directory of their own, or for root of a
    namespace that maps root to the host's root alone (``0 0 1``)."""
    runtime = tmp_path / "run-user"
    if runtime_dir_made:
        (runtime / str(outside)).mkdir(parents=True, mode=0o700)
    uid_map = _uid_map(tmp_path, outside)
    if outside == 0 and os.geteuid() == 0:  # root of the host: the identity map
        Path(uid_map).write_text("         0          0 4294967295\n")
    got = cachestore.own_store(uid_map=uid_map, runtime_dir=str(runtime))
    expected = {"default": cachestore.DEFAULT_DIR, "user": str(runtime / "1000" / "ocihook")}
    assert got == (None if want is None else expected[want])


def test_a_users_module_image_is_installed_from_their_own_store(tmp_path: Path) -> None:
    """``install_user_module_image``: the image written into the user's own store (by
    ``cdi generate --warm-cache`` as that user) serves the start path's modules; without
    a store of the user's own, nothing is installed (root's image is not theirs). Run in a
    fresh interpreter: an installed finder stays for the process's life."""
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    program = f"""
import sys
from ocihook.core import modimage
from ocihook.core.startpath import START_PATH_MODULES
from ocihook.linux import cachestore
assert modimage.write_image(START_PATH_MODULES, {str(store)!r})
cachestore.store_dir = lambda: cachestore.DEFAULT_DIR
print(cachestore.install_user_module_image())
cachestore.store_dir = lambda: {str(store)!r}
print(cachestore.install_user_module_image())
import ocihook.linux.pathsafe
print(type(ocihook.linux.pathsafe.__spec__.loader).__name__)
"""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", program], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True", "ImageLoader"]


def _status(
    tmp_path: Path,
    permitted: int,
    inheritable: int = 0,
    fs: tuple[int, int] = (7, 7),
    ids: tuple[int, int] = (7, 7),
) -> str:
    path = tmp_path / "status"
    u, g = ids
    path.write_text(
        f"Name:\tpython3\nUid:\t{u}\t{u}\t{u}\t{fs[0]}\nGid:\t{g}\t{g}\t{g}\t{fs[1]}\n"
        f"CapInh:\t{inheritable:016x}\nCapPrm:\t{permitted:016x}\n"
        "CapEff:\t0000000000000000\nCapAmb:\t0000000000000000\n"
    )
    return str(path)


def _kernel(tmp_path: Path) -> dict[str, str]:
    """The overflow ids and identity uid and gid maps (the initial namespace)."""
    d = tmp_path / "kernel"
    d.mkdir(exist_ok=True)
    (d / "overflowuid").write_text("65534\n")
    (d / "overflowgid").write_text("65534\n")
    (d / "map").write_text("         0          0 4294967295\n")
    return {"overflow_dir": str(d), "uid_map": str(d / "map"), "gid_map": str(d / "map")}


@pytest.mark.parametrize(
    ("resuid", "resgid", "groups", "caps", "fs", "want"),
    [
        ((7, 7, 7), (7, 7, 7), [], (0, 0), (7, 7), True),
        ((7, 7, 7), (7, 7, 7), [7, 20], (0, 0), (7, 7), True),  # the user's own groups
        ((7, 7, 7), (20, 20, 20), [], (0, 0), (7, 20), True),  # newgrp to one of them
        ((0, 7, 7), (7, 7, 7), [], (0, 0), (7, 7), False),  # root lowered to an effective user
        ((7, 7, 0), (7, 7, 7), [], (0, 0), (7, 7), False),  # a saved root id
        ((7, 7, 7), (7, 0, 7), [], (0, 0), (7, 7), False),  # setgid root
        ((7, 7, 7), (42, 42, 42), [], (0, 0), (7, 42), False),  # a group not the user's
        ((7, 7, 7), (7, 7, 7), [], (1 << 1, 0), (7, 7), False),  # CAP_DAC_OVERRIDE permitted
        ((7, 7, 7), (7, 7, 7), [], (0, 1 << 1), (7, 7), False),  # ... inheritable
        ((7, 7, 7), (7, 7, 7), [0], (0, 0), (7, 7), False),  # root's group kept
        ((7, 7, 7), (7, 7, 7), [], (0, 0), (0, 7), False),  # setfsuid(0)
        ((7, 7, 7), (7, 7, 7), [], (0, 0), (7, 42), False),  # setfsgid(42)
        ((65534,) * 3, (7, 7, 7), [], (0, 0), (65534, 7), False),  # an unmapped id
        ((7, 7, 7), (7, 7, 7), [65534], (0, 0), (7, 7), False),  # ... an unmapped group
    ],
)
def test_only_the_users_privileges(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    resuid: tuple[int, int, int],
    resgid: tuple[int, int, int],
    groups: list[int],
    caps: tuple[int, int],
    fs: tuple[int, int],
    want: bool,
) -> None:
    """A process may use the user's store only with that user's privileges alone: ids
    alike (real, effective, saved, file-system) and mapped, every group one the user is a
    member of, no capability (permitted or inheritable) unless in a user namespace the
    user made (here the initial namespace, made by root: not the user's)."""
    monkeypatch.setattr(os, "getresuid", lambda: resuid)
    monkeypatch.setattr(os, "getresgid", lambda: resgid)
    monkeypatch.setattr(os, "geteuid", lambda: resuid[1])
    monkeypatch.setattr(os, "getgroups", lambda: groups)
    user = types.SimpleNamespace(pw_name="u7", pw_gid=7)
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: user if uid == 7 else None)
    monkeypatch.setattr(os, "getgrouplist", lambda name, gid: [gid, 20] if name == "u7" else [])
    status = _status(tmp_path, *caps, fs=fs, ids=(resuid[1], resgid[1]))
    got = cachestore.only_the_users_privileges(status, **_kernel(tmp_path))
    assert got is want


def test_no_status_no_privilege_check_passes(tmp_path: Path) -> None:
    assert not cachestore.only_the_users_privileges(str(tmp_path / "missing"))
    (tmp_path / "odd").write_text("CapPrm:\tzz\n")
    assert not cachestore.only_the_users_privileges(str(tmp_path / "odd"))


def test_root_of_a_partial_identity_namespace_fills_no_store(tmp_path: Path) -> None:
    """Root of a user namespace mapped to the host's root alone (``0 0 1``; one nested in
    a rootless namespace looks so too): ``own_store`` is ``None``, not root's store."""
    if os.geteuid() != 0:
        pytest.skip("root's effective id is what this maps")
    uid_map = tmp_path / "uid_map"
    uid_map.write_text("0 0 1\n")
    got = cachestore.own_store(uid_map=str(uid_map), runtime_dir=str(tmp_path / "none"))
    assert got is None


def test_more_than_the_users_privileges_no_user_store(tmp_path: Path) -> None:
    """A runtime directory of the user's, but a process with capabilities the user lacks
    (the status says so; the initial namespace is not the user's): no user store."""
    runtime = tmp_path / "run-user"
    (runtime / "1000").mkdir(parents=True, mode=0o700)
    args = {"uid_map": _uid_map(tmp_path, 1000), "runtime_dir": str(runtime)}
    got = cachestore.store_dir(**args, status=str(tmp_path / "no-status"))
    assert got == cachestore.DEFAULT_DIR
    assert not (runtime / "1000" / "ocihook").exists()
    assert cachestore.own_store(**args, status=str(tmp_path / "no-status")) is None


def test_host_root_is_root_of_the_initial_user_namespace() -> None:
    """``modimage.host_root``: effective user 0 with the identity uid_map; any other user,
    and root of a user namespace (``unshare -Ur``), is not."""
    code = "from ocihook.core import modimage; print(modimage.host_root())"
    here = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, cwd=REPO
    )
    assert here.stdout.split() == [str(os.geteuid() == 0 and _initial_namespace())], here.stderr
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    inside = subprocess.run(
        ["unshare", "-Ur", sys.executable, "-I", "-c", code],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if inside.returncode != 0 and "unshare" in inside.stderr:
        pytest.skip(f"no user namespace here: {inside.stderr.strip()}")
    assert inside.stdout.split() == ["False"], inside.stderr


def _initial_namespace() -> bool:
    with open("/proc/self/uid_map", "rb") as f:
        return f.read().split() == [b"0", b"0", b"4294967295"]


def test_a_short_write_stores_nothing(tmp_path: Path) -> None:
    """A file system that fills up part way through an entry (a write that writes part,
    then ENOSPC) leaves no entry and no temporary file; the whole entry is written when
    each write takes only part of it."""
    real_write = os.write
    calls = []

    def part_then_full(fd: int, data: Any) -> int:
        calls.append(len(data))
        if len(calls) > 1:
            raise OSError(28, "No space left on device")
        return real_write(fd, bytes(data[:100]))

    with mock.patch("os.write", part_then_full):
        assert not cachestore.store({"k": 1}, "v" * 5000, (), str(tmp_path), prefix="t")
    assert calls[0] > 100 and os.listdir(tmp_path) == []

    def a_bit_each(fd: int, data: Any) -> int:
        return real_write(fd, bytes(data[:700]))

    with mock.patch("os.write", a_bit_each):
        assert cachestore.store({"k": 1}, "v" * 5000, (), str(tmp_path), prefix="t")
    assert cachestore.lookup({"k": 1}, {}, str(tmp_path), prefix="t") == "v" * 5000
