"""cgroup v2 device access: extend the eBPF device program attached to a container's cgroup.

cgroup v2 has no ``devices.allow`` file. Device access is decided by programs of type
``BPF_PROG_TYPE_CGROUP_DEVICE`` attached to the cgroup (attach type ``BPF_CGROUP_DEVICE``);
runc and crun generate one from ``linux.resources.devices`` and attach it when they create the
container. To let a running container open more devices, :func:`add_device_rules` does what
libnvidia-container does, in a safer order:

1. query the programs attached to the container's cgroup (``BPF_PROG_QUERY``);
2. read each one's *xlated* instructions (``BPF_PROG_GET_FD_BY_ID`` +
   ``BPF_OBJ_GET_INFO_BY_FD``);
3. build a new program for each: allow rules first, then the old instructions unchanged
   (:func:`allow_rules_program`), and load it (``BPF_PROG_LOAD``, the verifier checks it);
4. attach the new programs *before* detaching the old ones, so that for a moment both run
   (the kernel allows a device only when every attached program allows it: the window is
   exactly as strict as before, never open).

The hybrid layout of these machines (cgroup v1 controllers plus a cgroup2 mount at
``/sys/fs/cgroup/unified``) enforces cgroup2 device programs too: the cgroup2 programs run
first, then the v1 ``devices`` check, and both must allow.

Everything here is plain Python: ``bpf(2)`` through :func:`ocihook.linux.syscalls.bpf` (ctypes,
loaded on the first call), the ``union bpf_attr`` members and ``struct bpf_prog_info`` laid
out with :mod:`struct`. Importing this module costs nothing beyond :mod:`struct`.

Sources: the kernel's ``include/uapi/linux/bpf.h`` (``union bpf_attr``, ``struct bpf_insn``,
``struct bpf_prog_info``, ``struct bpf_cgroup_dev_ctx``, ``BPF_DEVCG_*``),
``Documentation/bpf/standardization/instruction-set.rst`` (formerly
``Documentation/bpf/instruction-set.rst``: the instruction encoding), ``kernel/bpf/cgroup.c``
(attach, detach and query rules, ``__cgroup_bpf_check_dev_permission``),
``kernel/bpf/syscall.c`` (``bpf_insn_prepare_dump``: what the xlated dump rewrites), runc's
``libcontainer/cgroups/devices/devicefilter.go`` and ``libcontainer/cgroups/ebpf/ebpf.go``
(the programs runc attaches, and how it replaces them), and what the kernel did on these
machines (``/work/shared/reference/testbed.md``).
"""

from __future__ import annotations

import errno
import os
import struct
import sys

from ..core.errors import ApplyError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs ~10 ms

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from typing import Final, Protocol

    class _Rule(Protocol):
        """What is read of a rule: :class:`ocihook.plan.edits.CgroupRule` has these fields."""

        @property
        def allow(self) -> bool: ...
        @property
        def type(self) -> str: ...
        @property
        def major(self) -> int | None: ...
        @property
        def minor(self) -> int | None: ...
        @property
        def access(self) -> str: ...


__all__ = [
    "ACCESS_BITS",
    "CGROUP2_MOUNTS",
    "DEVICE_TYPES",
    "DeviceRulesUndo",
    "add_device_rules",
    "allow_rules_program",
    "attached_programs",
    "check_reloadable",
    "container_cgroup2_dir",
    "encode_insn",
    "load_program",
    "program_instructions",
]

# --- include/uapi/linux/bpf.h: struct bpf_cgroup_dev_ctx and BPF_DEVCG_* ----------------------
#: ``struct bpf_cgroup_dev_ctx { __u32 access_type; __u32 major; __u32 minor; }``: byte offsets.
CTX_ACCESS_TYPE: Final = 0
CTX_MAJOR: Final = 4
CTX_MINOR: Final = 8
#: ``BPF_DEVCG_ACC_*``, found in ``access_type >> 16``, per OCI access letter.
ACCESS_BITS: Final[dict[str, int]] = {"m": 1, "r": 2, "w": 4}
#: ``BPF_DEVCG_DEV_*``, found in ``access_type & 0xffff``, per OCI device type (``a``: any).
DEVICE_TYPES: Final[dict[str, int | None]] = {"b": 1, "c": 2, "a": None}

# --- instruction encoding (Documentation/bpf/standardization/instruction-set.rst) -----------
# opcode = operation | source | class. Classes:
_BPF_LD: Final = 0x00
_BPF_LDX: Final = 0x01
_BPF_ALU: Final = 0x04  # 32-bit arithmetic
_BPF_JMP: Final = 0x05  # 64-bit compares, call, exit
_BPF_JMP32: Final = 0x06  # 32-bit compares (Linux 5.1)
_BPF_ALU64: Final = 0x07
# sizes and modes of loads
_BPF_W: Final = 0x00
_BPF_DW: Final = 0x18
_BPF_IMM: Final = 0x00
_BPF_MEM: Final = 0x60
# source: immediate (K) or register (X)
_BPF_K: Final = 0x00
# operations
_BPF_AND: Final = 0x50
_BPF_RSH: Final = 0x70
_BPF_MOV: Final = 0xB0
_BPF_JEQ: Final = 0x10
_BPF_JSET: Final = 0x40
_BPF_JNE: Final = 0x50
_BPF_CALL: Final = 0x80
_BPF_EXIT: Final = 0x90
_BPF_TAIL_CALL: Final = 0xF0

