"""cgroup v2 device programs, against the real kernel (no mocks of it).

The kernel is the oracle twice over: every program built is *loaded* (the verifier accepts
it or says why), and its behaviour is observed through a real cgroup: a prober process
placed in a test cgroup under the cgroup2 mount opens fake device nodes made with mknod in
a temporary directory. An allowed open of a node without a driver fails with ENXIO (an
allowed /dev/null-like node, or mknod, succeeds); a denied one fails with EPERM.
``BPF_PROG_TEST_RUN`` is tried too, but cgroup device programs have no ``test_run`` in the
kernel (ENOTSUPP, 524, seen on 6.18), so that test skips and says so.

On the hybrid layout of these machines the cgroup2 device programs are enforced in addition
to the v1 ``devices`` controller (which lets the test processes do everything), so this
works without a pure cgroup v2 host; the runc test makes runc see one in a private mount
namespace. Needs root and ``bpf()``; skips with the reason otherwise. Every cgroup made
here has a unique name and is removed, with its programs detached and its processes ended.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import need_root_and

from ocihook.core.errors import ApplyError
from ocihook.linux import cgroupv2
from ocihook.linux import syscalls as _linux
from ocihook.plan.edits import CgroupRule

# --- raw instruction encoding for test programs (independent of ocihook.linux.cgroupv2) -----------


def _raw(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """struct bpf_insn on a little-endian machine (x86_64, aarch64)."""
    if imm > 0x7FFFFFFF:
        imm -= 1 << 32
    return struct.pack("<BBhi", code, src << 4 | dst, off, imm)


_DEVTYPE = {"b": 1, "c": 2}
_ACC = {"m": 1, "r": 2, "w": 4}


def _mask(access: str) -> int:
    return sum(_ACC[c] for c in set(access))


def runc_like(rules: Sequence[CgroupRule], *, default_allow: bool = False) -> bytes:
    """A device program shaped exactly like the one runc 1.1 generates
    (libcontainer/cgroups/devices/devicefilter.go): a prologue loading the device type into
    R2, the access into R3, major into R4 and minor into R5; one block per rule, last rule
    first, that re-reads R2 and uses R1 as a temporary; 64-bit compares; then the default."""
    out = bytearray()
    out += _raw(0x61, 2, 1, 0)  # r2 = *(u32 *)(r1 + 0)
    out += _raw(0x54, 2, imm=0xFFFF)  # w2 &= 0xffff
    out += _raw(0x61, 3, 1, 0)  # r3 = *(u32 *)(r1 + 0)
    out += _raw(0x74, 3, imm=16)  # w3 >>= 16
    out += _raw(0x61, 4, 1, 4)  # r4 = major
    out += _raw(0x61, 5, 1, 8)  # r5 = minor
    for rule in reversed(rules):
        block: list[tuple[int, int, int, int]] = []  # (code, dst, src, imm); jumps: off later
        if rule.type != "a":
            block.append((0x55, 2, 0, _DEVTYPE[rule.type]))  # if r2 != type goto next
        if _mask(rule.access) != 7:
            block.append((0xBC, 1, 3, 0))  # w1 = w3
            block.append((0x54, 1, 0, _mask(rule.access)))  # w1 &= mask
            block.append((0x5D, 1, 3, 0))  # if r1 != r3 goto next
        if rule.major is not None:
            block.append((0x55, 4, 0, rule.major))
        if rule.minor is not None:
            block.append((0x55, 5, 0, rule.minor))
        block.append((0xB7, 0, 0, int(rule.allow)))  # r0 = allow
        block.append((0x95, 0, 0, 0))  # exit
        for i, (code, dst, src, imm) in enumerate(block):
            jump = code in (0x55, 0x5D)
            out += _raw(code, dst, src, len(block) - i - 1 if jump else 0, imm)
    out += _raw(0xB4, 0, imm=int(default_allow))  # w0 = default
    out += _raw(0x95)
    return bytes(out)


def R(
    type_: str, major: int | None, minor: int | None, access: str, allow: bool = True
) -> CgroupRule:
    return CgroupRule(allow=allow, type=type_, major=major, minor=minor, access=access)


#: runc's default device list (runtime-spec default devices plus mknod of everything),
#: reduced to what the probes can see: /dev/null (1:3) and "m" on every node.
RUNC_DEFAULT = [R("c", None, None, "m"), R("b", None, None, "m"), R("c", 1, 3, "rwm")]

# --- the reference model -------------------------------------------------------------------


def _device_matches(rule: CgroupRule, kind: str, major: int, minor: int) -> bool:
    return (
        (rule.type == "a" or rule.type == kind)
        and (rule.major is None or rule.major == major)
        and (rule.minor is None or rule.minor == minor)
    )


def model(
    rules: Sequence[CgroupRule],
    base: tuple[Sequence[CgroupRule], bool] | None,
    kind: str,
    major: int,
    minor: int,
    acc: int,
) -> bool:
    """What allow_rules_program(rules, base) should decide: last matching rule wins; an allow
    rule matches when the requested accesses are a subset of its own, a deny rule when they
    intersect; else the base (runc semantics: subset for both, then its default)."""
    for rule in reversed(rules):
        mask = _mask(rule.access)
        if not mask or not _device_matches(rule, kind, major, minor):
            continue
        if rule.allow and acc & ~mask == 0:
            return True
        if not rule.allow and acc & mask:
            return False
    if base is None:
        return False
    base_rules, default = base
    for rule in reversed(base_rules):
        if _device_matches(rule, kind, major, minor) and acc & ~_mask(rule.access) == 0:
            return rule.allow
    return default


# --- environment -----------------------------------------------------------------------------


def _cgroup2_mount() -> str | None:
    """Mount point of the whole cgroup2 hierarchy in this mount namespace."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fields = left.split()
            if right.split()[:1] == ["cgroup2"] and fields[3] == "/":
                return fields[4]
    return None


