"""Tests of ocihook.linux.pathsafe against hostile container root file systems.

Every tree lives in a temporary directory: ``rootfs/`` is the container root and ``host/``
next to it stands for the host ("the victim"); the image's links try to reach it with
absolute targets, ``..`` climbs, chains, loops, final-component links and files where
directories should be. Every operation runs twice, once with openat2 and once with the
user-space walk forced (openat2 made to answer ENOSYS), and must either act inside
``rootfs/`` or raise ApplyError -- while everything outside ``rootfs/`` stays byte-for-byte
and entry-for-entry as it was.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ocihook.core.errors import ApplyError, DiscoveryError
from ocihook.linux import pathsafe
from ocihook.linux import syscalls as _linux
from ocihook.linux.mounttargets import mount_targets_in_root


def _can_mknod() -> bool:
    """Whether this process may make character devices (CAP_MKNOD)."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            os.mknod(os.path.join(tmp, "null"), stat.S_IFCHR | 0o600, os.makedev(1, 3))
        except PermissionError:
            return False
    return True


CAN_MKNOD = _can_mknod()
LIB = "/usr/lib/x86_64-linux-gnu"


# --- helpers ----------------------------------------------------------------------------------


def _openat2_works() -> bool:
    try:
        fd = _linux.openat2(_linux.AT_FDCWD, ".", os.O_PATH | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ENOSYS:
            return False
        raise
    os.close(fd)
    return True


@contextlib.contextmanager
def resolver_mode(mode: str) -> Iterator[list[tuple[Any, ...]]]:
    """Run the body with openat2 (``"openat2"``) or with it answering ENOSYS
    (``"fallback"``); yields the list of openat2 calls made while forced."""
    calls: list[tuple[Any, ...]] = []
    real = _linux.openat2

    def no_openat2(*args: Any) -> int:
        calls.append(args)
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    saved = pathsafe._openat2_missing
    pathsafe._openat2_missing = False
    if mode == "fallback":
        _linux.openat2 = no_openat2  # type: ignore[assignment]
    try:
        yield calls
    finally:
        _linux.openat2 = real
        pathsafe._openat2_missing = saved


@pytest.fixture(params=["openat2", "fallback"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "openat2" and not _openat2_works():
        pytest.skip("this kernel has no openat2 (ENOSYS): only the fallback can run")
    with resolver_mode(request.param):
        yield request.param


def fd_path(fd: int) -> str:
    return os.readlink(f"/proc/self/fd/{fd}")


def inside(path: str, root: Path) -> bool:
    return path == str(root) or path.startswith(str(root) + "/")


Snapshot = dict[str, tuple[Any, ...]]


def snapshot(top: Path, skip: Path | None = None) -> Snapshot:
    """Every entry under ``top`` (except ``skip``): inode, type, mode, owner, size, and
    the contents of files, targets of links, device numbers, sorted listings of dirs."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
        if skip is not None and Path(dirpath) == skip:
            dirnames[:] = []
            continue
        for name in [".", *dirnames, *filenames]:
            path = os.path.normpath(os.path.join(dirpath, name))
            if skip is not None and Path(path) == skip:
                out[path] = ("rootfs",)
                continue
            st_ = os.lstat(path)
            if stat.S_ISLNK(st_.st_mode):
                extra: Any = os.readlink(path)
            elif stat.S_ISREG(st_.st_mode):
                extra = Path(path).read_bytes()
            elif stat.S_ISDIR(st_.st_mode):
                extra = tuple(sorted(os.listdir(path)))
            else:
                extra = st_.st_rdev
            # not st_nlink: removing the rootfs's name of a hard-linked host file is fine
            out[path] = (st_.st_ino, st_.st_mode, st_.st_uid, st_.st_gid, st_.st_size, extra)
    return out


# --- the hostile worlds -----------------------------------------------------------------------


@dataclass
class World:
    tmp: Path
    rootfs: Path
    host: Path
    root_fd: int
    case: str = ""
    #: container paths the operations use for the library dir, /etc and /dev
    lib: str = LIB
    etc: str = "/etc"
    dev: str = "/dev"

    def outside(self) -> Snapshot:
        return snapshot(self.tmp, skip=self.rootfs)


def _host_rel(path: Path) -> str:
    return str(path).lstrip("/")


def case_plain(w: World) -> None:
    """A benign image: the operations must simply work."""
    (w.rootfs / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (w.rootfs / "etc").mkdir()
    (w.rootfs / "dev").mkdir()


def case_abs_link(w: World) -> None:
    """lib dir, /etc and /dev are absolute links to host directories."""
    (w.rootfs / "usr/lib").mkdir(parents=True)
    (w.rootfs / "usr/lib/x86_64-linux-gnu").symlink_to(w.host / "lib")
    (w.rootfs / "etc").symlink_to(w.host / "etc")
    (w.rootfs / "dev").symlink_to(w.host / "dev")


def case_rel_climb(w: World) -> None:
    """Relative links with exactly enough ``..`` to climb from rootfs/ into host/."""
    (w.rootfs / "usr/lib").mkdir(parents=True)
    (w.rootfs / "usr/lib/x86_64-linux-gnu").symlink_to("../../../host/lib")
    (w.rootfs / "etc").symlink_to("../host/etc")
    (w.rootfs / "dev").symlink_to("../host/dev")


def case_rel_climb_deep(w: World) -> None:
    """Relative links with far too many ``..`` and then the host's absolute path."""
    (w.rootfs / "usr/lib").mkdir(parents=True)
    up = "../" * 30
    (w.rootfs / "usr/lib/x86_64-linux-gnu").symlink_to(up + _host_rel(w.host / "lib"))
    (w.rootfs / "etc").symlink_to(up + _host_rel(w.host / "etc"))
    (w.rootfs / "dev").symlink_to(up + _host_rel(w.host / "dev"))


def case_chain(w: World) -> None:
    """A chain of links (absolute, relative, clamped ``..``) whose last one leaves."""
    (w.rootfs / "usr/lib").mkdir(parents=True)
    (w.rootfs / "usr/lib/x86_64-linux-gnu").symlink_to("/a")
    (w.rootfs / "a").symlink_to("../b")
    (w.rootfs / "b").symlink_to("c/../d")
    (w.rootfs / "c").mkdir()
    (w.rootfs / "d").symlink_to("/../../../" + _host_rel(w.host / "lib"))
    (w.rootfs / "etc").symlink_to("e1")
    (w.rootfs / "e1").symlink_to("/e2")
    (w.rootfs / "e2").symlink_to(w.host / "etc")
    (w.rootfs / "dev").symlink_to("d1")
    (w.rootfs / "d1").symlink_to("../" * 8 + _host_rel(w.host / "dev"))


def case_loop(w: World) -> None:
    """Link loops: two links pointing at each other, a self loop, a loop through ``..``."""
    (w.rootfs / "usr/lib").mkdir(parents=True)
    (w.rootfs / "usr/lib/x86_64-linux-gnu").symlink_to("loop2")
    (w.rootfs / "usr/lib/loop2").symlink_to("x86_64-linux-gnu")
    (w.rootfs / "etc").symlink_to("/etc")
    (w.rootfs / "dev").symlink_to("/usr/../dev")


def case_final_link(w: World) -> None:
    """Real directories, but the final components are links to host files (absolute,
    relative climbing, dangling to a host name that does not exist yet)."""
    lib = w.rootfs / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.1").symlink_to(w.host / "lib/libcuda.so.1")
    (lib / "libcuda.so").symlink_to("../../../../host/lib/libvictim.so")
    (lib / "libnvidia-ml.so.1").symlink_to(w.host / "lib/libnvidia-ml.so.1")  # dangling
    (lib / "libnew.so").symlink_to(w.host / "lib/libnew.so")  # dangling
    (lib / "nvidia").symlink_to(w.host / "lib")
    (w.rootfs / "etc").mkdir()
    (w.rootfs / "etc/ld.so.cache").symlink_to(w.host / "etc/ld.so.cache")
    (w.rootfs / "dev").mkdir()
    (w.rootfs / "dev/nvidia0").symlink_to(w.host / "dev/nvidia0")


def case_dangling_dir(w: World) -> None:
    """Directory links to host directories that do not exist yet (making them would create
    host directories)."""
    (w.rootfs / "usr/lib").mkdir(parents=True)
    (w.rootfs / "usr/lib/x86_64-linux-gnu").symlink_to(w.host / "newlib/sub")
    (w.rootfs / "etc").symlink_to("../host/newetc")
    (w.rootfs / "dev").symlink_to(w.host / "newdev")


def case_dotdot_request(w: World) -> None:
    """A benign tree, but the requested paths themselves climb with ``..``."""
    case_plain(w)
    w.lib = "/usr/lib/../../../host/lib"
    w.etc = "../host/etc"
    w.dev = "/" + "../" * 12 + _host_rel(w.host / "dev")


def case_dev_link(w: World) -> None:
    """Only /dev is hostile: an absolute link to the host's /dev stand-in."""
    (w.rootfs / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (w.rootfs / "etc").mkdir()
    (w.rootfs / "dev").symlink_to(w.host / "dev")


def case_file_as_dir(w: World) -> None:
    """Regular files where directories are expected."""
    (w.rootfs / "usr/lib").mkdir(parents=True)
    (w.rootfs / "usr/lib/x86_64-linux-gnu").write_bytes(b"not a directory")
    (w.rootfs / "etc").write_bytes(b"not a directory")
    (w.rootfs / "dev").write_bytes(b"not a directory")


def case_link_to_root(w: World) -> None:
    """Links to ``/`` and ``..`` at the top: they must land on the rootfs itself."""
    (w.rootfs / "usr/lib").mkdir(parents=True)
    (w.rootfs / "usr/lib/x86_64-linux-gnu").symlink_to("/")
    (w.rootfs / "etc").symlink_to("..")
    (w.rootfs / "dev").symlink_to("/..")


def case_hardlink(w: World) -> None:
    """Final components that are hard links to host files (same inode): nothing may be
    written through them."""
    lib = w.rootfs / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    os.link(w.host / "lib/libcuda.so.1", lib / "libcuda.so.1")
    os.link(w.host / "lib/libvictim.so", lib / "libcuda.so")
    (w.rootfs / "etc").mkdir()
    os.link(w.host / "etc/ld.so.cache", w.rootfs / "etc/ld.so.cache")
    (w.rootfs / "dev").mkdir()


CASES: dict[str, Callable[[World], None]] = {
    "plain": case_plain,
    "abs_link": case_abs_link,
    "rel_climb": case_rel_climb,
    "rel_climb_deep": case_rel_climb_deep,
    "chain": case_chain,
    "loop": case_loop,
    "final_link": case_final_link,
    "dangling_dir": case_dangling_dir,
    "dotdot_request": case_dotdot_request,
    "dev_link": case_dev_link,
    "file_as_dir": case_file_as_dir,
    "link_to_root": case_link_to_root,
    "hardlink": case_hardlink,
}


def build_world(tmp: Path, case: str) -> World:
    host = tmp / "host"
    for sub, files in {
        "lib": {"libvictim.so": b"host library", "libcuda.so.1": b"host libcuda"},
        "etc": {"ld.so.cache": b"host ld.so.cache", "passwd": b"root:x:0:0::/root:/bin/sh\n"},
        "dev": {"nvidia0": b"host device stand-in", "null": b""},
    }.items():
        (host / sub).mkdir(parents=True)
        for name, data in files.items():
            (host / sub / name).write_bytes(data)
    rootfs = tmp / "rootfs"
    rootfs.mkdir()
    w = World(tmp=tmp, rootfs=rootfs, host=host, root_fd=-1, case=case)
    CASES[case](w)
    w.root_fd = pathsafe.open_root(str(rootfs))
    return w


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[World]:
    w = build_world(tmp_path, request.param)
    yield w
    os.close(w.root_fd)


# --- the operations ---------------------------------------------------------------------------


def _located(w: World, path: str) -> str:
    """Where ``path`` is, found through the descriptor API (a link is not followed)."""
    fd = pathsafe.open_in_root(w.root_fd, path, os.O_PATH | os.O_NOFOLLOW)
    try:
        return fd_path(fd)
    finally:
        os.close(fd)


def _check_fd(w: World, fd: int, path: str) -> None:
    try:
        where = fd_path(fd)
        assert inside(where, w.rootfs), where
        # the pure resolver, run now that the path exists, agrees
        assert pathsafe.resolve_in_root(str(w.rootfs), path) == where
    finally:
        os.close(fd)


def op_open_read(w: World) -> None:
    path = w.lib + "/libcuda.so.1"
    fd = pathsafe.open_in_root(w.root_fd, path, os.O_RDONLY)
    _check_fd(w, fd, path)


def op_open_create(w: World) -> None:
    os.close(pathsafe.makedirs_in_root(w.root_fd, w.lib))
    path = w.lib + "/libnew.so"
    fd = pathsafe.open_in_root(w.root_fd, path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"written by the test")
    _check_fd(w, fd, path)


def op_makedirs(w: World) -> None:
    path = w.lib + "/nvidia/xorg"
    fd = pathsafe.makedirs_in_root(w.root_fd, path)
    assert stat.S_ISDIR(os.fstat(fd).st_mode)
    _check_fd(w, fd, path)


def op_create_file_existing(w: World) -> None:
    path = w.lib + "/libcuda.so.1"
    fd = pathsafe.create_file_in_root(w.root_fd, path)
    assert stat.S_ISREG(os.fstat(fd).st_mode)
    _check_fd(w, fd, path)


def op_create_file_new(w: World) -> None:
    path = w.lib + "/libnvidia-ml.so.1"
    fd = pathsafe.create_file_in_root(w.root_fd, path)
    assert stat.S_ISREG(os.fstat(fd).st_mode)
    _check_fd(w, fd, path)


def op_symlink(w: World) -> None:
    path = w.lib + "/libcuda.so"
    pathsafe.symlink_in_root(w.root_fd, path, "libcuda.so.1")
    where = _located(w, path)
    assert inside(where, w.rootfs)
    assert os.readlink(where) == "libcuda.so.1"


def op_write_file(w: World) -> None:
    path = w.etc + "/ld.so.cache"
    pathsafe.write_file_in_root(w.root_fd, path, b"container cache")
    fd = pathsafe.open_in_root(w.root_fd, path, os.O_RDONLY)
    try:
        assert os.read(fd, 100) == b"container cache"
    finally:
        _check_fd(w, os.dup(fd), path)
        os.close(fd)


def op_mknod(w: World) -> None:
    if not CAN_MKNOD:
        pytest.skip("mknod of a character device needs root (CAP_MKNOD)")
    path = w.dev + "/nvidia0"
    pathsafe.mknod_in_root(w.root_fd, path, stat.S_IFCHR | 0o666, 195, 0)
    where = _located(w, path)
    assert inside(where, w.rootfs)
    st_ = os.lstat(where)
    assert stat.S_ISCHR(st_.st_mode) and st_.st_rdev == os.makedev(195, 0)


def op_remove(w: World) -> None:
    for path in (w.lib + "/libcuda.so.1", w.lib + "/libcuda.so", w.etc + "/ld.so.cache"):
        pathsafe.remove_in_root(w.root_fd, path)


def op_remove_dir(w: World) -> None:
    # the lib dir itself: a link is removed as a link, a directory only when empty
    pathsafe.remove_in_root(w.root_fd, w.lib)


OPS: dict[str, Callable[[World], None]] = {
    "open_read": op_open_read,
    "open_create": op_open_create,
    "makedirs": op_makedirs,
    "create_file_existing": op_create_file_existing,
    "create_file_new": op_create_file_new,
    "symlink": op_symlink,
    "write_file": op_write_file,
    "mknod": op_mknod,
    "remove": op_remove,
    "remove_dir": op_remove_dir,
}

_ALL = set(OPS)
#: The operations expected to raise ApplyError per case; all others must succeed.
EXPECTED_ERRORS: dict[str, set[str]] = {
    "plain": {"open_read"},  # nothing there to read
    # the host directories, re-rooted, do not exist in the rootfs: nothing to read
    "abs_link": {"open_read"},
    "rel_climb": {"open_read"},
    "rel_climb_deep": {"open_read"},
    "chain": {"open_read"},
    "loop": _ALL - {"remove_dir"},  # ELOOP; remove_dir removes the looping link itself
    # a link is never a bind target, nor replaced by a node; libnew.so is a dangling link
    # whose re-rooted parent does not exist; the lib dir is not empty
    "final_link": {
        "open_read",
        "open_create",
        "create_file_existing",
        "create_file_new",
        "mknod",
        "remove_dir",
    },
    "dangling_dir": {"open_read"},
    "dotdot_request": {"open_read"},
    "dev_link": {"open_read"},
    "file_as_dir": _ALL - {"remove_dir"},  # ENOTDIR; remove_dir removes the file
    "link_to_root": {"open_read"},
    # a regular file (libcuda.so) is not replaced by a link; the lib dir is not empty
    "hardlink": {"symlink", "remove_dir"},
}


@pytest.mark.parametrize("op", sorted(OPS))
@pytest.mark.parametrize("world", sorted(CASES), indirect=True)
def test_hostile_rootfs(world: World, op: str, mode: str) -> None:
    """Each operation on each hostile tree: ApplyError where expected, success inside the
    rootfs otherwise (checked by the op), and nothing outside the rootfs touched."""
    before = world.outside()
    fds = os.listdir("/proc/self/fd")
    expected = EXPECTED_ERRORS[world.case]
    try:
        OPS[op](world)
    except ApplyError as err:
        assert op in expected, f"unexpected ApplyError: {err}"
        assert err.path is not None and err.path.startswith("/")
    else:
        assert op not in expected, "expected ApplyError"
    assert world.outside() == before, "something outside the rootfs changed"
    assert sorted(os.listdir("/proc/self/fd")) == sorted(fds), "a descriptor leaked"


# --- resolve_in_root: where each hostile path leads -------------------------------------------


def _rr(w: World, *parts: str | Path) -> str:
    """``rootfs`` joined with parts, absolute host paths re-rooted under it."""
    return os.path.join(str(w.rootfs), *(str(p).lstrip("/") for p in parts))


@pytest.mark.parametrize(
    ("case", "path", "expected"),
    [
        ("plain", LIB + "/libcuda.so.1", lambda w: _rr(w, LIB, "libcuda.so.1")),
        ("abs_link", LIB + "/libcuda.so.1", lambda w: _rr(w, w.host, "lib/libcuda.so.1")),
        ("abs_link", "/dev/nvidia0", lambda w: _rr(w, w.host, "dev/nvidia0")),
        ("rel_climb", LIB + "/libcuda.so.1", lambda w: _rr(w, "host/lib/libcuda.so.1")),
        ("rel_climb", "/etc/passwd", lambda w: _rr(w, "host/etc/passwd")),
        ("rel_climb_deep", LIB + "/x", lambda w: _rr(w, w.host, "lib/x")),
        ("chain", LIB + "/libcuda.so.1", lambda w: _rr(w, w.host, "lib/libcuda.so.1")),
        ("chain", "/etc/ld.so.cache", lambda w: _rr(w, w.host, "etc/ld.so.cache")),
        ("chain", "/dev/nvidia0", lambda w: _rr(w, w.host, "dev/nvidia0")),
        ("final_link", LIB + "/libcuda.so.1", lambda w: _rr(w, w.host, "lib/libcuda.so.1")),
        ("final_link", LIB + "/libcuda.so", lambda w: _rr(w, "host/lib/libvictim.so")),
        ("final_link", LIB + "/nvidia/x", lambda w: _rr(w, w.host, "lib/x")),
        ("dangling_dir", LIB + "/a", lambda w: _rr(w, w.host, "newlib/sub/a")),
        ("dangling_dir", "/etc/a", lambda w: _rr(w, "host/newetc/a")),
        ("dotdot_request", "/usr/lib/../../../host/lib", lambda w: _rr(w, "host/lib")),
        ("dotdot_request", "../../..", lambda w: str(w.rootfs)),
        ("dev_link", "/dev/nvidia0", lambda w: _rr(w, w.host, "dev/nvidia0")),
        ("link_to_root", LIB + "/libcuda.so.1", lambda w: _rr(w, "libcuda.so.1")),
        ("link_to_root", "/etc/etc/etc/x", lambda w: _rr(w, "x")),
        ("link_to_root", "/dev/x", lambda w: _rr(w, "x")),
        ("plain", "usr/./lib//x86_64-linux-gnu/", lambda w: _rr(w, LIB)),
        ("plain", "/missing/../usr/missing2/x", lambda w: _rr(w, "usr/missing2/x")),
    ],
)
def test_resolve_in_root_hostile(
    tmp_path: Path, case: str, path: str, expected: Callable[[World], str]
) -> None:
    w = build_world(tmp_path, case)
    os.close(w.root_fd)
    before = w.outside()
    got = pathsafe.resolve_in_root(str(w.rootfs), path)
    assert got == expected(w)
    assert w.outside() == before


@pytest.mark.parametrize(
    ("case", "path", "code"),
    [
        ("loop", LIB + "/libcuda.so.1", errno.ELOOP),
        ("loop", "/etc", errno.ELOOP),
        ("loop", "/dev/x", errno.ELOOP),
        ("file_as_dir", LIB + "/libcuda.so.1", errno.ENOTDIR),
        ("file_as_dir", "/etc/..", errno.ENOTDIR),
        ("file_as_dir", "/dev/.", errno.ENOTDIR),
    ],
)
def test_resolve_in_root_errors(tmp_path: Path, case: str, path: str, code: int) -> None:
    w = build_world(tmp_path, case)
    os.close(w.root_fd)
    with pytest.raises(DiscoveryError) as info:
        pathsafe.resolve_in_root(str(w.rootfs), path)
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == code
    assert info.value.path == os.path.join(str(w.rootfs), path.lstrip("/"))


def test_resolve_in_root_link_budget(tmp_path: Path) -> None:
    """40 links are followed (the kernel's MAXSYMLINKS), the 41st is ELOOP; max_links
    lowers the budget."""
    root = tmp_path / "r"
    root.mkdir()
    (root / "end").mkdir()
    (root / "l0").symlink_to("end")
    for i in range(1, 41):
        (root / f"l{i}").symlink_to(f"/l{i - 1}")
    assert pathsafe.resolve_in_root(str(root), "l39") == str(root / "end")  # 40 links
    with pytest.raises(DiscoveryError):
        pathsafe.resolve_in_root(str(root), "l40")  # 41 links
    with pytest.raises(DiscoveryError):
        pathsafe.resolve_in_root(str(root), "l2", max_links=2)
    assert pathsafe.resolve_in_root(str(root), "l1", max_links=2) == str(root / "end")
    # the kernel agrees on the budget
    fd = pathsafe.open_root(str(root))
    try:
        os.close(pathsafe.open_in_root(fd, "l39", os.O_PATH))
        with pytest.raises(ApplyError) as info:
            pathsafe.open_in_root(fd, "l40", os.O_PATH)
        assert isinstance(info.value.__cause__, OSError)
        assert info.value.__cause__.errno == errno.ELOOP
    finally:
        os.close(fd)


def test_resolve_in_root_bad_root(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    for root in (tmp_path / "missing", tmp_path / "file"):
        with pytest.raises(DiscoveryError) as info:
            pathsafe.resolve_in_root(str(root), "/x")
        assert info.value.path == str(root)


def test_resolve_in_root_relative_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r/a").mkdir(parents=True)
    (tmp_path / "r/l").symlink_to("/a")
    monkeypatch.chdir(tmp_path)
    assert pathsafe.resolve_in_root("r", "l/../../x") == str(tmp_path / "r/x")


# --- descriptor operations: exact behaviour -------------------------------------------------


def test_fallback_is_used_once_detected(tmp_path: Path) -> None:
    w = build_world(tmp_path, "abs_link")
    try:
        with resolver_mode("fallback") as calls:
            os.close(pathsafe.makedirs_in_root(w.root_fd, LIB + "/a/b"))
            os.close(pathsafe.create_file_in_root(w.root_fd, LIB + "/a/b/f"))
            assert len(calls) == 1  # ENOSYS once, remembered
            assert pathsafe._openat2_missing
        assert (w.rootfs / _host_rel(w.host) / "lib/a/b/f").is_file()
    finally:
        os.close(w.root_fd)


@pytest.mark.parametrize("world", ["final_link"], indirect=True)
def test_bind_target_link_to_host_file_refused(world: World, mode: str) -> None:
    before = world.outside()
    for name in ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1", "nvidia"):
        with pytest.raises(ApplyError, match="symbolic link as a bind-mount target") as info:
            pathsafe.create_file_in_root(world.root_fd, f"{LIB}/{name}")
        assert info.value.path == f"{LIB}/{name}"
    # the links are still the image's, untouched
    assert os.readlink(world.rootfs / LIB.lstrip("/") / "libcuda.so.1") == str(
        world.host / "lib/libcuda.so.1"
    )
    assert world.outside() == before


@pytest.mark.parametrize("world", ["plain"], indirect=True)
def test_bind_target_kinds(world: World, mode: str) -> None:
    lib = world.rootfs / LIB.lstrip("/")
    (lib / "libfile.so").write_bytes(b"image content")
    (lib / "adir").mkdir()
    os.mkfifo(lib / "afifo")
    fd = pathsafe.create_file_in_root(world.root_fd, LIB + "/libfile.so")
    try:  # an existing regular file is used as it is
        assert fd_path(fd) == str(lib / "libfile.so")
        assert (lib / "libfile.so").read_bytes() == b"image content"
    finally:
        os.close(fd)
    for name, kind in (("adir", "directory"), ("afifo", "fifo")):
        with pytest.raises(ApplyError, match=f"existing {kind}"):
            pathsafe.create_file_in_root(world.root_fd, f"{LIB}/{name}")
    for bad in ("/", LIB + "/..", LIB + "/.", ""):
        with pytest.raises(ApplyError, match="does not end in a name"):
            pathsafe.create_file_in_root(world.root_fd, bad)
    # new file: missing parents made, O_PATH|O_NOFOLLOW descriptor returned
    created: list[str] = []
    fd = pathsafe.create_file_in_root(world.root_fd, "/opt/nv/lib/x.so", created=created)
    try:
        assert os.fstat(fd).st_size == 0
        flags = int(Path(f"/proc/self/fdinfo/{fd}").read_text().split()[3], 8)
        assert flags & os.O_PATH and flags & os.O_NOFOLLOW
    finally:
        os.close(fd)
    assert created == ["/opt", "/opt/nv", "/opt/nv/lib", "/opt/nv/lib/x.so"]


@pytest.mark.parametrize("world", ["dangling_dir", "chain"], indirect=True)
def test_makedirs_through_links_then_roll_back(world: World, mode: str) -> None:
    outside = world.outside()
    inside_before = snapshot(world.rootfs)
    created: list[str] = []
    fd = pathsafe.makedirs_in_root(world.root_fd, LIB + "/nvidia/xorg", created=created)
    try:
        where = fd_path(fd)
    finally:
        os.close(fd)
    expected = {
        "dangling_dir": _rr(world, world.host, "newlib/sub/nvidia/xorg"),
        "chain": _rr(world, world.host, "lib/nvidia/xorg"),
    }[world.case]
    assert where == expected
    assert created, "directories were made"
    assert world.outside() == outside
    for path in reversed(created):
        assert pathsafe.remove_in_root(world.root_fd, path) is True
    assert snapshot(world.rootfs) == inside_before
    assert world.outside() == outside


@pytest.mark.parametrize("world", ["plain"], indirect=True)
def test_makedirs_existing_and_dotdot(world: World, mode: str) -> None:
    created: list[str] = []
    fd = pathsafe.makedirs_in_root(world.root_fd, "/usr/lib", created=created)
    os.close(fd)
    assert created == []
    fd = pathsafe.makedirs_in_root(world.root_fd, "/new/a/../b/./c/", created=created)
    try:
        assert fd_path(fd) == _rr(world, "new/b/c")
    finally:
        os.close(fd)
    assert created == ["/new", "/new/a", "/new/a/../b", "/new/a/../b/./c"]
    fd = pathsafe.makedirs_in_root(world.root_fd, "/")
    try:
        assert fd_path(fd) == str(world.rootfs)
    finally:
        os.close(fd)


@pytest.mark.parametrize("world", ["final_link"], indirect=True)
def test_symlink_in_root(world: World, mode: str) -> None:
    before = world.outside()
    lib = world.rootfs / LIB.lstrip("/")
    # an existing link to a host file is replaced (atomically), never written through
    old = pathsafe.symlink_in_root(world.root_fd, LIB + "/libcuda.so.1", "libcuda.so.535")
    assert old == str(world.host / "lib/libcuda.so.1")
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.535"
    ino = os.lstat(lib / "libcuda.so.1").st_ino
    # idempotent
    assert pathsafe.symlink_in_root(world.root_fd, LIB + "/libcuda.so.1", "libcuda.so.535") is None
    assert os.lstat(lib / "libcuda.so.1").st_ino == ino
    # a different link is refused when asked
    with pytest.raises(ApplyError, match="replace the symbolic link"):
        pathsafe.symlink_in_root(
            world.root_fd, LIB + "/libcuda.so", "x", replace_existing_link=False
        )
    # a regular file or a directory is never replaced
    (lib / "regular").write_bytes(b"image")
    with pytest.raises(ApplyError, match="replace a regular file"):
        pathsafe.symlink_in_root(world.root_fd, LIB + "/regular", "x")
    (lib / "adir").mkdir()
    with pytest.raises(ApplyError, match="replace a directory"):
        pathsafe.symlink_in_root(world.root_fd, LIB + "/adir", "x")
    assert (lib / "regular").read_bytes() == b"image"
    # the link's parent is found in the root: nvidia -> host/lib re-rooted, made
    created: list[str] = []
    assert pathsafe.symlink_in_root(world.root_fd, LIB + "/nvidia/l", "t", created=created) is None
    assert os.readlink(_rr(world, world.host, "lib/l")) == "t"
    assert created[-1] == LIB + "/nvidia/l"
    assert not [n for n in os.listdir(lib) if n.startswith(".ocihook")]
    assert world.outside() == before


_KILLED_LINKER = """
import os, sys, time
from ocihook.linux import pathsafe

root, ready = sys.argv[1], int(sys.argv[2])
if sys.argv[3] == "none":  # as if the guardian had been killed with the writer
    pathsafe.atomicfile.guard_name = lambda dir_fd, name: None


def pause(*args, **kwargs):
    os.write(ready, b"x")
    time.sleep(600)


os.rename = pause
root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
pathsafe.symlink_in_root(root_fd, "/lib/libcuda.so.1", "libcuda.so.2")
"""


@pytest.mark.parametrize(("guardian", "left"), [("fork", 0), ("none", 1)])
def test_symlink_replacement_killed_before_the_rename(
    guardian: str, left: int, tmp_path: Path
) -> None:
    """A process killed between making the replacing link under its temporary name and
    the rename: the guardian removes ``.ocihook-<hex>`` once the process is dead (waited
    for through its stdout); without one the name would stay, as nothing sweeps it."""
    (tmp_path / "lib").mkdir()
    os.symlink("libcuda.so.1.stub", tmp_path / "lib/libcuda.so.1")
    r, w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_LINKER, str(tmp_path), str(w), guardian],
        pass_fds=(w,),
        stdout=subprocess.PIPE,
    )
    os.close(w)
    try:
        assert os.read(r, 1) == b"x", "the linker never reached the rename"
    finally:
        os.close(r)
        child.send_signal(signal.SIGKILL)
        assert child.stdout is not None
        assert child.stdout.read() == b""
        child.wait()
    names = os.listdir(tmp_path / "lib")
    assert len([n for n in names if n.startswith(".ocihook-")]) == left, names
    assert os.readlink(tmp_path / "lib/libcuda.so.1") == "libcuda.so.1.stub"


@pytest.mark.skipif(not CAN_MKNOD, reason="mknod of device nodes needs root (CAP_MKNOD)")
@pytest.mark.parametrize("world", ["final_link"], indirect=True)
def test_mknod_in_root(world: World, mode: str) -> None:
    before = world.outside()
    chr_ = stat.S_IFCHR
    old_umask = os.umask(0o077)
    try:
        created: list[str] = []
        pathsafe.mknod_in_root(
            world.root_fd, "/dev/nvidiactl", chr_ | 0o666, 195, 255, created=created
        )
    finally:
        os.umask(old_umask)
    st_ = os.lstat(world.rootfs / "dev/nvidiactl")
    assert stat.S_ISCHR(st_.st_mode) and stat.S_IMODE(st_.st_mode) == 0o666
    assert (os.major(st_.st_rdev), os.minor(st_.st_rdev)) == (195, 255)
    assert created == ["/dev/nvidiactl"]
    # idempotent for the same node
    pathsafe.mknod_in_root(world.root_fd, "/dev/nvidiactl", chr_ | 0o666, 195, 255)
    # refused: another minor, another type, other permissions, a link, a regular file
    refusals = [
        ("/dev/nvidiactl", chr_ | 0o666, 195, 0, "character device 195:255"),
        ("/dev/nvidiactl", stat.S_IFBLK | 0o666, 195, 255, "character device 195:255"),
        ("/dev/nvidiactl", chr_ | 0o600, 195, 255, "mode 0o666"),
        ("/dev/nvidia0", chr_ | 0o666, 195, 0, "symbolic link"),
        (LIB + "/libcuda.so", chr_ | 0o666, 1, 3, "symbolic link"),
    ]
    for path, mode_, major, minor, what in refusals:
        with pytest.raises(ApplyError, match=what) as info:
            pathsafe.mknod_in_root(world.root_fd, path, mode_, major, minor)
        assert info.value.path == path
    with pytest.raises(ApplyError, match="not a character or block device"):
        pathsafe.mknod_in_root(world.root_fd, "/dev/x", stat.S_IFREG | 0o644, 0, 0)
    assert world.outside() == before


@pytest.mark.parametrize("world", ["final_link", "hardlink"], indirect=True)
def test_write_file_in_root_replaces_links(world: World, mode: str) -> None:
    before = world.outside()
    old_umask = os.umask(0o077)
    try:
        pathsafe.write_file_in_root(world.root_fd, "/etc/ld.so.cache", b"new" * 1000, 0o644)
    finally:
        os.umask(old_umask)
    target = world.rootfs / "etc/ld.so.cache"
    st_ = os.lstat(target)
    assert stat.S_ISREG(st_.st_mode) and stat.S_IMODE(st_.st_mode) == 0o644
    assert st_.st_nlink == 1
    assert target.read_bytes() == b"new" * 1000
    assert sorted(os.listdir(world.rootfs / "etc")) == ["ld.so.cache"]  # no temp left
    assert world.outside() == before


@pytest.mark.parametrize("world", ["plain"], indirect=True)
def test_write_file_in_root_new_and_errors(world: World, mode: str) -> None:
    created: list[str] = []
    pathsafe.write_file_in_root(world.root_fd, "/etc/new/file", b"x", created=created)
    assert created == ["/etc/new", "/etc/new/file"]
    pathsafe.write_file_in_root(world.root_fd, "/etc/new/file", b"y", created=created)
    assert created == ["/etc/new", "/etc/new/file"]  # it existed the second time
    assert (world.rootfs / "etc/new/file").read_bytes() == b"y"
    (world.rootfs / "etc/adir").mkdir()
    with pytest.raises(ApplyError, match="write the file") as info:
        pathsafe.write_file_in_root(world.root_fd, "/etc/adir", b"x")
    assert isinstance(info.value.__cause__, OSError)
    assert sorted(os.listdir(world.rootfs / "etc")) == ["adir", "new"]  # no temp left


@pytest.mark.parametrize("world", ["final_link"], indirect=True)
def test_remove_in_root(world: World, mode: str) -> None:
    before = world.outside()
    lib = world.rootfs / LIB.lstrip("/")
    assert pathsafe.remove_in_root(world.root_fd, LIB + "/libcuda.so.1") is True
    assert not os.path.lexists(lib / "libcuda.so.1")  # the link went, not its target
    assert pathsafe.remove_in_root(world.root_fd, LIB + "/libcuda.so.1") is False
    assert pathsafe.remove_in_root(world.root_fd, "/no/such/dir/x") is False
    assert pathsafe.remove_in_root(world.root_fd, LIB + "/nvidia") is True  # a dir link
    (lib / "d").mkdir()
    (lib / "d/f").write_bytes(b"")
    with pytest.raises(ApplyError, match="Directory not empty"):
        pathsafe.remove_in_root(world.root_fd, LIB + "/d")
    # the parent is resolved in the root: /etc/ld.so.cache's parent is a real dir here
    assert pathsafe.remove_in_root(world.root_fd, "/../etc/ld.so.cache") is True
    with pytest.raises(ApplyError, match="does not end in a name"):
        pathsafe.remove_in_root(world.root_fd, "/")
    assert world.outside() == before


def test_open_in_root_magic_links(mode: str, tmp_path: Path) -> None:
    """/proc magic links inside the root: openat2 refuses them (RESOLVE_NO_MAGICLINKS), the
    fallback reads their text and resolves it in the root; neither reaches the target."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"host secret")
    victim_fd = os.open(victim, os.O_RDONLY)
    root_fd = pathsafe.open_root("/proc/self")
    try:
        for path in ("root/etc/passwd", "cwd", f"fd/{victim_fd}", "exe", f"fd/{root_fd}/fd"):
            with pytest.raises(ApplyError) as info:
                os.close(pathsafe.open_in_root(root_fd, path, os.O_RDONLY))
            cause = info.value.__cause__
            assert isinstance(cause, OSError)
            want = errno.ELOOP if mode == "openat2" else errno.ENOENT
            assert cause.errno == want, (path, cause)
    finally:
        os.close(root_fd)
        os.close(victim_fd)


@pytest.mark.parametrize("world", ["plain"], indirect=True)
def test_open_in_root_kernel_rules(world: World, mode: str) -> None:
    lib = world.rootfs / LIB.lstrip("/")
    (lib / "f").write_bytes(b"data")
    (lib / "lf").symlink_to("/usr/lib/x86_64-linux-gnu/f")
    (lib / "ld").symlink_to("..")

    def errno_of(path: str, flags: int) -> int:
        with pytest.raises(ApplyError) as info:
            os.close(pathsafe.open_in_root(world.root_fd, path, flags))
        assert isinstance(info.value.__cause__, OSError)
        return info.value.__cause__.errno or 0

    def where(path: str, flags: int) -> str:
        fd = pathsafe.open_in_root(world.root_fd, path, flags)
        try:
            return fd_path(fd)
        finally:
            os.close(fd)

    assert errno_of(LIB + "/f/", os.O_RDONLY) == errno.ENOTDIR
    assert errno_of(LIB + "/f/..", os.O_PATH) == errno.ENOTDIR
    assert errno_of(LIB + "/lf", os.O_RDONLY | os.O_NOFOLLOW) == errno.ELOOP
    assert errno_of(LIB + "/lf", os.O_PATH | os.O_DIRECTORY) == errno.ENOTDIR
    assert errno_of(LIB + "/lf", os.O_CREAT | os.O_EXCL | os.O_WRONLY) == errno.EEXIST
    assert where(LIB + "/lf", os.O_PATH | os.O_NOFOLLOW) == str(lib / "lf")
    assert where(LIB + "/lf", os.O_RDONLY) == str(lib / "f")
    assert where(LIB + "/ld/", os.O_RDONLY | os.O_DIRECTORY) == _rr(world, "usr/lib")
    assert where(LIB + "/ld/../../../..", os.O_PATH) == str(world.rootfs)
    assert where("", os.O_PATH) == str(world.rootfs)
    fd = pathsafe.open_in_root(world.root_fd, LIB + "/ld/new", os.O_WRONLY | os.O_CREAT, 0o600)
    os.close(fd)
    assert (world.rootfs / "usr/lib/new").is_file()
    flags = int(Path(f"/proc/self/fdinfo/{world.root_fd}").read_text().split()[3], 8)
    assert flags & os.O_CLOEXEC
    # a mode is dropped where open(2) ignores it (openat2 alone would say EINVAL) ...
    assert where("/etc", os.O_RDONLY | os.O_DIRECTORY) == _rr(world, "etc")
    fd = pathsafe.open_in_root(world.root_fd, "/etc", os.O_RDONLY | os.O_DIRECTORY, 0o644)
    os.close(fd)
    # ... and kept where it is used: O_TMPFILE (which includes O_DIRECTORY's bit)
    fd = pathsafe.open_in_root(world.root_fd, "/etc", os.O_TMPFILE | os.O_WRONLY, 0o600)
    try:
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o600
    finally:
        os.close(fd)


def test_open_root_errors(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"")
    for path in (tmp_path / "missing", tmp_path / "file"):
        with pytest.raises(ApplyError, match="cannot open the container root") as info:
            pathsafe.open_root(str(path))
        assert info.value.path == str(path)


# --- hypothesis: random trees -----------------------------------------------------------------

NAMES = ["a", "b", "c"]
_comp = st.sampled_from([*NAMES, "..", "."])
_target = st.tuples(
    st.sampled_from(["", "/", "@OUT/", "@ROOT/", "@ROOTREL/"]),
    st.lists(_comp, max_size=4),
    st.booleans(),
).map(lambda t: t[0] + "/".join(t[1]) + ("/" if t[2] and t[1] else ""))
_entry = st.tuples(
    st.lists(st.sampled_from(NAMES), min_size=1, max_size=3),
    st.sampled_from(["dir", "file", "link", "link"]),
    _target,
)
_tree = st.lists(_entry, max_size=14)
_query = st.tuples(
    st.booleans(), st.lists(st.sampled_from([*NAMES, "..", ".", "x"]), max_size=6), st.booleans()
).map(lambda t: ("/" if t[0] else "") + "/".join(t[1]) + ("/" if t[2] else ""))


@dataclass
class RandomTree:
    top: str
    root: str
    out: str

    def outside(self) -> Snapshot:
        return snapshot(Path(self.top), skip=Path(self.root))


def _real_dirs_below(root: str, parts: list[str]) -> bool:
    """Make ``root/parts...`` as real directories, never following a link: the tree is
    built by root on the host, and a link made earlier in it may point anywhere (a test
    must not write outside its own temporary directory). False when a component is a link
    or a file."""
    current = root
    for part in parts:
        current = os.path.join(current, part)
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current)
            continue
        if not stat.S_ISDIR(st.st_mode):
            return False
    return True


@contextlib.contextmanager
def random_tree(entries: list[tuple[list[str], str, str]]) -> Iterator[RandomTree]:
    top = tempfile.mkdtemp(prefix="ocihook-hyp-")
    root, out = os.path.join(top, "root"), os.path.join(top, "out")
    try:
        os.makedirs(os.path.join(out, "a/b"))
        Path(out, "a/secret").write_bytes(b"host")
        os.mkdir(root)
        for parts, kind, target in entries:
            path = os.path.join(root, *parts)
            if os.path.lexists(path) or not _real_dirs_below(root, parts[:-1]):
                continue  # something is there, or a file or link is in the way
            if kind == "dir":
                os.mkdir(path)
            elif kind == "file":
                Path(path).write_bytes(b"file")
            else:
                target = (
                    target.replace("@OUT", out)
                    .replace("@ROOTREL", "../" * 6 + top.lstrip("/"))
                    .replace("@ROOT", root)
                )
                os.symlink(target or ".", path)
        yield RandomTree(top, root, out)
    finally:
        shutil.rmtree(top)


def _outcome(root_fd: int, path: str, flags: int) -> str | int:
    try:
        fd = pathsafe.open_in_root(root_fd, path, flags, 0o644)
    except ApplyError as err:
        assert isinstance(err.__cause__, OSError)
        return err.__cause__.errno or -1
    try:
        return fd_path(fd)
    finally:
        os.close(fd)


_FLAGS = [
    os.O_PATH,
    os.O_PATH | os.O_NOFOLLOW,
    os.O_PATH | os.O_DIRECTORY,
    os.O_RDONLY,
    os.O_RDONLY | os.O_DIRECTORY,
    os.O_WRONLY | os.O_CREAT,  # made by whichever runs first, opened by the other
    os.O_RDONLY | os.O_CREAT | os.O_EXCL,
]
_HYP = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_HYP
@given(tree=_tree, queries=st.lists(_query, min_size=1, max_size=6))
def test_random_trees_resolution_agrees(
    tree: list[tuple[list[str], str, str]], queries: list[str]
) -> None:
    """resolve_in_root stays in the root and has no link below it; it agrees with
    open_in_root for paths that exist; openat2 and the fallback walk agree exactly."""
    check_openat2 = _openat2_works()
    with random_tree(tree) as t:
        before = t.outside()
        root_fd = pathsafe.open_root(t.root)
        try:
            for query in queries:
                try:
                    resolved: str | None = pathsafe.resolve_in_root(t.root, query)
                except DiscoveryError:
                    resolved = None
                if resolved is not None:
                    assert resolved == t.root or resolved.startswith(t.root + "/")
                    rel = os.path.relpath(resolved, t.root)
                    here = t.root
                    for part in [] if rel == "." else rel.split("/"):
                        here = os.path.join(here, part)
                        assert not os.path.islink(here), (query, here)
                for flags in _FLAGS:
                    inside_before = snapshot(Path(t.root))
                    with resolver_mode("fallback"):
                        walked = _outcome(root_fd, query, flags)
                    made = snapshot(Path(t.root)) != inside_before
                    if check_openat2 and made and isinstance(walked, str):
                        os.unlink(walked)  # let the kernel make it again
                        assert snapshot(Path(t.root)) == inside_before
                    if check_openat2:
                        with resolver_mode("openat2"):
                            kernel = _outcome(root_fd, query, flags)
                        assert walked == kernel, (query, oct(flags))
                    if isinstance(walked, str):
                        assert walked == t.root or walked.startswith(t.root + "/")
                        if not flags & os.O_NOFOLLOW:
                            assert resolved == walked, (query, oct(flags))
        finally:
            os.close(root_fd)
        assert t.outside() == before


@_HYP
@given(
    tree=_tree,
    query=_query,
    action=st.sampled_from(["makedirs", "create_file", "symlink", "write_file"]),
    use_fallback=st.booleans(),
)
def test_random_trees_writes_stay_inside(
    tree: list[tuple[list[str], str, str]], query: str, action: str, use_fallback: bool
) -> None:
    """Whatever the tree, a write either happens inside the root (where resolve_in_root
    says, once it exists) or raises ApplyError; outside the root nothing changes."""
    mode_ = "fallback" if use_fallback or not _openat2_works() else "openat2"
    with random_tree(tree) as t, resolver_mode(mode_):
        before = t.outside()
        root_fd = pathsafe.open_root(t.root)
        try:
            if action == "makedirs":
                fd = pathsafe.makedirs_in_root(root_fd, query)
            elif action == "create_file":
                fd = pathsafe.create_file_in_root(root_fd, query)
            elif action == "symlink":
                pathsafe.symlink_in_root(root_fd, query, "@target")
                fd = pathsafe.open_in_root(root_fd, query, os.O_PATH | os.O_NOFOLLOW)
            else:
                pathsafe.write_file_in_root(root_fd, query, b"data")
                fd = pathsafe.open_in_root(root_fd, query, os.O_RDONLY)
                assert os.read(fd, 10) == b"data"
        except ApplyError:
            fd = -1
        finally:
            os.close(root_fd)
        if fd >= 0:
            try:
                where = fd_path(fd)
                assert where == t.root or where.startswith(t.root + "/")
                if action in ("makedirs", "write_file", "create_file"):
                    assert pathsafe.resolve_in_root(t.root, query) == where
            finally:
                os.close(fd)
        assert t.outside() == before


# --- a directory swapped between check and use ----------------------------------------------------


def test_directory_swapped_for_a_link_between_check_and_use(tmp_path: Any) -> None:
    """The image swaps a directory for a link to a host directory after ocihook looked it
    up: the file is made through the descriptor it already holds, never on the host."""
    from ocihook.linux import pathsafe

    rootfs = tmp_path / "rootfs"
    (rootfs / "usr/lib64").mkdir(parents=True)
    victim = tmp_path / "victim"
    victim.mkdir()
    root_fd = pathsafe.open_root(str(rootfs))
    try:
        parent_fd = pathsafe.makedirs_in_root(root_fd, "/usr/lib64")
        try:
            (rootfs / "usr/lib64").rename(rootfs / "usr/old")
            (rootfs / "usr/lib64").symlink_to(victim)
            fd = pathsafe.create_file_at(parent_fd, "/usr/lib64", "libcuda.so.1")
            os.close(fd)
        finally:
            os.close(parent_fd)
    finally:
        os.close(root_fd)
    assert list(victim.iterdir()) == []
    assert (rootfs / "usr/old/libcuda.so.1").is_file()


# --- symlinks_in_root: one parent resolution per directory ---------------------------------

LINK_NAMES = st.sampled_from(["a", "b", "c.so.1", "d"])
LINK_DIRS = st.sampled_from(["/usr/lib", "/usr/lib/x", "/opt", "/usr/lib/x/y"])


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    links=st.lists(st.tuples(LINK_DIRS, LINK_NAMES, st.sampled_from(["t1", "t2"])), max_size=8),
    existing=st.lists(st.tuples(LINK_DIRS, LINK_NAMES, st.sampled_from(["t1", "old"])), max_size=3),
)
def test_symlinks_in_root_is_symlink_in_root_each(
    links: list[tuple[str, str, str]], existing: list[tuple[str, str, str]]
) -> None:
    """The batch makes the same tree, records the same ``created`` entries and the same
    replaced links, in the same order, as one :func:`symlink_in_root` per link."""
    results = []
    for batch in (False, True):
        with tempfile.TemporaryDirectory() as tmp:
            for d, n, t in existing:
                os.makedirs(tmp + d, exist_ok=True)
                with contextlib.suppress(FileExistsError):
                    os.symlink(t, f"{tmp}{d}/{n}")
            root_fd = pathsafe.open_root(tmp)
            created: list[str] = []
            pairs = [(f"{d}/{n}", t) for d, n, t in links]
            try:
                if batch:
                    replaced = pathsafe.symlinks_in_root(root_fd, pairs, created=created)
                else:
                    replaced = []
                    for link, target in pairs:
                        old = pathsafe.symlink_in_root(root_fd, link, target, created=created)
                        if old is not None:
                            replaced.append((link, old))
            finally:
                os.close(root_fd)
            tree = sorted(
                (os.path.relpath(os.path.join(w, f), tmp), os.readlink(os.path.join(w, f)))
                for w, _dirs, files in os.walk(tmp)
                for f in files
            )
            results.append((tree, created, replaced))
    assert results[0] == results[1]


def test_symlinks_in_root_stops_at_a_refusal_keeping_what_it_did(tmp_path: Path) -> None:
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/old").symlink_to("x")
    (tmp_path / "usr/lib/file").write_text("image content")
    root_fd = pathsafe.open_root(str(tmp_path))
    created: list[str] = []
    replaced: list[tuple[str, str]] = []
    try:
        with pytest.raises(ApplyError, match="replace a regular file"):
            pathsafe.symlinks_in_root(
                root_fd,
                [("/usr/lib/new", "t"), ("/usr/lib/old", "t"), ("/usr/lib/file", "t"), ("/z", "t")],
                created=created,
                replaced=replaced,
            )
    finally:
        os.close(root_fd)
    assert created == ["/usr/lib/new"] and replaced == [("/usr/lib/old", "x")]
    assert os.readlink(tmp_path / "usr/lib/old") == "t"
    assert (tmp_path / "usr/lib/file").read_text() == "image content"
    assert not (tmp_path / "z").exists()


def test_symlinks_in_root_resolves_parents_inside_the_root(tmp_path: Path) -> None:
    """A parent that is a link out of the root is followed inside it, as for one link."""
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    (root / "usr").mkdir(parents=True)
    (root / "usr/lib").symlink_to(str(outside))  # absolute: resolved in the root
    root_fd = pathsafe.open_root(str(root))
    try:
        pathsafe.symlinks_in_root(root_fd, [("/usr/lib/a", "t"), ("/usr/lib/b", "t")])
    finally:
        os.close(root_fd)
    assert list(outside.iterdir()) == []
    assert os.readlink(root / str(outside).lstrip("/") / "a") == "t"


def test_symlinks_in_root_follows_a_parent_link_the_batch_replaced(tmp_path: Path) -> None:
    """A link of the batch that replaces a link on the way to a later link's parent: the
    later link goes where one symlink_in_root per link would put it."""
    for d in ("d1", "d2"):
        (tmp_path / d).mkdir()
    (tmp_path / "a").symlink_to("d1")
    root_fd = pathsafe.open_root(str(tmp_path))
    try:
        pathsafe.symlinks_in_root(root_fd, [("/a/x", "t1"), ("/a", "d2"), ("/a/y", "t2")])
    finally:
        os.close(root_fd)
    assert sorted(os.listdir(tmp_path / "d1")) == ["x"]
    assert sorted(os.listdir(tmp_path / "d2")) == ["y"]


def _resolved_or_error(root: str, path: str, max_links: int) -> tuple[str, object]:
    try:
        return ("ok", pathsafe.resolve_in_root(root, path, max_links=max_links))
    except DiscoveryError as err:
        assert isinstance(err.__cause__, OSError)
        return ("error", (err.__cause__.errno, err.path, str(err)))


@_HYP
@given(
    tree=_tree,
    queries=st.lists(_query, min_size=1, max_size=12),
    max_links=st.sampled_from([pathsafe.MAX_LINKS, 3, 1]),
)
def test_remembered_resolutions_agree_with_the_plain_walk(
    tree: list[tuple[list[str], str, str]], queries: list[str], max_links: int
) -> None:
    """Inside RememberedResolutions every answer (a path, or the error with its errno,
    path and message) is the plain walk's, whatever was asked before in the scope; the
    queries also go again with their siblings so that remembered directories are used."""
    asked = [*queries, *(q.rstrip("/") + "/x" for q in queries), *queries]
    with random_tree(tree) as t:
        plain = [_resolved_or_error(t.root, q, max_links) for q in asked]
        # nested: the inner scope shares the outer one's memory
        with pathsafe.RememberedResolutions(), pathsafe.RememberedResolutions():
            remembered = [_resolved_or_error(t.root, q, max_links) for q in asked]
        assert remembered == plain


def test_remembered_resolutions_walk_each_directory_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a scope, the second file of a directory costs one lstat (its own), not one per
    component; outside the scope nothing is remembered."""
    lib = tmp_path / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (tmp_path / "lib").symlink_to("usr/lib")
    for name in ("libcuda.so.1", "libnvidia-ml.so.1"):
        (lib / name).write_bytes(b"")
    calls: list[str] = []
    real_lstat = os.lstat

    def counting(path: str) -> os.stat_result:
        calls.append(path)
        return real_lstat(path)

    monkeypatch.setattr(pathsafe.os, "lstat", counting)
    with pathsafe.RememberedResolutions():
        first = pathsafe.resolve_in_root(str(tmp_path), "/lib/x86_64-linux-gnu/libcuda.so.1")
        walked = len(calls)
        second = pathsafe.resolve_in_root(str(tmp_path), "lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    assert first == str(lib / "libcuda.so.1")
    assert second == str(lib / "libnvidia-ml.so.1")
    assert walked == 5  # lib (a link), usr, lib, x86_64-linux-gnu, the file
    assert len(calls) - walked == 1
    calls.clear()
    pathsafe.resolve_in_root(str(tmp_path), "/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    assert len(calls) == walked


def test_a_remembered_directory_needing_more_links_than_are_left_is_eloop(
    tmp_path: Path,
) -> None:
    """A directory walked once with links to spare (d1 -> d2 -> real: two links) is, when
    reached again through a link (l -> /d1/x) with fewer links left, ELOOP as the plain walk
    says, not its remembered answer."""
    (tmp_path / "real").mkdir()
    (tmp_path / "d2").symlink_to("real")
    (tmp_path / "d1").symlink_to("d2")
    (tmp_path / "l").symlink_to("/d1/x")
    root = str(tmp_path)
    with pathsafe.RememberedResolutions():
        assert pathsafe.resolve_in_root(root, "/d1/x") == str(tmp_path / "real/x")
        with pytest.raises(DiscoveryError) as remembered:
            pathsafe.resolve_in_root(root, "/l", max_links=2)
        assert pathsafe.resolve_in_root(root, "/l", max_links=3) == str(tmp_path / "real/x")
    with pytest.raises(DiscoveryError) as plain:
        pathsafe.resolve_in_root(root, "/l", max_links=2)
    assert str(remembered.value) == str(plain.value)
    assert isinstance(remembered.value.__cause__, OSError)
    assert remembered.value.__cause__.errno == errno.ELOOP


def test_remembered_resolutions_of_very_long_walks_agree(tmp_path: Path) -> None:
    """A link of 1,500 ``./`` components is legal; a path as long too: in the scope they
    resolve as outside it rather than recursing past Python's limit (a RecursionError
    from ``cdi generate`` on such a driver tree)."""
    (tmp_path / "usr/lib").mkdir(parents=True)
    (tmp_path / "usr/lib/libcuda.so.1").write_bytes(b"")
    (tmp_path / "lib").symlink_to("./" * 1500 + "usr/lib")
    root = str(tmp_path)
    queries = ["/lib/libcuda.so.1", "./" * 1200 + "usr/lib/libcuda.so.1", "/lib/x/../libcuda.so.1"]
    plain = [_resolved_or_error(root, q, pathsafe.MAX_LINKS) for q in queries]
    with pathsafe.RememberedResolutions():
        assert [_resolved_or_error(root, q, pathsafe.MAX_LINKS) for q in queries] == plain
    assert plain[0] == ("ok", str(tmp_path / "usr/lib/libcuda.so.1"))


def test_remembered_resolutions_with_no_links_to_spare(tmp_path: Path) -> None:
    """``max_links`` below zero follows no link but resolves a path that has none, in the
    scope as outside it."""
    (tmp_path / "a/b").mkdir(parents=True)
    (tmp_path / "l").symlink_to("a")
    root = str(tmp_path)
    queries = ["a/b/c", "l/b/c", "a/b/c"]
    for max_links in (-1, 0):
        plain = [_resolved_or_error(root, q, max_links) for q in queries]
        with pathsafe.RememberedResolutions():
            assert [_resolved_or_error(root, q, max_links) for q in queries] == plain
        assert plain[0] == ("ok", str(tmp_path / "a/b/c"))
        assert plain[1][0] == "error"


def test_one_remembered_resolutions_entered_twice_forgets_at_the_end(tmp_path: Path) -> None:
    """The same instance used in a nested ``with`` leaves no memory behind it: a tree that
    changes afterwards is walked again."""
    (tmp_path / "a/b").mkdir(parents=True)
    root = str(tmp_path)
    scope = pathsafe.RememberedResolutions()
    with scope:
        with scope:
            assert pathsafe.resolve_in_root(root, "a/b/c") == str(tmp_path / "a/b/c")
        assert pathsafe._REMEMBERED.get() is not None  # the outer one still holds it
    assert pathsafe._REMEMBERED.get() is None
    (tmp_path / "a/b").rename(tmp_path / "a/real")
    (tmp_path / "a/b").symlink_to("real")
    assert pathsafe.resolve_in_root(root, "a/b/c") == str(tmp_path / "a/real/c")


# -- mount targets in one batch -----------------------------------------------------------

_TGT_PARTS = st.sampled_from(["a", "b", "lib", "usr", "x.so", ".."])
_TGT_PATHS = st.lists(_TGT_PARTS, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))
_IMAGE_ITEMS = st.lists(
    st.tuples(
        _TGT_PATHS,
        st.one_of(
            st.just("dir"),
            st.just("file"),
            st.sampled_from(["/", "..", "../..", "/usr", "a", "/tmp/outside", "x.so"]).map(
                lambda t: "link:" + t
            ),
        ),
    ),
    max_size=8,
)


def _plant(root: Path, items: list[tuple[str, str]]) -> None:
    for path, kind in items:
        if ".." in path.split("/"):
            continue  # the image's own paths have no ..; its links may
        p = root / path.lstrip("/")
        if any(q.is_symlink() for q in p.parents if q.is_relative_to(root) and q != root):
            continue  # planted on the host, not through the image's own link
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            if kind == "dir":
                p.mkdir(exist_ok=True)
            elif kind == "file":
                p.write_text("image")
            else:
                p.symlink_to(kind[len("link:") :])
        except OSError:
            pass  # a planted item in the way of another: the image is what it is


def _tree(root: Path) -> list[tuple[str, str]]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in sorted(dirnames + filenames):
            p = Path(dirpath) / name
            st_ = p.lstat()
            kind = (
                "link:" + os.readlink(p)
                if stat.S_ISLNK(st_.st_mode)
                else "dir"
                if stat.S_ISDIR(st_.st_mode)
                else "file:" + p.read_text()
            )
            out.append((str(p.relative_to(root)), kind))
    return sorted(out)


def _one_by_one(root_fd: int, targets: list[tuple[str, bool]], created: list[str]) -> None:
    for path, is_dir in targets:
        make = pathsafe.makedirs_in_root if is_dir else pathsafe.create_file_in_root
        pathsafe.close_quietly(make(root_fd, path, created=created))


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    image=_IMAGE_ITEMS,
    targets=st.lists(st.tuples(_TGT_PATHS, st.booleans()), min_size=1, max_size=8),
)
def test_mount_targets_in_root_as_one_by_one(
    tmp_path_factory: pytest.TempPathFactory,
    image: list[tuple[str, str]],
    targets: list[tuple[str, bool]],
) -> None:
    """The batch makes the same tree, lists the same paths as made and fails on the same
    target with the same message as making each target by itself; nothing lands outside
    the root (the images plant links to /, .. and a host path)."""
    results = []
    for how in ("batch", "single"):
        base = tmp_path_factory.mktemp(how)
        root = base / "root"
        root.mkdir()
        _plant(root, image)
        created: list[str] = []
        root_fd = pathsafe.open_root(str(root))
        try:
            if how == "batch":
                mount_targets_in_root(root_fd, targets, created=created)
            else:
                _one_by_one(root_fd, targets, created)
            error = None
        except ApplyError as e:
            error = str(e)
        finally:
            os.close(root_fd)
        assert sorted(os.listdir(base)) == ["root"]
        results.append((_tree(root), created, error))
    assert results[0] == results[1]