#: ``LDX|MEM|W``: ``dst = *(u32 *)(src + off)``.
OP_LDXW: Final = _BPF_LDX | _BPF_MEM | _BPF_W
#: ``ALU|AND|K``: ``dst = (u32)dst & imm``.
OP_AND32_IMM: Final = _BPF_ALU | _BPF_AND | _BPF_K
#: ``ALU|RSH|K``: ``dst = (u32)dst >> imm``.
OP_RSH32_IMM: Final = _BPF_ALU | _BPF_RSH | _BPF_K
#: ``ALU64|MOV|K``: ``dst = imm``.
OP_MOV64_IMM: Final = _BPF_ALU64 | _BPF_MOV | _BPF_K
#: ``ALU64|MOV|X``: ``dst = src``.
OP_MOV64_REG: Final = _BPF_ALU64 | _BPF_MOV | 0x08
#: ``JMP32|JNE|K``: ``if (u32)dst != (u32)imm: pc += off``.
OP_JNE32_IMM: Final = _BPF_JMP32 | _BPF_JNE | _BPF_K
#: ``JMP32|JEQ|K``: ``if (u32)dst == (u32)imm: pc += off``.
OP_JEQ32_IMM: Final = _BPF_JMP32 | _BPF_JEQ | _BPF_K
#: ``JMP32|JSET|K``: ``if (u32)dst & (u32)imm: pc += off``.
OP_JSET32_IMM: Final = _BPF_JMP32 | _BPF_JSET | _BPF_K
#: ``JMP|EXIT``: return ``R0``.
OP_EXIT: Final = _BPF_JMP | _BPF_EXIT
#: ``LD|IMM|DW``: the two-slot 64-bit immediate load (``src_reg`` != 0: a map or other pseudo).
OP_LD_IMM64: Final = _BPF_LD | _BPF_IMM | _BPF_DW

#: ``struct bpf_insn { u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm; }``, host order.
_INSN: Final = struct.Struct("=BBhi")
INSN_SIZE: Final = 8
_LITTLE: Final = sys.byteorder == "little"

# Registers. R1 holds the context pointer on entry and R10 the frame pointer; every other
# register is uninitialised, so a whole program can only depend on R1 on entry. Our code
# still keeps R1 and R2 intact (runc's code reads the device type into R2 and re-reads it;
# libnvidia-container once clobbered it and broke O_RDWR opens) and works in R3-R5 only.
_R0, _R1, _R3, _R4, _R5 = 0, 1, 3, 4, 5
_DEVTYPE, _ACCESS, _SCRATCH = _R3, _R4, _R5

# --- union bpf_attr members (include/uapi/linux/bpf.h), leading fields only --------------
#: BPF_PROG_LOAD: prog_type, insn_cnt, insns, license, log_level, log_size, log_buf,
#: kern_version, prog_flags, prog_name[16], prog_ifindex, expected_attach_type.
_PROG_LOAD: Final = struct.Struct("=IIQQIIQII16sII")
#: BPF_PROG_ATTACH / BPF_PROG_DETACH: target_fd, attach_bpf_fd, attach_type, attach_flags,
#: replace_bpf_fd.
_PROG_ATTACH: Final = struct.Struct("=IIIII")
#: BPF_PROG_QUERY: target_fd, attach_type, query_flags, attach_flags, prog_ids, prog_cnt, pad.
_PROG_QUERY: Final = struct.Struct("=IIIIQII")
#: BPF_PROG_GET_FD_BY_ID: prog_id, next_id, open_flags.
_GET_FD_BY_ID: Final = struct.Struct("=III")
#: BPF_OBJ_GET_INFO_BY_FD: bpf_fd, info_len, info.
_GET_INFO: Final = struct.Struct("=IIQ")
#: struct bpf_prog_info up to ``name``: type, id, tag[8], jited_prog_len, xlated_prog_len,
#: jited_prog_insns, xlated_prog_insns, load_time, created_by_uid, nr_map_ids, map_ids,
#: name[16] (80 bytes; the kernel copies back at most this many).
_PROG_INFO: Final = struct.Struct("=II8sIIQQQIIQ16s")
_INFO_TYPE, _INFO_XLATED_LEN, _INFO_XLATED_PTR, _INFO_NR_MAPS = 0, 20, 32, 52

#: BPF_CGROUP_MAX_PROGS (include/linux/bpf-cgroup-defs.h): a first query of this many ids
#: normally suffices.
_QUERY_SLOTS: Final = 64
#: Verifier log kept on a refused load (Linux 6.4+ keeps the tail when it overflows).
_LOG_SIZE: Final = 1 << 18
#: Name given to the programs we load (shown by ``bpftool prog``).
PROG_NAME: Final = b"ocihook_devices"


# --- where the container's cgroup2 is -------------------------------------------------------