def _why_no_bpf() -> str | None:
    if os.geteuid() != 0:
        return "cgroup v2 device tests need root"
    if _cgroup2_mount() is None:
        return "no cgroup2 mount in /proc/self/mountinfo"
    try:
        os.close(cgroupv2.load_program(_raw(0xB7, 0, imm=1) + _raw(0x95)))
    except ApplyError as e:
        return f"bpf() BPF_PROG_LOAD is not permitted here: {e}"
    return None


@pytest.fixture(scope="module")
def cg2_mount() -> str:
    reason = _why_no_bpf()
    if reason:
        print(f"SKIP: {reason}")
        pytest.skip(reason)
    mount = _cgroup2_mount()
    assert mount is not None
    return mount


def _attr_attach(cgroup_fd: int, prog_fd: int, flags: int) -> bytearray:
    return bytearray(struct.pack("=IIIII", cgroup_fd, prog_fd, _linux.BPF_CGROUP_DEVICE, flags, 0))


def attach(cgroup_dir: str, prog_fd: int, flags: int = _linux.BPF_F_ALLOW_MULTI) -> None:
    fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        _linux.bpf(_linux.BPF_PROG_ATTACH, _attr_attach(fd, prog_fd, flags))
    finally:
        os.close(fd)


def query_flags(cgroup_dir: str) -> int:
    fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        attr = bytearray(struct.pack("=IIIIQII", fd, _linux.BPF_CGROUP_DEVICE, 0, 0, 0, 0, 0))
        _linux.bpf(_linux.BPF_PROG_QUERY, attr)
        return int(struct.unpack_from("=I", attr, 12)[0])
    finally:
        os.close(fd)


def detach_all(cgroup_dir: str) -> None:
    """Detach every device program attached to ``cgroup_dir`` (by fd: multi needs it)."""
    fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for prog_id in cgroupv2.attached_programs(cgroup_dir):
            pfd = _linux.bpf(
                _linux.BPF_PROG_GET_FD_BY_ID, bytearray(struct.pack("=III", prog_id, 0, 0))
            )
            try:
                _linux.bpf(_linux.BPF_PROG_DETACH, _attr_attach(fd, pfd, 0))
            finally:
                os.close(pfd)
    finally:
        os.close(fd)


def prog_id(prog_fd: int) -> int:
    info = bytearray(80)
    attr = bytearray(struct.pack("=IIQ", prog_fd, len(info), _linux.buffer_address(info)))
    _linux.bpf(_linux.BPF_OBJ_GET_INFO_BY_FD, attr)
    return int(struct.unpack_from("=I", info, 4)[0])


def load(insns: bytes) -> int:
    return cgroupv2.load_program(insns)


PROBER = r"""
import os, sys
for line in sys.stdin:
    op, path, *rest = line.split()
    try:
        if op == "m":
            kind, major, minor = rest
            mode = (0o020000 if kind == "c" else 0o060000) | 0o600
            os.mknod(path, mode, os.makedev(int(major), int(minor)))
            os.unlink(path)
        elif op == "loop":  # open path read-only for rest[0] seconds; count results
            import time
            end, counts = time.monotonic() + float(rest[0]), {}
            while time.monotonic() < end:
                try:
                    os.close(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
                    e = 0
                except OSError as err:
                    e = err.errno
                counts[e] = counts.get(e, 0) + 1
            print(" ".join(f"{k}:{v}" for k, v in counts.items()), flush=True)
            continue
        else:
            flags = {"r": os.O_RDONLY, "w": os.O_WRONLY, "rw": os.O_RDWR}[op]
            os.close(os.open(path, flags | os.O_CLOEXEC))
        print(0, flush=True)
    except OSError as e:
        print(e.errno, flush=True)
"""

#: Fake nodes: name -> (type, major, minor). 195/196 have no driver here (ENXIO when
#: allowed); 1:3 is the real /dev/null driver.
NODES = {
    "c195_0": ("c", 195, 0),
    "c195_1": ("c", 195, 1),
    "c196_0": ("c", 196, 0),
    "b195_0": ("b", 195, 0),
    "null": ("c", 1, 3),
}
OPS = {"r": 2, "w": 4, "rw": 6, "m": 1}


