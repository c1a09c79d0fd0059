"""Tests of ocihook.linux.syscalls: the ctypes wrappers, and (as root) the new mount API and setns.

Everything that mounts runs in a child process inside a private mount namespace (or in the
namespace of a throw-away ``unshare -m --propagation private sleep`` process), so nothing is
ever mounted in the namespace running the tests; each test checks that, and kills and reaps
what it started.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO

from ocihook.linux import syscalls as _linux

IS_ROOT = os.geteuid() == 0


# --- helpers ----------------------------------------------------------------------------------


def mount_points(pid: int | str = "self") -> dict[str, list[str]]:
    """Mount point -> mount options (field 6 of mountinfo, split) for a process."""
    out: dict[str, list[str]] = {}
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")  # \040 for spaces
        out[point] = fields[5].split(",")
    return out


def run_child(script: str, *args: str) -> dict[str, object]:
    """Run ``script`` in a new Python process (ocihook importable); it prints one JSON
    object as its last line, which is returned."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, f"child failed:\n{proc.stdout}\n{proc.stderr}"
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _needs_root_and_namespaces() -> None:
    if not IS_ROOT:
        reason = "needs root: mounting and setns(CLONE_NEWNS) need CAP_SYS_ADMIN"
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) from util-linux")
    probe = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "true"], capture_output=True, check=False
    )
    if probe.returncode != 0:
        reason = f"cannot make a mount namespace here: {probe.stderr.decode().strip()}"
        print(f"SKIP: {reason}")
        pytest.skip(reason)


@pytest.fixture
def sleeper() -> Iterator[int]:
    """A process in its own private mount namespace; yields its pid; killed and reaped."""
    _needs_root_and_namespaces()
    proc = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "30"])
    try:
        ours = os.readlink("/proc/self/ns/mnt")
        deadline = time.monotonic() + 10
        while True:  # unshare(1) execs sleep once the namespace exists
            try:
                theirs = os.readlink(f"/proc/{proc.pid}/ns/mnt")
                if theirs != ours and Path(f"/proc/{proc.pid}/comm").read_text() == "sleep\n":
                    break
            except FileNotFoundError:
                pass
            assert proc.poll() is None, "unshare exited early"
            assert time.monotonic() < deadline, "the namespace never appeared"
            time.sleep(0.01)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    (tmp_path / "src.so").write_bytes(b"driver library")
    (tmp_path / "rootfs/usr/lib").mkdir(parents=True)
    (tmp_path / "mnt").mkdir()
    return tmp_path


# --- no privileges needed ---------------------------------------------------------------------


def test_import_is_cheap() -> None:
    """Importing the module loads neither ctypes, platform nor typing, nor libc."""
    code = (
        "import sys, ocihook; before = set(sys.modules); import ocihook.linux.syscalls; "
        "import ocihook.linux.pathsafe; "
        "print(sorted({'ctypes', 'platform', 'typing'} & (set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(REPO)},
        check=True,
    ).stdout
    assert out.strip() == "[]"