def _unescape(field: str) -> str:
    r"""Undo mountinfo's octal escapes (``\040`` space, ``\011`` tab, ``\012``, ``\134``)."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        c = field[i]
        digits = field[i + 1 : i + 4]
        if c == "\\" and len(digits) == 3 and all(d in "01234567" for d in digits):
            out.append(chr(int(digits, 8)))
            i += 4
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _read_lines(path: str, what: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read().splitlines()
    except OSError as e:
        raise ApplyError(f"cannot read {what}: {e.strerror}", path=path) from None


def _within(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (both absolute, ``/``-separated), or None outside it."""
    root = root.rstrip("/")
    if path == root or not root:
        return path[len(root) :].lstrip("/")
    if path.startswith(root + "/"):
        return path[len(root) + 1 :]
    return None


#: Where a host mounts the cgroup2 hierarchy: pure v2, then hybrid (systemd's layouts).
CGROUP2_MOUNTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")


def _listed_at_usual_mount(pid: int, rel: str, mounts: Sequence[str]) -> str | None:
    """The directory of the group ``rel`` below the first of ``mounts`` that is a cgroup2
    directory (it has ``cgroup.controllers``, a file only cgroup2 has) and whose
    ``cgroup.procs`` there lists ``pid``: that directory is the process's group, as a
    path shows it now. ``None`` when none does (a bind of part of the hierarchy, another
    cgroup namespace, an unusual mount point): mountinfo decides then."""
    want = str(pid)
    for mount in mounts:
        group = os.path.normpath(mount + rel)
        try:
            if not os.path.isfile(os.path.join(group, "cgroup.controllers")):
                continue
            with open(os.path.join(group, "cgroup.procs")) as f:
                listed = f.read().split()
        except OSError:
            continue
        if want in listed:
            return group
    return None


def container_cgroup2_dir(
    pid: int, *, proc: str = "/proc", usual_mounts: Sequence[str] | None = None
) -> str | None:
    """The host directory of the cgroup2 group that process ``pid`` belongs to.

    Joins the ``0::/path`` line of ``<proc>/<pid>/cgroup`` (``cgroups(7)``: the cgroup2
    hierarchy has id 0 and no controller list) with the mount of the ``cgroup2`` file system
    in ``<proc>/self/mountinfo`` (``proc(5)``) that shows it: ``/sys/fs/cgroup/unified`` on a
    hybrid host, ``/sys/fs/cgroup`` on a pure v2 host. A mount whose root is a sub-directory
    (a bind mount of part of the hierarchy) shows only that part; a mount covered by a later
    one on the same or a parent mount point is not used.

    Paths are as the calling process sees them: it should share the cgroup namespace of the
    host (a runtime hook does).

    The usual mount points come first (``usual_mounts``; default :data:`CGROUP2_MOUNTS`
    with the host's ``/proc``, none with another ``proc``): the group's directory below one
    of them that lists ``pid`` in its ``cgroup.procs`` is the answer without reading
    mountinfo, which has thousands of lines on a busy node (about 6.7 ms for 3,000 mounts
    on the development machine).

    Returns:
        An absolute path such as ``/sys/fs/cgroup/unified/ctr/abc``, or ``None`` when this
        mount namespace has no cgroup2 mount (or the process has no ``0::`` line).

    Raises:
        ApplyError: a file cannot be read, or no cgroup2 mount shows the process's group.
    """
    cgroup_file = f"{proc}/{pid}/cgroup"
    rel: str | None = None
    for line in _read_lines(cgroup_file, "the process's cgroup"):
        hid, sep, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if sep and sep2 and hid == "0" and not controllers:
            rel = path
            break
    if rel is None or not rel.startswith("/"):
        return None
    if usual_mounts is None:
        usual_mounts = CGROUP2_MOUNTS if proc == "/proc" else ()
    usual = _listed_at_usual_mount(pid, rel, usual_mounts)
    if usual is not None:
        return usual
    mountinfo = f"{proc}/self/mountinfo"
    # (mount id, parent id, root, mount point, fstype), in the file's order
    mounts: list[tuple[str, str, str, str, str]] = []
    for line in _read_lines(mountinfo, "mountinfo"):
        left, sep, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if not sep or len(fields) < 5 or not rfields:
            continue
        mounts.append(
            (fields[0], fields[1], _unescape(fields[3]), _unescape(fields[4]), rfields[0])
        )
    parents = {m[0]: m[1] for m in mounts}
    found_cgroup2 = False
    chosen: str | None = None
    for i, (mid, _parent, root, point, fstype) in enumerate(mounts):
        if fstype != "cgroup2":
            continue
        found_cgroup2 = True
        inside = _within(rel, root)
        if inside is None:
            continue
        ancestors, cur = set(), parents.get(mid)
        while cur is not None and cur not in ancestors:
            ancestors.add(cur)
            cur = parents.get(cur)
        covered = any(
            _within(point, later[3]) is not None and later[0] not in ancestors
            for later in mounts[i + 1 :]
        )
        if not covered:
            chosen = os.path.normpath(os.path.join(point, inside)) if inside else point
    if not found_cgroup2:
        return None
    if chosen is None:
        raise ApplyError(
            "no cgroup2 mount shows the container's cgroup",
            path=mountinfo,
            value=rel,
            hint="run the hook in the host's mount and cgroup namespaces",
        )
    return chosen


# --- the program builder (pure) -------------------------------------------------------------