class Prober:
    """A process inside a test cgroup that opens or mknods nodes on request."""

    def __init__(self, cgroup_dir: str, node_dir: str) -> None:
        self.node_dir = node_dir
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PROBER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        with open(os.path.join(cgroup_dir, "cgroup.procs"), "w") as f:
            f.write(str(self.proc.pid))

    def ask(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def probe(self, node: str, op: str) -> int:
        path = os.path.join(self.node_dir, node)
        if op == "m":
            kind, major, minor = NODES[node]
            return int(self.ask(f"m {path}.mk {kind} {major} {minor}"))
        return int(self.ask(f"{op} {path}"))

    def allowed(self, node: str, op: str) -> bool:
        result = self.probe(node, op)
        if result in (0, errno.ENXIO):
            return True
        assert result == errno.EPERM, f"{op} {node}: unexpected {errno.errorcode.get(result)}"
        return False

    def decisions(self) -> dict[tuple[str, str], bool]:
        return {(n, op): self.allowed(n, op) for n in NODES for op in OPS}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


def expected(
    rules: Sequence[CgroupRule], base: tuple[Sequence[CgroupRule], bool] | None
) -> dict[tuple[str, str], bool]:
    return {(n, op): model(rules, base, *NODES[n], OPS[op]) for n in NODES for op in OPS}


class Lab:
    """A test cgroup with its nodes and probers; removes everything on close."""

    def __init__(self, mount: str, node_dir: str) -> None:
        self.dir = os.path.join(mount, f"ocihook-test-{uuid.uuid4().hex[:12]}")
        os.mkdir(self.dir)
        self.node_dir = node_dir
        self.probers: list[Prober] = []
        for name, (kind, major, minor) in NODES.items():
            path = os.path.join(node_dir, name)
            if not os.path.exists(path):
                mode = (0o020000 if kind == "c" else 0o060000) | 0o666
                os.mknod(path, mode, os.makedev(major, minor))

    def prober(self) -> Prober:
        p = Prober(self.dir, self.node_dir)
        self.probers.append(p)
        return p

    def set_program(self, insns: bytes, flags: int = _linux.BPF_F_ALLOW_MULTI) -> int:
        """Replace whatever is attached by ``insns``; returns the new program's id."""
        detach_all(self.dir)
        fd = load(insns)
        try:
            attach(self.dir, fd, flags)
            return prog_id(fd)
        finally:
            os.close(fd)

    def close(self) -> None:
        for p in self.probers:
            p.stop()
        detach_all(self.dir)
        os.rmdir(self.dir)


@pytest.fixture(scope="module")
def lab(cg2_mount: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Prober]]:
    """One cgroup and one prober shared by the builder tests (programs swapped per check)."""
    the_lab = Lab(cg2_mount, str(tmp_path_factory.mktemp("nodes")))
    try:
        yield the_lab, the_lab.prober()
    finally:
        the_lab.close()


@pytest.fixture
def fresh_lab(cg2_mount: str, tmp_path: Any) -> Iterator[Lab]:
    """A cgroup of its own for tests that replace programs with add_device_rules."""
    the_lab = Lab(cg2_mount, str(tmp_path))
    try:
        yield the_lab
    finally:
        the_lab.close()


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


# --- container_cgroup2_dir on procfs trees ----------------------------------------------------

HYBRID_MOUNTINFO = """\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
41 31 0:38 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
44 31 0:39 / /sys/fs/cgroup/devices rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,devices
"""
PURE_MOUNTINFO = """\
24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
"""
# the private namespace of the runc test: a child of the hierarchy bound over /sys/fs/cgroup
BOUND_MOUNTINFO = HYBRID_MOUNTINFO + (
    "90 31 0:38 /box /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw\n"
)


def _proc_tree(root: Any, cgroup: str, mountinfo: str, pid: int = 4242) -> str:
    os.makedirs(os.path.join(str(root), str(pid)))
    os.makedirs(os.path.join(str(root), "self"))
    with open(os.path.join(str(root), str(pid), "cgroup"), "w") as f:
        f.write(cgroup)
    with open(os.path.join(str(root), "self", "mountinfo"), "w") as f:
        f.write(mountinfo)
    return str(root)


def test_cgroup2_dir_hybrid(tmp_path: Any) -> None:
    proc = _proc_tree(tmp_path, "5:devices:/ctr/abc\n0::/ctr/abc\n", HYBRID_MOUNTINFO)
    assert cgroupv2.container_cgroup2_dir(4242, proc=proc) == "/sys/fs/cgroup/unified/ctr/abc"


def test_cgroup2_dir_pure_v2(tmp_path: Any) -> None:
    proc = _proc_tree(tmp_path, "0::/system.slice/ctr.scope\n", PURE_MOUNTINFO)
    assert (
        cgroupv2.container_cgroup2_dir(4242, proc=proc) == "/sys/fs/cgroup/system.slice/ctr.scope"
    )


def _own_cgroup2_group() -> str | None:
    with open("/proc/self/cgroup") as f:
        for line in f.read().splitlines():
            if line.startswith("0::"):
                return line[3:]
    return None


def test_cgroup2_dir_usual_mount_listing_the_pid(tmp_path: Any) -> None:
    """The group's directory below a usual cgroup2 mount point that lists the pid in its
    cgroup.procs is the answer; one that does not list it, or is no cgroup2 directory
    (no cgroup.controllers), is passed over and mountinfo decides as before."""
    rel = _own_cgroup2_group()
    if rel is None:
        pytest.skip("this process has no cgroup2 group (no 0:: line)")
    pid = os.getpid()
    listing, other, plain = tmp_path / "listing", tmp_path / "other", tmp_path / "plain"
    for mount, procs, controllers in (
        (listing, f"1\n{pid}\n", True),
        (other, "1\n", True),
        (plain, f"{pid}\n", False),
    ):
        group = mount / rel.lstrip("/")
        group.mkdir(parents=True)
        (group / "cgroup.procs").write_text(procs)
        if controllers:
            (group / "cgroup.controllers").write_text("cpu memory\n")
    want = os.path.normpath(f"{listing}{rel}")
    mounts = [str(other), str(plain), str(listing)]
    assert cgroupv2.container_cgroup2_dir(pid, usual_mounts=mounts) == want
    from_mountinfo = cgroupv2.container_cgroup2_dir(pid, usual_mounts=())
    assert cgroupv2.container_cgroup2_dir(pid, usual_mounts=[str(other), str(plain)]) == (
        from_mountinfo
    )
    if from_mountinfo is not None:  # the real mount point lists this process too
        assert cgroupv2.container_cgroup2_dir(pid) == from_mountinfo


def test_cgroup2_dir_root_group(tmp_path: Any) -> None:
    proc = _proc_tree(tmp_path, "0::/\n", PURE_MOUNTINFO)
    assert cgroupv2.container_cgroup2_dir(4242, proc=proc) == "/sys/fs/cgroup"