def test_calls_never_load_the_ctypes_package() -> None:
    """A call that needs the C library (an ``openat2`` that fails, and one that succeeds)
    loads ``_ctypes`` but not the ``ctypes`` package (about 3 ms on every GPU start)."""
    code = (
        "import os, sys\n"
        "from ocihook.linux import syscalls as s\n"
        "try:\n"
        "    s.openat2(s.AT_FDCWD, '/nonexistent/x', os.O_RDONLY)\n"
        "except OSError as e:\n"
        "    print(e.errno)\n"
        "fd = s.openat2(s.AT_FDCWD, '/', os.O_RDONLY | os.O_DIRECTORY, 0, s.RESOLVE_IN_ROOT)\n"
        "print(os.path.samestat(os.fstat(fd), os.stat('.')))\n"  # the root: the cwd
        "print(sorted({'ctypes', '_ctypes'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r})\n{code}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split("\n")[:3] == [str(errno.ENOENT), "True", "['_ctypes']"]


def test_c_types_match_the_ctypes_package() -> None:
    """The types built from ``_ctypes`` have the sizes, conversions and errno behaviour of
    the ctypes package's own (the package is imported here only to compare)."""
    import ctypes

    c = _linux._libc().ctypes
    for name in ("c_int", "c_uint", "c_long", "c_ulong", "c_uint64", "c_char", "c_size_t"):
        assert ctypes.sizeof(getattr(c, name)) == ctypes.sizeof(getattr(ctypes, name)), name
    assert c.c_long(-5).value == -5
    assert c.c_ulong(-1).value == ctypes.c_ulong(-1).value
    assert c.c_uint64(2**64 - 1).value == 2**64 - 1
    assert c.c_char_p(b"abc").value == b"abc"
    assert c.c_char_p(None).value is None
    assert ctypes.sizeof(_linux._libc().OpenHow) == 24
    buf = bytearray(b"xyz")
    assert _linux.buffer_address(buf) == ctypes.addressof((ctypes.c_char * 3).from_buffer(buf))
    with pytest.raises(AttributeError):
        c.function("no_such_function_in_libc_ocihook")


def test_syscall_numbers() -> None:
    assert _linux.syscall_number("openat2", "x86_64") == 437
    assert _linux.syscall_number("setns", "x86_64") == 308
    assert _linux.syscall_number("setns", "aarch64") == 268
    assert _linux.syscall_number("mount", "aarch64") == 40
    assert _linux.syscall_number("mount_setattr", "arm64") == 442
    for name in ("open_tree", "move_mount", "openat2", "mount_setattr"):
        # the new calls have one number on every architecture
        assert _linux.syscall_number(name, "x86_64") == _linux.syscall_number(name, "aarch64")
    with pytest.raises(OSError) as info:
        _linux.syscall_number("openat2", "riscv64")
    assert info.value.errno == errno.ENOSYS
    import platform

    if platform.machine() in _linux.SYSCALL_NUMBERS:
        assert _linux.syscall_number("openat2") == 437


def test_errors_are_oserror_with_paths(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(FileNotFoundError) as info:
        _linux.openat2(_linux.AT_FDCWD, missing, os.O_PATH | os.O_CLOEXEC)
    assert info.value.filename == missing
    with pytest.raises(OSError) as info2:
        _linux.setns(-1, _linux.CLONE_NEWNS)
    assert info2.value.errno == errno.EBADF
    with pytest.raises(FileNotFoundError) as info3:
        _linux.open_tree(_linux.AT_FDCWD, missing, _linux.OPEN_TREE_CLOEXEC)
    assert info3.value.filename == missing
    with pytest.raises(OSError) as info4:
        _linux.move_mount(-1, "a", -1, "b", 0)
    assert info4.value.errno in (errno.EBADF, errno.EPERM)  # EPERM without CAP_SYS_ADMIN
    assert (info4.value.filename, info4.value.filename2) == ("a", "b")
    with pytest.raises(OSError) as info5:
        _linux.mount_setattr(-1, "", _linux.AT_EMPTY_PATH, _linux.MOUNT_ATTR_RDONLY)
    assert info5.value.errno in (errno.EBADF, errno.EPERM)
    with pytest.raises(OSError) as info6:
        _linux.umount2(str(tmp_path))  # not a mount point (EINVAL), or EPERM as a user
    assert info6.value.errno in (errno.EINVAL, errno.EPERM)
    assert info6.value.filename == str(tmp_path)
    with pytest.raises(OSError) as info7:
        # mode without O_CREAT: openat2 is strict where openat is not
        _linux.openat2(_linux.AT_FDCWD, ".", os.O_RDONLY, 0o644)
    assert info7.value.errno == errno.EINVAL


def test_openat2_resolve_flags(tmp_path: Path) -> None:
    (tmp_path / "root/dir").mkdir(parents=True)
    (tmp_path / "root/abs").symlink_to("/dir")
    (tmp_path / "secret").write_bytes(b"")
    root = os.open(tmp_path / "root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    flags = os.O_PATH | os.O_CLOEXEC
    try:
        fd = _linux.openat2(root, "abs/../../../abs", flags, 0, _linux.RESOLVE_IN_ROOT)
        assert os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "root/dir")
        os.close(fd)
        with pytest.raises(OSError) as info:
            _linux.openat2(root, "../secret", flags, 0, _linux.RESOLVE_BENEATH)
        assert info.value.errno == errno.EXDEV
        with pytest.raises(OSError) as info:
            _linux.openat2(root, "abs", flags, 0, _linux.RESOLVE_NO_SYMLINKS)
        assert info.value.errno == errno.ELOOP
        with pytest.raises(OSError) as info:
            _linux.openat2(
                _linux.AT_FDCWD, "/proc/self/root", flags, 0, _linux.RESOLVE_NO_MAGICLINKS
            )
        assert info.value.errno == errno.ELOOP
        with pytest.raises(OSError) as info:
            _linux.openat2(_linux.AT_FDCWD, "/proc/self", flags, 0, _linux.RESOLVE_NO_XDEV)
        assert info.value.errno == errno.EXDEV
    finally:
        os.close(root)


# --- as root, in private mount namespaces -----------------------------------------------------

_PRIVATE_BIND = """
import errno, json, os, sys
from ocihook.linux import syscalls as L
from ocihook.linux import pathsafe as P

src, rootfs, want = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
L.unshare(L.CLONE_NEWNS)
L.mount(None, "/", None, L.MS_REC | L.MS_PRIVATE)  # nothing propagates to the host
target = rootfs + "/usr/lib/libcuda.so.1"

tree = L.bind_mount_detached(src, **want)
detached_visible = target in open("/proc/self/mountinfo").read()
root = P.open_root(rootfs)
target_fd = P.create_file_in_root(root, "/usr/lib/libcuda.so.1")
L.attach_mount(tree, target_fd)
os.close(tree)
options = None
for line in open("/proc/self/mountinfo"):
    fields = line.split()
    if fields[4] == target:
        options = fields[5].split(",")
content = open(target, "rb").read().decode()
try:
    with open(target, "ab") as f:
        f.write(b"x")
    write_errno = 0
except OSError as err:
    write_errno = err.errno
L.umount2(target, L.MNT_DETACH)
after_umount = target in open("/proc/self/mountinfo").read()
print(json.dumps({
    "detached_visible": detached_visible, "options": options, "content": content,
    "write_errno": write_errno, "after_umount": after_umount,
}))
"""


@pytest.mark.parametrize(
    "want",
    [
        {"readonly": True, "nosuid": True, "nodev": True, "noexec": False},
        {"readonly": False, "nosuid": False, "nodev": False, "noexec": True},
    ],
    ids=["ro-nosuid-nodev", "noexec"],
)
def test_detached_bind_mount_in_private_namespace(tree: Path, want: dict[str, bool]) -> None:
    _needs_root_and_namespaces()
    target = str(tree / "rootfs/usr/lib/libcuda.so.1")
    result = run_child(_PRIVATE_BIND, str(tree / "src.so"), str(tree / "rootfs"), json.dumps(want))
    assert result["detached_visible"] is False  # a detached tree is in no mount table
    options = result["options"]
    assert isinstance(options, list)
    for flag, name in (("readonly", "ro"), ("nosuid", "nosuid"), ("nodev", "nodev")):
        assert (name in options) == want[flag], options
    assert ("noexec" in options) == want["noexec"]
    assert result["content"] == "driver library"
    if want["readonly"]:
        assert result["write_errno"] == errno.EROFS
        assert (tree / "src.so").read_bytes() == b"driver library"
    else:
        assert result["write_errno"] == 0  # a read-write bind writes to the source
        assert (tree / "src.so").read_bytes() == b"driver libraryx"
    assert result["after_umount"] is False
    # nothing leaked into the namespace running the tests
    assert target not in mount_points()
    assert (tree / "rootfs/usr/lib/libcuda.so.1").read_bytes() == b""


_SETNS_MOUNT = """
import json, os, sys
from ocihook.linux import syscalls as L

pid, mnt = sys.argv[1], sys.argv[2]
fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
L.setns(fd, L.CLONE_NEWNS)
os.close(fd)
L.mount("ocihook-test", mnt, "tmpfs", L.MS_NOSUID | L.MS_NODEV, "size=64k,mode=0755")
with open(mnt + "/made-in-namespace", "w") as f:
    f.write("hello")
print(json.dumps({"ns": os.readlink("/proc/self/ns/mnt")}))
"""


def test_setns_into_another_mount_namespace(tree: Path, sleeper: int) -> None:
    mnt = str(tree / "mnt")
    result = run_child(_SETNS_MOUNT, str(sleeper), mnt)
    assert result["ns"] == os.readlink(f"/proc/{sleeper}/ns/mnt")
    theirs = mount_points(sleeper)
    assert mnt in theirs and "nosuid" in theirs[mnt]
    assert mnt not in mount_points()
    assert os.listdir(mnt) == []  # the host sees the empty directory under the mount
    seen = Path(f"/proc/{sleeper}/root{mnt}/made-in-namespace").read_text()
    assert seen == "hello"


_HOOK_FLOW = """
import errno, json, os, sys
from ocihook.linux import syscalls as L
from ocihook.linux import pathsafe as P

pid, src, rootfs = sys.argv[1:4]
# 1. in the host namespace: the detached, restricted copy of the host file
tree = L.bind_mount_detached(src, readonly=True, nosuid=True, nodev=True, noexec=False)
tree2 = L.bind_mount_detached(src, readonly=True, nosuid=True, nodev=True, noexec=False)
host_root = P.open_root(rootfs)
host_target = P.create_file_in_root(host_root, "/usr/lib/opened-before-setns.so")
# 2. enter the container's mount namespace
fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
L.setns(fd, L.CLONE_NEWNS)
os.close(fd)
# a target opened in the host namespace is refused
try:
    L.attach_mount(tree2, host_target)
    stale = 0
except OSError as err:
    stale = err.errno
# 3. the root and the target opened anew, in the container's namespace
root = P.open_root(rootfs)
target = P.create_file_in_root(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
L.attach_mount(tree, target)
# fd-only helpers keep working after setns, with either root descriptor
P.symlink_in_root(root, "/usr/lib/x86_64-linux-gnu/libcuda.so", "libcuda.so.1")
P.symlink_in_root(host_root, "/usr/lib/via-host-fd", "x")
print(json.dumps({"stale_errno": stale}))
"""


def test_hook_flow_detached_tree_into_container_namespace(tree: Path, sleeper: int) -> None:
    """open_tree + mount_setattr in the host namespace, setns, then move_mount onto a target
    made with pathsafe inside the 'container' namespace: the way the hook mounts."""
    rootfs = tree / "rootfs"
    target = str(rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so.1")
    result = run_child(_HOOK_FLOW, str(sleeper), str(tree / "src.so"), str(rootfs))
    assert result["stale_errno"] == errno.EINVAL
    theirs = mount_points(sleeper)
    assert target in theirs
    assert {"ro", "nosuid", "nodev"} <= set(theirs[target])
    assert target not in mount_points()
    assert Path(f"/proc/{sleeper}/root{target}").read_bytes() == b"driver library"
    assert Path(target).read_bytes() == b""  # the host sees the empty target file
    assert os.readlink(rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so") == "libcuda.so.1"
    assert os.readlink(rootfs / "usr/lib/via-host-fd") == "x"


def test_unknown_architecture_means_enosys_and_pathsafe_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine with no known numbers the new calls answer ENOSYS (never a wrong
    system call), which pathsafe takes as "no openat2" and walks in user space."""
    from ocihook.linux import pathsafe

    (tmp_path / "root/etc").mkdir(parents=True)
    (tmp_path / "root/l").symlink_to("/etc")
    monkeypatch.setattr(_linux, "_MACHINE", "riscv64")
    monkeypatch.setattr(pathsafe, "_openat2_missing", False)
    with pytest.raises(OSError) as info:
        _linux.openat2(_linux.AT_FDCWD, ".", os.O_PATH | os.O_CLOEXEC)
    assert info.value.errno == errno.ENOSYS
    root = pathsafe.open_root(str(tmp_path / "root"))
    try:
        fd = pathsafe.open_in_root(root, "/l/../../l", os.O_PATH)
        assert os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "root/etc")
        os.close(fd)
        assert pathsafe._openat2_missing
    finally:
        os.close(root)