def encode_insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    """One eBPF instruction, 8 bytes: ``code`` (u8), ``dst_reg``/``src_reg`` (4 bits each,
    ``dst_reg`` in the low nibble on little-endian machines), ``off`` (s16), ``imm`` (s32;
    a u32 value is stored as its two's complement), all in host byte order
    (``struct bpf_insn``, include/uapi/linux/bpf.h)."""
    if imm > 0x7FFFFFFF:
        imm -= 1 << 32
    regs = (src << 4 | dst) if _LITTLE else (dst << 4 | src)
    return _INSN.pack(code, regs, off, imm)


def _decode(insns: bytes, i: int) -> tuple[int, int, int, int, int]:
    code, regs, off, imm = _INSN.unpack_from(insns, i * INSN_SIZE)
    dst, src = (regs & 0xF, regs >> 4) if _LITTLE else (regs >> 4, regs & 0xF)
    return code, dst, src, off, imm


def _rule_text(rule: _Rule) -> str:
    major = "*" if rule.major is None else str(rule.major)
    minor = "*" if rule.minor is None else str(rule.minor)
    return f"{'allow' if rule.allow else 'deny'} {rule.type} {major}:{minor} {rule.access}"


def _check_rule(rule: _Rule) -> int:
    """Validate ``rule``; return its access mask.

    Raises:
        ApplyError: unknown type or access letter, major/minor not a u32.
    """
    if rule.type not in DEVICE_TYPES:
        raise ApplyError(
            "a device rule's type must be a, b or c",
            field="linux.resources.devices[].type",
            value=_rule_text(rule),
        )
    mask = 0
    for letter in rule.access:
        if letter not in ACCESS_BITS:
            raise ApplyError(
                "a device rule's access must be a subset of rwm",
                field="linux.resources.devices[].access",
                value=_rule_text(rule),
            )
        mask |= ACCESS_BITS[letter]
    for name, number in (("major", rule.major), ("minor", rule.minor)):
        if number is not None and (
            isinstance(number, bool) or not isinstance(number, int) or not 0 <= number < 1 << 32
        ):
            raise ApplyError(
                f"a device rule's {name} must be an unsigned 32-bit number or unset",
                field=f"linux.resources.devices[].{name}",
                value=_rule_text(rule),
            )
    return mask


def _rule_block(rule: _Rule, mask: int) -> bytes:
    """Instructions deciding ``rule``: every test jumps past the block when it fails; the
    block ends with ``R0 = allow; exit``. Expects the prologue's ``R3`` (device type) and
    ``R4`` (access); uses ``R5`` as scratch."""
    # (code, dst, imm, is_jump) — jumps get their offset once the block's length is known
    body: list[tuple[int, int, int, int, bool]] = []
    devtype = DEVICE_TYPES[rule.type]
    if devtype is not None:
        body.append((OP_JNE32_IMM, _DEVTYPE, 0, devtype, True))
    if rule.allow:
        # allow: every requested access must be in the rule (as runc's filter does):
        # skip when access & ~mask != 0. Nothing to test when the rule has all of rwm.
        if mask != 0b111:
            body.append((OP_JSET32_IMM, _ACCESS, 0, ~mask & 0xFFFF, True))
    else:
        # deny: any requested access in the rule denies: skip when access & mask == 0.
        body.append((OP_MOV64_REG, _SCRATCH, _ACCESS, 0, False))  # r5 = r4
        body.append((OP_AND32_IMM, _SCRATCH, 0, mask, False))
        body.append((OP_JEQ32_IMM, _SCRATCH, 0, 0, True))
    for offset, number in ((CTX_MAJOR, rule.major), (CTX_MINOR, rule.minor)):
        if number is not None:
            body.append((OP_LDXW, _SCRATCH, _R1, offset, False))  # r5 = *(u32 *)(r1 + off)
            body.append((OP_JNE32_IMM, _SCRATCH, 0, number, True))
    body.append((OP_MOV64_IMM, _R0, 0, 1 if rule.allow else 0, False))
    body.append((OP_EXIT, 0, 0, 0, False))
    out = bytearray()
    for index, (code, dst, src, value, is_jump) in enumerate(body):
        if is_jump:  # to the first instruction after the block
            out += encode_insn(code, dst, 0, len(body) - index - 1, value)
        elif code == OP_LDXW:
            out += encode_insn(code, dst, src, value, 0)
        else:
            out += encode_insn(code, dst, src, 0, value)
    return bytes(out)


#: ``r3 = ctx->access_type & 0xffff; r4 = ctx->access_type >> 16`` (R1, R2 untouched).
_PROLOGUE: Final = (
    encode_insn(OP_LDXW, _DEVTYPE, _R1, CTX_ACCESS_TYPE)
    + encode_insn(OP_AND32_IMM, _DEVTYPE, imm=0xFFFF)
    + encode_insn(OP_LDXW, _ACCESS, _R1, CTX_ACCESS_TYPE)
    + encode_insn(OP_RSH32_IMM, _ACCESS, imm=16)
)
#: ``r0 = 0; exit``: deny.
_DENY: Final = encode_insn(OP_MOV64_IMM, _R0, imm=0) + encode_insn(OP_EXIT)