def test_cgroup2_dir_bind_mounted_subtree_shadows_the_old_mount(tmp_path: Any) -> None:
    proc = _proc_tree(tmp_path, "0::/box/ctr\n", BOUND_MOUNTINFO)
    assert cgroupv2.container_cgroup2_dir(4242, proc=proc) == "/sys/fs/cgroup/ctr"


def test_cgroup2_dir_outside_every_visible_mount(tmp_path: Any) -> None:
    proc = _proc_tree(tmp_path, "0::/elsewhere/ctr\n", BOUND_MOUNTINFO)
    with pytest.raises(ApplyError, match="no cgroup2 mount shows"):
        cgroupv2.container_cgroup2_dir(4242, proc=proc)


def test_cgroup2_dir_escaped_mount_point(tmp_path: Any) -> None:
    info = "35 24 0:30 / /sys/fs/my\\040cgroup rw - cgroup2 cgroup2 rw\n"
    proc = _proc_tree(tmp_path, "0::/a b\n", info)
    assert cgroupv2.container_cgroup2_dir(4242, proc=proc) == "/sys/fs/my cgroup/a b"


def test_cgroup2_dir_none_without_cgroup2(tmp_path: Any) -> None:
    v1_only = HYBRID_MOUNTINFO.replace("cgroup2 cgroup2", "tmpfs tmpfs")
    proc = _proc_tree(tmp_path, "5:devices:/ctr\n0::/ctr\n", v1_only)
    assert cgroupv2.container_cgroup2_dir(4242, proc=proc) is None


def test_cgroup2_dir_none_without_unified_line(tmp_path: Any) -> None:
    proc = _proc_tree(tmp_path, "5:devices:/ctr\n", HYBRID_MOUNTINFO)
    assert cgroupv2.container_cgroup2_dir(4242, proc=proc) is None


def test_cgroup2_dir_unreadable(tmp_path: Any) -> None:
    with pytest.raises(ApplyError, match="cannot read") as info:
        cgroupv2.container_cgroup2_dir(4242, proc=str(tmp_path))
    assert info.value.path == f"{tmp_path}/4242/cgroup"


def test_cgroup2_dir_of_this_process() -> None:
    mount = _cgroup2_mount()
    if mount is None:
        pytest.skip("no cgroup2 mount")
    path = cgroupv2.container_cgroup2_dir(os.getpid())
    assert path is not None and path.startswith(mount)
    with open(os.path.join(path, "cgroup.procs")) as f:
        assert str(os.getpid()) in f.read().split()


# --- the builder, without the kernel -------------------------------------------------------


def _decode(insns: bytes) -> list[tuple[int, int, int, int, int]]:
    out = []
    for i in range(0, len(insns), 8):
        code, regs, off, imm = struct.unpack_from("<BBhi", insns, i)
        out.append((code, regs & 0xF, regs >> 4, off, imm))
    return out


def test_encode_insn_layout() -> None:
    assert cgroupv2.encode_insn(0xB7, 0, imm=1) == bytes.fromhex("b700000001000000")
    # r5 = *(u32 *)(r1 + 8): dst in the low nibble, src in the high one
    assert cgroupv2.encode_insn(0x61, 5, 1, 8) == bytes.fromhex("6115080000000000")
    # if w3 != 2 goto +3 (JMP32|JNE|K)
    assert cgroupv2.encode_insn(0x56, 3, off=3, imm=2) == bytes.fromhex("5603030002000000")
    # a u32 immediate above INT32_MAX is stored as its two's complement
    assert cgroupv2.encode_insn(0x56, 5, imm=0xFFFFFFFF)[4:] == b"\xff\xff\xff\xff"


def test_no_rules_is_the_base_or_deny() -> None:
    base = runc_like(RUNC_DEFAULT)
    assert cgroupv2.allow_rules_program([], base) == base
    assert cgroupv2.allow_rules_program([R("c", 195, 0, "")], base) == base
    assert _decode(cgroupv2.allow_rules_program([], None)) == [
        (0xB7, 0, 0, 0, 0),
        (0x95, 0, 0, 0, 0),
    ]


def _all_rules() -> list[CgroupRule]:
    accesses = ["", "r", "w", "m", "rw", "rm", "wm", "rwm"]
    return [
        R(t, major, minor, acc, allow)
        for t in "abc"
        for major in (None, 195)
        for minor in (None, 0)
        for acc in accesses
        for allow in (True, False)
    ]


def _allows_everything(rule: CgroupRule) -> bool:
    return (
        rule.allow
        and rule.type == "a"
        and rule.major is None
        and rule.minor is None
        and rule.access == "rwm"
    )


def test_allow_everything_ends_the_program() -> None:
    """Nothing may follow an unconditional block: the verifier refuses unreachable code."""
    base = runc_like(RUNC_DEFAULT)
    insns = cgroupv2.allow_rules_program([R("c", 195, 0, "rw"), R("a", None, None, "rwm")], base)
    assert not insns.endswith(base)
    assert _decode(insns)[-2:] == [(0xB7, 0, 0, 0, 1), (0x95, 0, 0, 0, 0)]
    # an earlier rule is shadowed by the later allow-all; a later one still comes first
    later = cgroupv2.allow_rules_program(
        [R("a", None, None, "rwm"), R("c", 195, 0, "rw", allow=False)], base
    )
    assert len(_decode(later)) > len(_decode(insns))