def check_reloadable(insns: bytes) -> None:
    """Check that the xlated instructions ``insns`` of an attached program can be loaded
    again unchanged, as the tail of a new program.

    The kernel's dump (``bpf_insn_prepare_dump`` in kernel/bpf/syscall.c) turns map
    addresses into map *ids* (``BPF_LD_IMM64`` with a non-zero ``src_reg``) and leaves helper
    calls with the kernel's internal offsets (or 0) in ``imm``: neither loads again as it
    was. runc's and crun's device programs use only loads, ALU, jumps and exit.

    Raises:
        ApplyError: empty or truncated, or it refers to maps or other objects
            (``BPF_LD_IMM64`` with a pseudo source) or calls helpers, functions or tail calls.
    """
    if not insns or len(insns) % INSN_SIZE:
        raise ApplyError(
            "the attached device program's instructions are empty or truncated",
            value=len(insns),
        )
    count = len(insns) // INSN_SIZE
    i = 0
    while i < count:
        code, _dst, src, _off, _imm = _decode(insns, i)
        if code == OP_LD_IMM64:
            if src != 0:
                raise ApplyError(
                    "the attached device program refers to a BPF map or kernel object; "
                    "it cannot be extended",
                    value=f"instruction {i}: BPF_LD_IMM64 src_reg={src}",
                    hint="the program was not made by runc or crun; allow the devices when "
                    "the container is created (linux.resources.devices)",
                )
            i += 2
            continue
        if code & 0x07 in (_BPF_JMP, _BPF_JMP32) and code & 0xF0 in (_BPF_CALL, _BPF_TAIL_CALL):
            raise ApplyError(
                "the attached device program calls helpers or functions; it cannot be extended",
                value=f"instruction {i}: opcode {code:#04x}",
                hint="the program was not made by runc or crun; allow the devices when "
                "the container is created (linux.resources.devices)",
            )
        i += 1


def allow_rules_program(rules: Iterable[_Rule], base: bytes | None) -> bytes:
    """Build a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program that decides ``rules`` first and
    otherwise runs ``base``.

    Args:
        rules: device rules (:class:`ocihook.plan.edits.CgroupRule`: ``allow``, ``type``
            ``a``/``b``/``c``, ``major``/``minor`` or ``None`` for any, ``access`` a subset
            of ``rwm``), in
            OCI order: the *last* rule that matches decides (runtime-spec config-linux.md,
            "Allowed Device list"; runc's filter does the same by emitting them in reverse).
            An allow rule matches a request when the device matches and every requested
            access (``BPF_DEVCG_ACC_MKNOD`` 1, ``READ`` 2, ``WRITE`` 4 in
            ``access_type >> 16``) is in the rule; a deny rule when any is. Accesses granted
            by two different rules are not combined (as in runc's filter). Type ``a`` leaves
            the device type (``BPF_DEVCG_DEV_BLOCK`` 1, ``CHAR`` 2 in
            ``access_type & 0xffff``) unchecked; a given major/minor is still checked.
            A rule with empty access can never match and emits nothing; an ``allow a *:*
            rwm`` rule ends the program (nothing after it could run).
        base: the xlated instructions of the program to fall through to (as returned by
            :func:`program_instructions`; it keeps its own exit paths), or ``None`` to deny
            everything the rules do not decide.

    Returns:
        The instructions, ``8 * n`` bytes in host byte order: a prologue
        ``r3 = access_type & 0xffff; r4 = access_type >> 16``, one block per rule (32-bit
        compares ``JNE``/``JSET``/``JEQ`` whose relative offsets skip to the next block;
        major and minor loaded into ``r5``; ``r0 = 1`` or ``0``; ``exit``), then ``base`` or
        ``r0 = 0; exit``. ``R1`` (the context) and ``R2`` are never written, so ``base`` runs
        as if it had been entered directly.

    Raises:
        ApplyError: a malformed rule, or ``base`` cannot be loaded again
            (:func:`check_reloadable`).
    """
    blocks = bytearray()
    tail = _DENY if base is None else bytes(base)
    checked = [(rule, _check_rule(rule)) for rule in rules]  # all validated first
    for rule, mask in reversed(checked):
        if mask == 0:
            continue
        block = _rule_block(rule, mask)
        blocks += block
        if len(block) == 2 * INSN_SIZE:
            # "allow a *:* rwm" tests nothing and decides everything: what follows could
            # never run, and the verifier refuses unreachable instructions ("unreachable
            # insn N", kernel/bpf/verifier.c check_cfg)
            tail = b""
            break
    if base is not None:
        check_reloadable(base)
    if not blocks:
        return tail
    return _PROLOGUE + bytes(blocks) + tail


# --- kernel calls -----------------------------------------------------------------------------


def _fail(
    message: str, err: OSError, path: str | None = None, hint: str | None = None
) -> ApplyError:
    name = errno.errorcode.get(err.errno or 0, str(err.errno))
    return ApplyError(f"{message}: {err.strerror or name} ({name})", path=path, hint=hint)


_PERM_HINT: Final = "bpf() needs CAP_BPF and CAP_NET_ADMIN, or CAP_SYS_ADMIN (run as root)"


def _close(fd: int) -> None:
    try:  # noqa: SIM105 (contextlib is not imported on this path)
        os.close(fd)
    except OSError:
        pass


def _open_cgroup(cgroup_dir: str) -> int:
    try:
        return os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise _fail("cannot open the cgroup2 directory", e, cgroup_dir) from None