def test_prepended_code_keeps_r1_r2_and_jumps_inside() -> None:
    base = runc_like(RUNC_DEFAULT)
    rules = [r for r in _all_rules() if not _allows_everything(r)]
    insns = _decode(cgroupv2.allow_rules_program(rules, base))
    assert insns[-len(base) // 8 :] == _decode(base)
    prefix = insns[: len(insns) - len(base) // 8]
    assert len(prefix) > 4
    starts = {0, len(prefix)}  # the first instruction of every block, and the base
    for i, (code, _dst, _src, _off, _imm) in enumerate(prefix):
        if code == 0x95 and i + 1 <= len(prefix):
            starts.add(i + 1)
    for i, (code, dst, src, off, _imm) in enumerate(prefix):
        cls = code & 0x07
        assert cls not in (0x02, 0x03), f"insn {i} writes memory"  # ST, STX: no stack
        if cls in (0x00, 0x01, 0x04, 0x07):  # LD, LDX, ALU, ALU64 write dst
            assert dst not in (1, 2, 10), f"insn {i} writes r{dst}"
            assert dst in (0, 3, 4, 5)
        if cls in (0x05, 0x06) and code != 0x95:
            assert 0 <= i + 1 + off <= len(prefix), f"insn {i} jumps outside"
            assert i + 1 + off in starts, f"insn {i} jumps into the middle of a block"
        if cls == 0x01:
            assert src == 1  # loads only from the context


@pytest.mark.parametrize(
    "rule",
    [
        R("x", 1, 3, "rw"),
        R("c", 1, 3, "rx"),
        R("c", -1, 3, "r"),
        R("c", 1, 1 << 32, "r"),
    ],
    ids=["type", "access", "negative-major", "huge-minor"],
)
def test_bad_rules_refused(rule: CgroupRule) -> None:
    with pytest.raises(ApplyError, match="device rule"):
        cgroupv2.allow_rules_program([rule], None)


def test_check_reloadable() -> None:
    exit1 = _raw(0xB7, 0, imm=1) + _raw(0x95)
    cgroupv2.check_reloadable(exit1)
    # a plain 64-bit constant is fine; a map reference (src_reg 1) or a call is not
    cgroupv2.check_reloadable(_raw(0x18, 3, 0, imm=7) + _raw(0) + exit1)
    with pytest.raises(ApplyError, match="map"):
        cgroupv2.check_reloadable(_raw(0x18, 3, 1, imm=7) + _raw(0) + exit1)
    with pytest.raises(ApplyError, match="calls"):
        cgroupv2.check_reloadable(_raw(0x85, imm=7) + exit1)
    with pytest.raises(ApplyError, match="truncated"):
        cgroupv2.check_reloadable(exit1[:-3])
    with pytest.raises(ApplyError, match="map"):
        cgroupv2.allow_rules_program(
            [R("c", 195, 0, "rw")], _raw(0x18, 2, 2, imm=1) + _raw(0) + exit1
        )


# --- the verifier as the oracle, behaviour through a real cgroup ---------------------------


def test_verifier_refusal_carries_the_log(cg2_mount: str) -> None:
    no_exit = _raw(0xB7, 0, imm=1)
    with pytest.raises(ApplyError, match="refused the device program") as info:
        cgroupv2.load_program(no_exit)
    print(info.value)
    assert "EINVAL" in str(info.value) or "EACCES" in str(info.value)
    uninit = _raw(0xBF, 0, 2) + _raw(0x95)  # r0 = r2: r2 is not initialised on entry
    with pytest.raises(ApplyError, match=r"R2 !read_ok"):
        cgroupv2.load_program(uninit)


@pytest.mark.parametrize("base_kind", ["deny", "runc"])
@pytest.mark.parametrize("type_", ["a", "b", "c"])
def test_every_rule_field_combination(lab: tuple[Lab, Prober], type_: str, base_kind: str) -> None:
    """Each single rule (type x major x minor x access x allow), loaded by the verifier and
    observed for 5 nodes x 4 accesses through the cgroup, against the model."""
    the_lab, prober = lab
    base = (RUNC_DEFAULT, False) if base_kind == "runc" else None
    base_insns = runc_like(RUNC_DEFAULT) if base is not None else None
    rules = [r for r in _all_rules() if r.type == type_]
    assert len(rules) == 64
    for rule in rules:
        the_lab.set_program(cgroupv2.allow_rules_program([rule], base_insns))
        got = prober.decisions()
        want = expected([rule], base)
        diff = {k: (got[k], want[k]) for k in want if got[k] != want[k]}
        assert not diff, f"{rule}: (got, want) {diff}"


def test_runc_like_base_alone(lab: tuple[Lab, Prober]) -> None:
    """The test's runc-shaped program behaves as its model (checks the oracle itself)."""
    the_lab, prober = lab
    the_lab.set_program(runc_like(RUNC_DEFAULT))
    assert prober.decisions() == expected([], (RUNC_DEFAULT, False))
    other = [R("c", 195, 1, "rwm", allow=False)]
    the_lab.set_program(runc_like(other, default_allow=True))
    assert prober.decisions() == expected([], (other, True))


def test_xlated_instructions_reload(lab: tuple[Lab, Prober]) -> None:
    """What the kernel dumps of a loaded program loads again and decides the same."""
    the_lab, prober = lab
    first = the_lab.set_program(runc_like(RUNC_DEFAULT))
    xlated = cgroupv2.program_instructions(first)
    assert len(xlated) % 8 == 0 and xlated
    second = the_lab.set_program(xlated)
    assert second != first
    assert prober.decisions() == expected([], (RUNC_DEFAULT, False))
    with pytest.raises(ApplyError, match="cannot open BPF program"):
        cgroupv2.program_instructions(first)  # freed once detached: no fd held


_rule_strategy = st.builds(
    R,
    st.sampled_from("abc"),
    st.one_of(st.none(), st.integers(0, (1 << 32) - 1)),
    st.one_of(st.none(), st.integers(0, (1 << 32) - 1)),
    st.sets(st.sampled_from("rwm")).map(lambda s: "".join(sorted(s))),
    st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(rules=st.lists(_rule_strategy, max_size=40), with_base=st.booleans())
def test_any_rules_pass_the_verifier(
    cg2_mount: str, rules: list[CgroupRule], with_base: bool
) -> None:
    base = runc_like(RUNC_DEFAULT) if with_base else None
    fd = load(cgroupv2.allow_rules_program(rules, base))
    os.close(fd)


_probe_rule = st.builds(
    R,
    st.sampled_from("abc"),
    st.sampled_from([None, 1, 195, 196]),
    st.sampled_from([None, 0, 1, 3]),
    st.sets(st.sampled_from("rwm")).map(lambda s: "".join(sorted(s))),
    st.booleans(),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rules=st.lists(_probe_rule, max_size=6), with_base=st.booleans())
def test_any_rules_behave_as_the_model(
    lab: tuple[Lab, Prober], rules: list[CgroupRule], with_base: bool
) -> None:
    the_lab, prober = lab
    base = (RUNC_DEFAULT, False) if with_base else None
    the_lab.set_program(
        cgroupv2.allow_rules_program(rules, runc_like(RUNC_DEFAULT) if base else None)
    )
    assert prober.decisions() == expected(rules, base)


# --- add_device_rules on a real cgroup (hybrid layout) ---------------------------------------

GPU0 = [R("c", 195, 0, "rw")]


def test_add_rules_to_a_runc_like_program(fresh_lab: Lab) -> None:
    old = fresh_lab.set_program(runc_like(RUNC_DEFAULT))
    p = fresh_lab.prober()
    for op in ("r", "w", "rw"):
        assert p.probe("c195_0", op) == errno.EPERM
        assert p.probe("null", op) == 0

    undo = cgroupv2.add_device_rules(fresh_lab.dir, GPU0)

    ids = cgroupv2.attached_programs(fresh_lab.dir)
    assert len(ids) == 1 and ids != [old]
    assert query_flags(fresh_lab.dir) == _linux.BPF_F_ALLOW_MULTI
    for op in ("r", "w", "rw"):  # rw: the R2 trap
        assert p.probe("c195_0", op) == errno.ENXIO, op
        assert p.probe("null", op) == 0, op
        assert p.probe("c195_1", op) == errno.EPERM, op
        assert p.probe("c196_0", op) == errno.EPERM, op
        assert p.probe("b195_0", op) == errno.EPERM, op
    assert p.probe("c195_0", "m") == 0  # the base's "c *:* m"
    assert p.decisions() == expected(GPU0, (RUNC_DEFAULT, False))

    undo()
    assert cgroupv2.attached_programs(fresh_lab.dir) == [old]  # the very same program
    assert p.probe("c195_0", "rw") == errno.EPERM
    assert p.probe("null", "rw") == 0
    assert p.decisions() == expected([], (RUNC_DEFAULT, False))
    undo()  # twice: nothing
    assert cgroupv2.attached_programs(fresh_lab.dir) == [old]


def test_add_rules_descriptors_are_closed(fresh_lab: Lab) -> None:
    fresh_lab.set_program(runc_like(RUNC_DEFAULT))
    p = fresh_lab.prober()
    before = _open_fds()
    undo = cgroupv2.add_device_rules(fresh_lab.dir, GPU0)
    assert isinstance(undo, cgroupv2.DeviceRulesUndo)
    held = _open_fds() - before
    assert len(held) == 2  # the old program and the new one, until called or released
    undo()
    assert _open_fds() == before
    undo = cgroupv2.add_device_rules(fresh_lab.dir, GPU0)
    undo.release()  # keep the rules
    assert _open_fds() == before
    assert p.probe("c195_0", "rw") == errno.ENXIO
    undo = cgroupv2.add_device_rules(fresh_lab.dir, [R("c", 195, 1, "r")])
    del undo  # dropped: closed by the garbage collector, rules kept
    assert _open_fds() == before
    assert p.probe("c195_1", "r") == errno.ENXIO and p.probe("c195_1", "w") == errno.EPERM


def test_add_rules_extends_every_multi_program(fresh_lab: Lab) -> None:
    """Two programs attached with BPF_F_ALLOW_MULTI: both must allow, so both are extended."""
    a_rules = [*RUNC_DEFAULT, R("c", 195, None, "rw")]  # null + all of 195
    b_rules = [*RUNC_DEFAULT, R("c", None, 0, "rw")]  # null + every minor 0
    fresh_lab.set_program(runc_like(a_rules))
    b_fd = load(runc_like(b_rules))
    try:
        attach(fresh_lab.dir, b_fd)
    finally:
        os.close(b_fd)
    old = cgroupv2.attached_programs(fresh_lab.dir)
    assert len(old) == 2
    p = fresh_lab.prober()
    assert p.probe("c195_0", "rw") == errno.ENXIO  # both allow
    assert p.probe("c195_1", "rw") == errno.EPERM  # B denies
    assert p.probe("c196_0", "rw") == errno.EPERM  # A denies

    undo = cgroupv2.add_device_rules(fresh_lab.dir, [R("c", 195, 1, "rw"), R("c", 196, 0, "r")])
    new = cgroupv2.attached_programs(fresh_lab.dir)
    assert len(new) == 2 and not set(new) & set(old)
    assert p.probe("c195_1", "rw") == errno.ENXIO
    assert p.probe("c196_0", "r") == errno.ENXIO
    assert p.probe("c196_0", "rw") == errno.EPERM  # r only
    assert p.probe("null", "rw") == 0
    undo()
    assert sorted(cgroupv2.attached_programs(fresh_lab.dir)) == sorted(old)
    assert p.probe("c195_1", "rw") == errno.EPERM


def test_add_rules_single_program_without_multi(fresh_lab: Lab) -> None:
    """Attached without BPF_F_ALLOW_MULTI (flags 0): replaced in one step, flags kept."""
    old = fresh_lab.set_program(runc_like(RUNC_DEFAULT), flags=0)
    assert query_flags(fresh_lab.dir) == 0
    p = fresh_lab.prober()
    undo = cgroupv2.add_device_rules(fresh_lab.dir, GPU0)
    assert query_flags(fresh_lab.dir) == 0
    assert len(cgroupv2.attached_programs(fresh_lab.dir)) == 1
    assert p.probe("c195_0", "rw") == errno.ENXIO
    undo()
    assert cgroupv2.attached_programs(fresh_lab.dir) == [old]
    assert p.probe("c195_0", "rw") == errno.EPERM


def test_add_rules_without_a_program_is_a_no_op(fresh_lab: Lab) -> None:
    assert cgroupv2.attached_programs(fresh_lab.dir) == []
    undo = cgroupv2.add_device_rules(fresh_lab.dir, GPU0)
    assert isinstance(undo, cgroupv2.DeviceRulesUndo) and not undo.active
    assert cgroupv2.attached_programs(fresh_lab.dir) == []
    undo()
    p = fresh_lab.prober()
    assert p.probe("c195_1", "rw") == errno.ENXIO  # cgroup2 does not restrict it at all


def _hammer(lab: Lab, swap: Callable[[], None], seconds: float = 1.0) -> tuple[int, dict[int, int]]:
    """Swap programs over and over while a process in the cgroup keeps opening c 195:1;
    return (rounds, {errno: count})."""
    looper = lab.prober()
    assert looper.proc.stdin is not None and looper.proc.stdout is not None
    looper.proc.stdin.write(f"loop {lab.node_dir}/c195_1 {seconds + 0.3}\n")
    looper.proc.stdin.flush()
    rounds = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        swap()
        rounds += 1
    counts = {
        int(k): int(v) for k, v in (i.split(":") for i in looper.proc.stdout.readline().split())
    }
    looper.stop()
    return rounds, counts


def test_the_window_is_never_open(fresh_lab: Lab) -> None:
    """While rules are added and undone over and over, a process that keeps opening a
    device that neither version allows never gets in. Control: libnvidia-container's order
    (detach the old program, then attach the new one) lets it in, so the probe can see a
    window when there is one."""
    base = runc_like(RUNC_DEFAULT)
    fresh_lab.set_program(base)

    def detach_first() -> None:
        fd = load(base)
        try:
            detach_all(fresh_lab.dir)
            attach(fresh_lab.dir, fd)
        finally:
            os.close(fd)

    rounds, counts = _hammer(fresh_lab, detach_first)
    print(f"control, detach first: {rounds} rounds; opens of c 195:1 by errno: {counts}")
    assert counts.get(errno.ENXIO, 0) > 0, "the probe never saw the open window"

    rounds, counts = _hammer(fresh_lab, lambda: cgroupv2.add_device_rules(fresh_lab.dir, GPU0)())
    print(f"add_device_rules + undo: {rounds} rounds; opens of c 195:1 by errno: {counts}")
    assert rounds > 10
    assert set(counts) == {errno.EPERM}, counts


def test_programs_with_maps_or_calls_are_refused(fresh_lab: Lab) -> None:
    map_attr = bytearray(struct.pack("=IIII", 2, 4, 4, 1))  # BPF_MAP_TYPE_ARRAY, 4, 4, 1
    map_fd = _linux.bpf(0, map_attr)  # BPF_MAP_CREATE
    try:
        with_map = _raw(0x18, 3, 1, imm=map_fd) + _raw(0) + _raw(0xB7, 0, imm=1) + _raw(0x95)
        fresh_lab.set_program(with_map)
    finally:
        os.close(map_fd)
    ids = cgroupv2.attached_programs(fresh_lab.dir)
    before = _open_fds()
    with pytest.raises(ApplyError, match="map") as info:
        cgroupv2.add_device_rules(fresh_lab.dir, GPU0)
    assert info.value.path == fresh_lab.dir
    assert cgroupv2.attached_programs(fresh_lab.dir) == ids
    assert _open_fds() == before
    # a helper call: bpf_get_prandom_u32 (7)
    fresh_lab.set_program(_raw(0x85, imm=7) + _raw(0xB7, 0, imm=1) + _raw(0x95))
    ids = cgroupv2.attached_programs(fresh_lab.dir)
    with pytest.raises(ApplyError, match="calls helpers") as info:
        cgroupv2.add_device_rules(fresh_lab.dir, GPU0)
    assert info.value.path == fresh_lab.dir
    assert cgroupv2.attached_programs(fresh_lab.dir) == ids
    assert _open_fds() == before


def test_errors_name_the_cgroup(cg2_mount: str, tmp_path: Any) -> None:
    with pytest.raises(ApplyError, match="EBADF") as info:
        cgroupv2.add_device_rules(str(tmp_path), GPU0)  # not a cgroup2 directory
    assert info.value.path == str(tmp_path)
    missing = os.path.join(cg2_mount, f"ocihook-missing-{uuid.uuid4().hex}")
    with pytest.raises(ApplyError, match="cannot open") as info:
        cgroupv2.add_device_rules(missing, GPU0)
    assert info.value.path == missing
    with pytest.raises(ApplyError, match="device rule") as info:
        cgroupv2.add_device_rules(missing, [R("q", 1, 1, "r")])
    assert info.value.path == missing
    with pytest.raises(ApplyError, match="EBADF"):
        cgroupv2.attached_programs(str(tmp_path))


# --- against the program runc itself attaches -------------------------------------------------

CONTAINER_SCRIPT = r"""
for d in fakegpu0 fakegpu1; do echo "READ $d $(cat /dev/$d 2>&1 | head -n 1)"; done
echo "RDWR fakegpu0 $( (: <> /dev/fakegpu0) 2>&1 | head -n 1)"
echo "NULL $( (echo x > /dev/null && : <> /dev/null && echo ok) 2>&1 | head -n 1)"
"""


def _container_view(out: str) -> dict[str, str]:
    view = {}
    for line in out.splitlines():
        tag, _, rest = line.partition(" ")
        if tag in ("READ", "RDWR"):
            name, _, result = rest.partition(" ")
            view[f"{tag} {name}"] = result
        elif tag == "NULL":
            view[tag] = rest
    return view


EPERM_TEXT = "Operation not permitted"
ENXIO_TEXT = "No such device or address"


@pytest.mark.e2e
def test_runc_program_gets_the_rules(cg2_mount: str, tmp_path: Any) -> None:
    """runc attaches its own device program on a pure cgroup2 host: make it see one in a
    private mount namespace (a child of the cgroup2 hierarchy bound over /sys/fs/cgroup),
    run a container, extend its program from the host and watch from inside."""
    need_root_and("runc", "unshare", "mount")
    from ocihook.sim.demo import find_busybox

    busybox = find_busybox()
    if busybox is None:
        pytest.skip("needs busybox (apt-get install busybox-static)")
    tag = uuid.uuid4().hex[:12]
    box = os.path.join(cg2_mount, f"ocihook-runc-{tag}")
    cid = f"ocihook-cg2-{tag}"
    bundle = tmp_path / "bundle"
    rootfs = bundle / "rootfs"
    for d in ("bin", "dev", "proc", "sys", "tmp", "etc"):
        (rootfs / d).mkdir(parents=True)
    shutil.copy2(busybox, rootfs / "bin/busybox")
    for applet in ("sh", "cat", "head", "sleep", "echo"):
        os.symlink("busybox", rootfs / "bin" / applet)
    subprocess.run(["runc", "spec"], cwd=bundle, check=True, timeout=30)
    config_path = bundle / "config.json"
    config = json.loads(config_path.read_text())
    config["process"]["terminal"] = False
    config["process"]["args"] = ["sleep", "600"]
    config["linux"]["cgroupsPath"] = f"/{cid}"
    # nodes without a cgroup rule: present, not allowed (linux.devices alone allows nothing)
    config["linux"]["devices"] = [
        {
            "path": f"/dev/fakegpu{m}",
            "type": "c",
            "major": 195,
            "minor": m,
            "fileMode": 0o666,
            "uid": 0,
            "gid": 0,
        }
        for m in (0, 1)
    ]
    config_path.write_text(json.dumps(config))
    state = str(tmp_path / "runc-state")
    log = tmp_path / "runc.log"

    def in_ns(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        """runc, in a private mount namespace where /sys/fs/cgroup is the cgroup2 dir ``box``."""
        cmd = [
            "unshare", "-m", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /sys/fs/cgroup && exec "$@"', box,
            "runc", "--root", state, *args,
        ]  # fmt: skip
        return subprocess.run(cmd, text=True, timeout=60, **kw)

    os.mkdir(box)
    started = False
    try:
        with open(log, "w") as logf:
            run = in_ns(
                "run", "-d", "--pid-file", str(tmp_path / "pid"), "--bundle", str(bundle), cid,
                stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
            )  # fmt: skip
        started = True
        assert run.returncode == 0, log.read_text()
        pid = int((tmp_path / "pid").read_text())
        cg = cgroupv2.container_cgroup2_dir(pid)
        assert cg == os.path.join(box, cid)
        runc_ids = cgroupv2.attached_programs(cg)
        assert runc_ids, "runc attached no device program"
        print(
            f"runc's program(s) {runc_ids}: {len(cgroupv2.program_instructions(runc_ids[0])) // 8} instructions"
        )

        def view() -> dict[str, str]:
            r = in_ns("exec", cid, "sh", "-c", CONTAINER_SCRIPT, capture_output=True)
            assert r.returncode == 0, r.stderr
            return _container_view(r.stdout)

        before = view()
        assert EPERM_TEXT in before["READ fakegpu0"], before
        assert EPERM_TEXT in before["READ fakegpu1"], before
        assert before["NULL"] == "ok", before

        undo = cgroupv2.add_device_rules(cg, GPU0)
        after = view()
        assert ENXIO_TEXT in after["READ fakegpu0"], after
        assert ENXIO_TEXT in after["RDWR fakegpu0"], after  # the R2 trap
        assert EPERM_TEXT in after["READ fakegpu1"], after
        assert after["NULL"] == "ok", after

        undo()
        assert cgroupv2.attached_programs(cg) == runc_ids
        again = view()
        assert EPERM_TEXT in again["READ fakegpu0"], again
        assert again["NULL"] == "ok", again
    finally:
        if started:
            in_ns("delete", "-f", cid, capture_output=True)
        leftover = os.path.join(box, cid)
        if os.path.isdir(leftover):
            detach_all(leftover)
            os.rmdir(leftover)
        os.rmdir(box)


def test_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, ocihook.linux.cgroupv2; print(sorted({'ctypes', 'typing'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