def _query(cgroup_fd: int) -> tuple[int, list[int]]:
    """(attach flags, ids) of the device programs attached to the cgroup itself (not the
    ones inherited from its ancestors). Raises OSError."""
    from . import syscalls as _linux

    slots = _QUERY_SLOTS
    for _attempt in range(8):
        ids = bytearray(4 * slots)
        attr = bytearray(
            _PROG_QUERY.pack(
                cgroup_fd,
                _linux.BPF_CGROUP_DEVICE,
                0,
                0,
                _linux.buffer_address(ids),
                slots,
                0,
            )
        )
        try:
            _linux.bpf(_linux.BPF_PROG_QUERY, attr)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            # more attached than slots; the kernel put the real count in prog_cnt
            slots = max(_PROG_QUERY.unpack(attr)[5], slots + 1)
            continue
        _fd, _type, _qflags, flags, _ptr, count, _pad = _PROG_QUERY.unpack(attr)
        return flags, list(struct.unpack_from(f"={count}I", ids))
    raise OSError(errno.ENOSPC, "programs attached faster than they can be listed")


def attached_programs(cgroup_dir: str) -> list[int]:
    """Ids of the ``BPF_CGROUP_DEVICE`` programs attached to the cgroup2 directory
    ``cgroup_dir`` itself (``BPF_PROG_QUERY``; programs attached to its ancestors also run
    but are not listed), in the order they run. ``ENOSPC`` (more programs than slots) is
    answered by asking again with the count the kernel returned.

    Raises:
        ApplyError: the directory cannot be opened, is not a cgroup2 directory (``EBADF``),
            or ``bpf()`` is not permitted (``EPERM``).
    """
    fd = _open_cgroup(cgroup_dir)
    try:
        return _query(fd)[1]
    except OSError as e:
        raise _fail("cannot list the cgroup's device programs", e, cgroup_dir, _PERM_HINT) from None
    finally:
        os.close(fd)


def _prog_fd_by_id(prog_id: int) -> int:
    """Raises OSError (ENOENT: no such program any more)."""
    from . import syscalls as _linux

    return _linux.bpf(_linux.BPF_PROG_GET_FD_BY_ID, bytearray(_GET_FD_BY_ID.pack(prog_id, 0, 0)))


def _prog_info(prog_fd: int, info: bytearray) -> bytearray:
    from . import syscalls as _linux

    attr = bytearray(_GET_INFO.pack(prog_fd, len(info), _linux.buffer_address(info)))
    _linux.bpf(_linux.BPF_OBJ_GET_INFO_BY_FD, attr)
    return info


def _instructions_of(prog_fd: int) -> bytes:
    """Xlated instructions of the device program ``prog_fd``. Raises OSError, ApplyError."""
    from . import syscalls as _linux

    first = _prog_info(prog_fd, bytearray(_PROG_INFO.size))
    prog_type = struct.unpack_from("=I", first, _INFO_TYPE)[0]
    length = struct.unpack_from("=I", first, _INFO_XLATED_LEN)[0]
    maps = struct.unpack_from("=I", first, _INFO_NR_MAPS)[0]
    if prog_type != _linux.BPF_PROG_TYPE_CGROUP_DEVICE:
        raise ApplyError("the attached program is not a cgroup device program", value=prog_type)
    if maps:
        raise ApplyError(
            "the attached device program uses BPF maps; it cannot be extended",
            value=f"{maps} maps",
            hint="the program was not made by runc or crun; allow the devices when the "
            "container is created (linux.resources.devices)",
        )
    if length == 0:
        raise ApplyError(
            "the kernel does not show the attached device program's instructions",
            hint="reading them needs CAP_BPF or CAP_SYS_ADMIN",
        )
    # A fresh zeroed struct: reusing the first answer would ask the kernel to copy the JITed
    # code and the map ids it reported to NULL pointers (EFAULT).
    buf = bytearray(length)
    second = bytearray(_PROG_INFO.size)
    struct.pack_into("=I", second, _INFO_XLATED_LEN, length)
    struct.pack_into("=Q", second, _INFO_XLATED_PTR, _linux.buffer_address(buf))
    _prog_info(prog_fd, second)
    got = struct.unpack_from("=I", second, _INFO_XLATED_LEN)[0]
    return bytes(buf[: min(got, length)])


def program_instructions(prog_id: int) -> bytes:
    """The xlated (verifier-rewritten) instructions of the BPF program with id ``prog_id``:
    ``BPF_PROG_GET_FD_BY_ID``, then ``BPF_OBJ_GET_INFO_BY_FD`` twice (the length, then the
    instructions into a buffer of that length, with a fresh zeroed ``struct bpf_prog_info``).

    Returns:
        ``8 * n`` bytes in host byte order (``struct bpf_insn``).

    Raises:
        ApplyError: no such program (``ENOENT``), ``bpf()`` not permitted, not a cgroup
            device program, it uses maps, or the kernel hides its instructions.
    """
    try:
        fd = _prog_fd_by_id(prog_id)
    except OSError as e:
        raise _fail(f"cannot open BPF program {prog_id}", e, hint=_PERM_HINT) from None
    try:
        return _instructions_of(fd)
    except OSError as e:
        raise _fail(f"cannot read BPF program {prog_id}", e, hint=_PERM_HINT) from None
    finally:
        os.close(fd)


def _load(insns: bytes, license: str, log: bytearray | None) -> int:
    from . import syscalls as _linux

    code = bytearray(insns)
    lic = bytearray(license.encode() + b"\0")
    attr = bytearray(
        _PROG_LOAD.pack(
            _linux.BPF_PROG_TYPE_CGROUP_DEVICE,
            len(insns) // INSN_SIZE,
            _linux.buffer_address(code),
            _linux.buffer_address(lic),
            1 if log is not None else 0,
            len(log) if log is not None else 0,
            _linux.buffer_address(log) if log is not None else 0,
            0,
            0,
            PROG_NAME,
            0,
            _linux.BPF_CGROUP_DEVICE,
        )
    )
    return _linux.bpf(_linux.BPF_PROG_LOAD, attr)


def _log_tail(log: bytearray, lines: int = 6) -> str:
    text = bytes(log).split(b"\0", 1)[0].decode("utf-8", "replace")
    kept = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(kept)


def load_program(insns: bytes, *, license: str = "Apache-2.0") -> int:
    """Load ``insns`` as a ``BPF_PROG_TYPE_CGROUP_DEVICE`` program with expected attach type
    ``BPF_CGROUP_DEVICE`` (``BPF_PROG_LOAD``; the verifier checks it) and return its file
    descriptor (close-on-exec; the caller closes it). A refusal (``EINVAL``, ``EACCES``) is
    retried once with a verifier log, whose last lines go into the error.

    Raises:
        ApplyError: refused by the verifier (message ends with the log's tail), ``EPERM``
            (no ``CAP_BPF``/``CAP_SYS_ADMIN``), ``E2BIG`` (too many instructions), ...
    """
    if not insns or len(insns) % INSN_SIZE:
        raise ApplyError("a BPF program is a non-empty multiple of 8 bytes", value=len(insns))
    try:
        return _load(insns, license, None)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.EACCES):
            raise _fail("cannot load the device program", e, hint=_PERM_HINT) from None
    log = bytearray(_LOG_SIZE)
    try:
        # loads where it failed without a log only if something changed meanwhile: keep it
        return _load(insns, license, log)
    except OSError as e:
        tail = _log_tail(log)
        name = errno.errorcode.get(e.errno or 0, str(e.errno))
        raise ApplyError(
            f"the kernel refused the device program ({name}): {tail or e.strerror}",
            value=f"{len(insns) // INSN_SIZE} instructions",
        ) from None


def _attach(cgroup_fd: int, prog_fd: int, flags: int) -> None:
    from . import syscalls as _linux

    attr = _PROG_ATTACH.pack(cgroup_fd, prog_fd, _linux.BPF_CGROUP_DEVICE, flags, 0)
    _linux.bpf(_linux.BPF_PROG_ATTACH, bytearray(attr))


def _detach(cgroup_fd: int, prog_fd: int) -> None:
    """BPF_PROG_DETACH of ``prog_fd``. ``attach_flags`` must be 0 (``EINVAL`` otherwise,
    seen on 6.x), even for programs attached with ``BPF_F_ALLOW_MULTI``; the program fd must
    be valid (``EINVAL``) and attached here (``ENOENT``)."""
    from . import syscalls as _linux

    attr = _PROG_ATTACH.pack(cgroup_fd, prog_fd, _linux.BPF_CGROUP_DEVICE, 0, 0)
    _linux.bpf(_linux.BPF_PROG_DETACH, bytearray(attr))


def _replace(cgroup_fd: int, flags: int, add: Sequence[int], remove: Sequence[int]) -> None:
    """Attach ``add`` then detach ``remove`` (program fds), undoing what was done if a step
    fails. With ``BPF_F_ALLOW_MULTI`` every program attached runs and all must allow, so
    while both sets are attached the old rules hold. Without it (flags 0 or
    ``BPF_F_ALLOW_OVERRIDE``, one program), attaching with the same flags replaces the
    program in one step and nothing is detached. ``ENOENT`` on detaching (someone removed
    it already) is not an error. Raises OSError.
    """
    from . import syscalls as _linux

    if not flags & _linux.BPF_F_ALLOW_MULTI:
        if len(add) != 1:
            raise OSError(errno.EINVAL, "one program replaces one program")
        _attach(cgroup_fd, add[0], flags)
        return
    attached: list[int] = []
    detached: list[int] = []
    try:
        for fd in add:
            _attach(cgroup_fd, fd, _linux.BPF_F_ALLOW_MULTI)
            attached.append(fd)
        for fd in remove:
            try:
                _detach(cgroup_fd, fd)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    raise
            else:
                detached.append(fd)
    except OSError:
        for fd in detached:  # old ones back first: the window stays strict
            try:  # noqa: SIM105
                _attach(cgroup_fd, fd, _linux.BPF_F_ALLOW_MULTI)
            except OSError:
                pass
        for fd in attached:
            try:  # noqa: SIM105
                _detach(cgroup_fd, fd)
            except OSError:
                pass
        raise


class DeviceRulesUndo:
    """What :func:`add_device_rules` returns: calling it puts the old device programs back
    (attached first) and detaches the new ones.

    It holds the programs' file descriptors (a detached program with no descriptor is freed
    by the kernel, and could not be put back); they are closed when it is called, by
    :meth:`release` (keep the change), or when it is garbage collected. Calling it twice
    does nothing the second time.
    """

    def __init__(self, cgroup_dir: str, flags: int, old: list[int], new: list[int]) -> None:
        self.cgroup_dir = cgroup_dir
        self.flags = flags
        self._old = old
        self._new = new

    @property
    def active(self) -> bool:
        """Whether there is something to undo (False once called or released, and for a
        cgroup that had no device program)."""
        return bool(self._old or self._new)

    def __call__(self) -> None:
        """Restore the old programs.

        Raises:
            ApplyError: the cgroup is gone or ``bpf()`` failed (the descriptors are
                closed anyway).
        """
        if not self.active:
            return
        try:
            cgroup_fd = _open_cgroup(self.cgroup_dir)
            try:
                _replace(cgroup_fd, self.flags, self._old, self._new)
            except OSError as e:
                raise _fail(
                    "cannot restore the cgroup's device programs", e, self.cgroup_dir
                ) from None
            finally:
                os.close(cgroup_fd)
        finally:
            self.release()

    def release(self) -> None:
        """Close the descriptors and keep the new programs."""
        fds, self._old, self._new = self._old + self._new, [], []
        for fd in fds:
            _close(fd)

    def __del__(self) -> None:
        try:  # noqa: SIM105 (at interpreter exit the module's globals may be gone)
            self.release()
        except Exception:
            pass


def add_device_rules(cgroup_dir: str, rules: Sequence[_Rule]) -> DeviceRulesUndo:
    """Let the processes of the cgroup2 group ``cgroup_dir`` access the devices ``rules``
    allow, by extending every device program attached to it.

    For each program attached to the group itself (``BPF_PROG_QUERY``): read its xlated
    instructions (:func:`program_instructions`), build ``rules`` followed by them
    (:func:`allow_rules_program`) and load that (:func:`load_program`). Then, with
    ``BPF_F_ALLOW_MULTI`` (how runc and crun attach): attach all the new programs, and only
    then detach the old ones (``BPF_PROG_DETACH`` naming each old program's fd, with
    ``attach_flags`` 0) — every attached program must allow an access, so the window between
    is as strict as before, never open. Each old program is extended separately because all
    of them must allow a device. Without ``BPF_F_ALLOW_MULTI`` (one program, flags 0 or
    ``BPF_F_ALLOW_OVERRIDE``), attaching with the same flags replaces it atomically.

    Rules are validated first (a malformed rule raises before anything is read); when none
    of them can match (no rules, or only empty access), nothing is done.

    A group with no device program attached is not restricted by cgroup2 at all (on a hybrid
    host the v1 ``devices`` controller still is): there is nothing to extend, nothing is done
    and the returned undo does nothing. Programs attached to *ancestor* groups also run and
    are left alone: a device they deny stays denied.

    Args:
        cgroup_dir: host path of the container's cgroup2 directory
            (:func:`container_cgroup2_dir`).
        rules: device rules, as for :func:`allow_rules_program`.

    Returns:
        A :class:`DeviceRulesUndo` (a ``Callable[[], None]``): call it to put the old
        programs back, or call its ``release()`` to keep the change (see there).

    Raises:
        ApplyError: naming ``cgroup_dir``: it cannot be opened or is not a cgroup2 directory,
            ``bpf()`` is not permitted, an attached program cannot be extended (maps, helper
            calls), the verifier refuses the new program, or attaching fails. Nothing is
            changed then.
    """
    from . import syscalls as _linux

    try:
        masks = [_check_rule(rule) for rule in rules]
    except ApplyError as e:
        raise e.with_path(cgroup_dir) from None
    if not any(masks):  # no rule can match anything: nothing to add
        return DeviceRulesUndo(cgroup_dir, 0, [], [])
    cgroup_fd = _open_cgroup(cgroup_dir)
    old: list[int] = []
    new: list[int] = []
    try:
        try:
            flags, ids = _query(cgroup_fd)
        except OSError as e:
            raise _fail(
                "cannot list the cgroup's device programs", e, cgroup_dir, _PERM_HINT
            ) from None
        if not ids:
            return DeviceRulesUndo(cgroup_dir, flags, [], [])
        if not flags & _linux.BPF_F_ALLOW_MULTI and len(ids) != 1:
            raise ApplyError(
                "unexpected: several device programs attached without BPF_F_ALLOW_MULTI",
                path=cgroup_dir,
                value=ids,
            )
        for prog_id in ids:
            try:
                fd = _prog_fd_by_id(prog_id)
            except OSError as e:
                raise _fail(f"cannot open BPF program {prog_id}", e, cgroup_dir) from None
            old.append(fd)
            try:
                base = _instructions_of(fd)
            except OSError as e:
                raise _fail(f"cannot read BPF program {prog_id}", e, cgroup_dir) from None
            new.append(load_program(allow_rules_program(rules, base)))
        try:
            _replace(cgroup_fd, flags, new, old)
        except OSError as e:
            raise _fail("cannot attach the device program", e, cgroup_dir, _PERM_HINT) from None
    except ApplyError as e:
        for fd in old + new:
            _close(fd)
        raise e.with_path(cgroup_dir) from None
    except BaseException:
        for fd in old + new:
            _close(fd)
        raise
    finally:
        os.close(cgroup_fd)
    return DeviceRulesUndo(cgroup_dir, flags, old, new)
