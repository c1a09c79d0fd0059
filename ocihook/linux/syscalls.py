"""Thin, typed wrappers around the Linux system calls ocihook needs and Python 3.11 lacks.

Every wrapper calls the C library through :mod:`ctypes` (its C core ``_ctypes``, which
is what the start path can afford: :class:`_CTypes`) and raises
``OSError(errno, strerror, path)`` on failure, exactly like the functions of :mod:`os`
(``path`` is the path argument as given, ``filename2`` the second one where there are two).
Calls that glibc 2.36 has wrappers for (``setns``, ``unshare``, ``mount``, ``umount2``) go
through those; the new mount API and ``openat2`` go through ``syscall(2)`` with the numbers in
:data:`SYSCALL_NUMBERS` (x86_64 and aarch64; the new calls share one number on every
architecture since Linux 5.1, the old ones do not).

Importing this module does no work beyond defining names: ``_ctypes`` and the machine name
are imported, and the C library loaded, on the first call that needs them, so the hook's fast
path does not pay for them when it has nothing to mount.

Sources: ``mount(2)``, ``umount(2)``, ``setns(2)``, ``unshare(2)``, ``openat2(2)``,
``open_tree(2)``, ``move_mount(2)``, ``mount_setattr(2)``; constants from the kernel's
``include/uapi/linux/{mount,openat2,fcntl,sched}.h``.
"""

from __future__ import annotations

import errno
import os

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs ~10 ms

if TYPE_CHECKING:
    import ctypes
    from typing import Any, Final, TypeAlias

    #: A path argument: what :func:`os.fsencode` accepts.
    StrPath: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]

__all__ = [
    "AT_EMPTY_PATH",
    "AT_FDCWD",
    "AT_RECURSIVE",
    "AT_SYMLINK_NOFOLLOW",
    "CLONE_NEWNS",
    "CLONE_NEWUSER",
    "MNT_DETACH",
    "MNT_FORCE",
    "MOUNT_ATTR_NODEV",
    "MOUNT_ATTR_NOEXEC",
    "MOUNT_ATTR_NOSUID",
    "MOUNT_ATTR_NOSYMFOLLOW",
    "MOUNT_ATTR_RDONLY",
    "MOVE_MOUNT_F_EMPTY_PATH",
    "MOVE_MOUNT_T_EMPTY_PATH",
    "MS_BIND",
    "MS_MOVE",
    "MS_NODEV",
    "MS_NOEXEC",
    "MS_NOSUID",
    "MS_PRIVATE",
    "MS_RDONLY",
    "MS_REC",
    "MS_REMOUNT",
    "MS_SHARED",
    "MS_SLAVE",
    "MS_UNBINDABLE",
    "OPEN_TREE_CLOEXEC",
    "OPEN_TREE_CLONE",
    "RESOLVE_BENEATH",
    "RESOLVE_IN_ROOT",
    "RESOLVE_NO_MAGICLINKS",
    "RESOLVE_NO_SYMLINKS",
    "RESOLVE_NO_XDEV",
    "SYSCALL_NUMBERS",
    "UMOUNT_NOFOLLOW",
    "attach_mount",
    "bind_mount_detached",
    "mount",
    "mount_setattr",
    "move_mount",
    "open_tree",
    "openat2",
    "set_fs_ids",
    "setns",
    "syscall_number",
    "umount2",
    "unshare",
]

# --- include/uapi/linux/sched.h -------------------------------------------------------------
CLONE_NEWNS: Final = 0x00020000
CLONE_NEWUSER: Final = 0x10000000

# --- include/uapi/linux/mount.h: mount(2) flags ---------------------------------------------
MS_RDONLY: Final = 0x1
MS_NOSUID: Final = 0x2
MS_NODEV: Final = 0x4
MS_NOEXEC: Final = 0x8
MS_REMOUNT: Final = 0x20
MS_BIND: Final = 0x1000
MS_MOVE: Final = 0x2000
MS_REC: Final = 0x4000
MS_UNBINDABLE: Final = 1 << 17
MS_PRIVATE: Final = 1 << 18
MS_SLAVE: Final = 1 << 19
MS_SHARED: Final = 1 << 20

# --- umount2(2) flags -----------------------------------------------------------------------
MNT_FORCE: Final = 0x1
MNT_DETACH: Final = 0x2
UMOUNT_NOFOLLOW: Final = 0x8

# --- include/uapi/linux/fcntl.h -------------------------------------------------------------
AT_FDCWD: Final = -100
AT_SYMLINK_NOFOLLOW: Final = 0x100
AT_EMPTY_PATH: Final = 0x1000
AT_RECURSIVE: Final = 0x8000

# --- include/uapi/linux/mount.h: new mount API ----------------------------------------------
OPEN_TREE_CLONE: Final = 0x1
OPEN_TREE_CLOEXEC: Final = os.O_CLOEXEC
MOVE_MOUNT_F_SYMLINKS: Final = 0x01
MOVE_MOUNT_F_EMPTY_PATH: Final = 0x04
MOVE_MOUNT_T_SYMLINKS: Final = 0x10
MOVE_MOUNT_T_EMPTY_PATH: Final = 0x40
MOUNT_ATTR_RDONLY: Final = 0x1
MOUNT_ATTR_NOSUID: Final = 0x2
MOUNT_ATTR_NODEV: Final = 0x4
MOUNT_ATTR_NOEXEC: Final = 0x8
MOUNT_ATTR_NOSYMFOLLOW: Final = 0x00200000
_MOUNT_ATTR_SIZE_VER0: Final = 32

# --- include/uapi/linux/openat2.h -----------------------------------------------------------
RESOLVE_NO_XDEV: Final = 0x01
RESOLVE_NO_MAGICLINKS: Final = 0x02
RESOLVE_NO_SYMLINKS: Final = 0x04
RESOLVE_BENEATH: Final = 0x08
RESOLVE_IN_ROOT: Final = 0x10

#: System call numbers per ``platform.machine()``: x86_64 from
#: ``arch/x86/entry/syscalls/syscall_64.tbl``, aarch64 from ``include/uapi/asm-generic/unistd.h``.
SYSCALL_NUMBERS: Final[dict[str, dict[str, int]]] = {
    "x86_64": {
        "mount": 165,
        "umount2": 166,
        "unshare": 272,
        "setns": 308,
        "open_tree": 428,
        "move_mount": 429,
        "openat2": 437,
        "mount_setattr": 442,
    },
    "aarch64": {
        "umount2": 39,
        "mount": 40,
        "unshare": 97,
        "setns": 268,
        "open_tree": 428,
        "move_mount": 429,
        "openat2": 437,
        "mount_setattr": 442,
    },
}
_MACHINE_ALIASES: Final = {"amd64": "x86_64", "arm64": "aarch64"}


_MACHINE: str | None = None


def _this_machine() -> str:
    """The machine (``uname -m``), asked once, from ``os.uname()`` (importing
    :mod:`platform` for the same answer costs milliseconds on every container start)."""
    global _MACHINE
    if _MACHINE is None:
        _MACHINE = os.uname().machine
    return _MACHINE


def syscall_number(name: str, machine: str | None = None) -> int:
    """Return the number of system call ``name`` on ``machine`` (default: this machine, as
    ``platform.machine()`` says).

    Raises:
        OSError: ``ENOSYS`` when the architecture or the call is not in
            :data:`SYSCALL_NUMBERS`.
    """
    if machine is None:
        machine = _this_machine()
    machine = _MACHINE_ALIASES.get(machine, machine)
    try:
        return SYSCALL_NUMBERS[machine][name]
    except KeyError:
        raise OSError(
            errno.ENOSYS, f"{name}: no system call number known for machine {machine!r}"
        ) from None


class _CTypes:
    """The part of :mod:`ctypes` this module uses, built from ctypes' C core ``_ctypes``:
    the same names (``c_long``, ``c_char_p``, ``Structure``, ``byref``, ``get_errno``...)
    with the same behaviour.

    ``import ctypes`` takes about 3 ms on the development machine (its package defines some
    forty types, the library loaders and ``pythonapi``); ``_ctypes`` about 0.4 ms, and this
    runs on the start of every GPU container that mounts or resolves a path. The simple
    types are defined as ``Lib/ctypes/__init__.py`` defines them, a ``_SimpleCData``
    subclass per ``struct`` type code; ``c_size_t`` is the unsigned type as wide as a
    pointer; functions are ``CFuncPtr`` subclasses with the cdecl and errno flags, looked up
    in the handle ``dlopen(NULL)`` gives (what ``ctypes.CDLL(None, use_errno=True)`` does).
    """

    c_int: type[ctypes.c_int]
    c_uint: type[ctypes.c_uint]
    c_long: type[ctypes.c_long]
    c_ulong: type[ctypes.c_ulong]
    c_uint64: type[ctypes.c_uint64]
    c_char: type[ctypes.c_char]
    c_char_p: type[ctypes.c_char_p]
    c_size_t: type[ctypes.c_size_t]
    Structure: type[ctypes.Structure]

    def __init__(self) -> None:
        import _ctypes

        c: Any = _ctypes

        def simple(name: str, code: str) -> Any:
            return type(name, (c._SimpleCData,), {"_type_": code})

        self.c_int, self.c_uint = simple("c_int", "i"), simple("c_uint", "I")
        self.c_long, self.c_ulong = simple("c_long", "l"), simple("c_ulong", "L")
        self.c_uint64 = simple("c_uint64", "Q")  # unsigned long long: 64 bits on Linux
        self.c_char, self.c_char_p = simple("c_char", "c"), simple("c_char_p", "z")
        pointer_size = c.sizeof(simple("c_void_p", "P"))
        size_t: Any = self.c_uint if c.sizeof(self.c_uint) == pointer_size else self.c_ulong
        self.c_size_t = size_t
        self.Structure, self.sizeof, self.byref = c.Structure, c.sizeof, c.byref
        self.addressof, self.get_errno = c.addressof, c.get_errno
        flags = c.FUNCFLAG_CDECL | c.FUNCFLAG_USE_ERRNO
        self._function = type(
            "_Function", (c.CFuncPtr,), {"_flags_": flags, "_restype_": self.c_int}
        )
        self._handle = c.dlopen(None, c.RTLD_LOCAL)

    def function(self, name: str) -> Any:
        """The C library's function ``name`` (``AttributeError`` when it has none)."""
        return self._function((name, self))


class _Libc:
    """The C library and the structures, built on first use (see :func:`_libc`)."""

    def __init__(self) -> None:
        ctypes = _CTypes()
        self.ctypes = ctypes
        function = ctypes.function

        self.syscall = function("syscall")
        self.syscall.restype = ctypes.c_long  # variadic: arguments wrapped one by one

        self.setns = function("setns")
        self.setns.argtypes = (ctypes.c_int, ctypes.c_int)
        self.setns.restype = ctypes.c_int

        self.setfsuid = function("setfsuid")
        self.setfsuid.argtypes = (ctypes.c_uint,)
        self.setfsuid.restype = ctypes.c_int
        self.setfsgid = function("setfsgid")
        self.setfsgid.argtypes = (ctypes.c_uint,)
        self.setfsgid.restype = ctypes.c_int

        self.unshare = function("unshare")
        self.unshare.argtypes = (ctypes.c_int,)
        self.unshare.restype = ctypes.c_int

        self.mount = function("mount")
        self.mount.argtypes = (
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        )
        self.mount.restype = ctypes.c_int

        self.umount2 = function("umount2")
        self.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
        self.umount2.restype = ctypes.c_int

        u64 = ctypes.c_uint64
        # struct open_how (include/uapi/linux/openat2.h), 24 bytes
        self.OpenHow: Any = type(
            "OpenHow",
            (ctypes.Structure,),
            {"_fields_": (("flags", u64), ("mode", u64), ("resolve", u64))},
        )
        # struct mount_attr (include/uapi/linux/mount.h), MOUNT_ATTR_SIZE_VER0 bytes
        fields = (("attr_set", u64), ("attr_clr", u64), ("propagation", u64), ("userns_fd", u64))
        self.MountAttr: Any = type("MountAttr", (ctypes.Structure,), {"_fields_": fields})
        assert ctypes.sizeof(self.MountAttr) == _MOUNT_ATTR_SIZE_VER0

    def call(self, name: str, *args: ctypes._SimpleCData[Any] | ctypes._CArgObject) -> int:
        """``syscall(number(name), *args)``; returns the raw result (-1 on error)."""
        nr = self.ctypes.c_long(syscall_number(name))
        return int(self.syscall(nr, *args))


_LIBC: _Libc | None = None


def _libc() -> _Libc:
    global _LIBC
    if _LIBC is None:
        _LIBC = _Libc()
    return _LIBC


def _fail(path: StrPath | None = None, path2: StrPath | None = None) -> OSError:
    """Build the ``OSError`` for the errno the last call left (``ctypes.get_errno``); empty
    paths (``AT_EMPTY_PATH`` calls) are left out of it."""
    err = _libc().ctypes.get_errno()
    name = os.fsdecode(path) if path else None
    name2 = os.fsdecode(path2) if path2 else None
    if name2 is None:
        return OSError(err, os.strerror(err), name)
    return OSError(err, os.strerror(err), name, None, name2)


def _encode(path: StrPath | None) -> bytes | None:
    return None if path is None else os.fsencode(path)


def _long(value: int) -> ctypes.c_long:
    return _libc().ctypes.c_long(value)


# --- wrappers -------------------------------------------------------------------------------


def setns(fd: int, nstype: int) -> None:
    """Move the calling thread into the namespace ``fd`` refers to (``setns(2)``).

    ``fd`` is an open ``/proc/<pid>/ns/<kind>`` file; ``nstype`` is ``CLONE_NEWNS`` (or 0 for
    any kind). Joining a mount namespace requires a single-threaded process and
    ``CAP_SYS_ADMIN``; it also resets the root and working directory to that namespace's.

    Raises:
        OSError: ``EINVAL`` (wrong kind, or the process has threads), ``EPERM``, ``EBADF``.
    """
    lib = _libc()
    if lib.setns(fd, nstype) != 0:
        raise _fail()


def unshare(flags: int) -> None:
    """Disassociate parts of the calling thread's execution context (``unshare(2)``).

    Raises:
        OSError: ``EINVAL``, ``EPERM``, ``ENOMEM``, ``ENOSPC``, ``EUSERS``.
    """
    lib = _libc()
    if lib.unshare(flags) != 0:
        raise _fail()


def mount(
    source: StrPath | None,
    target: StrPath,
    fstype: StrPath | None,
    flags: int,
    data: StrPath | None = None,
) -> None:
    """``mount(2)``: attach ``source`` (a device, a directory for ``MS_BIND``, or ``None``)
    at ``target`` with the ``MS_*`` ``flags`` and file-system specific ``data``.

    Raises:
        OSError: with ``target`` as the file name (``source`` as the second one).
    """
    lib = _libc()
    ret = lib.mount(_encode(source), _encode(target), _encode(fstype), flags, _encode(data))
    if ret != 0:
        raise _fail(target, source)


def umount2(target: StrPath, flags: int = 0) -> None:
    """``umount2(2)``: detach the mount at ``target`` (``MNT_DETACH``, ``MNT_FORCE``,
    ``UMOUNT_NOFOLLOW``).

    Raises:
        OSError: ``EINVAL`` (not a mount point), ``EBUSY``, ``EPERM``, ``ENOENT``.
    """
    lib = _libc()
    if lib.umount2(_encode(target), flags) != 0:
        raise _fail(target)


def open_tree(dirfd: int, path: StrPath, flags: int) -> int:
    """``open_tree(2)``: return an ``O_PATH`` file descriptor for the mount at ``path``
    (relative to ``dirfd``), or with ``OPEN_TREE_CLONE`` for a detached copy of it (a new
    bind mount, in no namespace until :func:`move_mount` attaches it; closing the descriptor
    before that unmounts it).

    ``flags``: ``OPEN_TREE_CLONE``, ``OPEN_TREE_CLOEXEC``, ``AT_RECURSIVE`` (copy submounts),
    ``AT_EMPTY_PATH``, ``AT_SYMLINK_NOFOLLOW``. Linux 5.2.

    Raises:
        OSError: ``ENOENT``, ``EINVAL``, ``EPERM`` (cloning needs ``CAP_SYS_ADMIN``), ...
    """
    lib = _libc()
    ret = lib.call("open_tree", _long(dirfd), lib.ctypes.c_char_p(_encode(path)), _long(flags))
    if ret < 0:
        raise _fail(path)
    return ret


def move_mount(
    from_dirfd: int, from_path: StrPath, to_dirfd: int, to_path: StrPath, flags: int
) -> None:
    """``move_mount(2)``: move the mount at ``from_path`` (relative to ``from_dirfd``) onto
    ``to_path`` (relative to ``to_dirfd``); with ``MOVE_MOUNT_F_EMPTY_PATH`` /
    ``MOVE_MOUNT_T_EMPTY_PATH`` the descriptors themselves are meant. A detached tree from
    :func:`open_tree` may be attached in any mount namespace, but the target must be in the
    caller's current one. Linux 5.2.

    Raises:
        OSError: ``EINVAL`` (for instance, the target is in another mount namespace),
            ``ENOENT``, ``EPERM``, ``ELOOP``.
    """
    lib = _libc()
    c_char_p = lib.ctypes.c_char_p
    ret = lib.call(
        "move_mount",
        _long(from_dirfd),
        c_char_p(os.fsencode(from_path)),
        _long(to_dirfd),
        c_char_p(os.fsencode(to_path)),
        _long(flags),
    )
    if ret < 0:
        raise _fail(from_path, to_path)


def mount_setattr(
    dirfd: int,
    path: StrPath,
    flags: int,
    attr_set: int,
    attr_clr: int = 0,
    propagation: int = 0,
) -> None:
    """``mount_setattr(2)``: set ``attr_set`` and clear ``attr_clr`` (``MOUNT_ATTR_*``) on the
    mount at ``path`` relative to ``dirfd`` (``AT_EMPTY_PATH``: the descriptor itself, which
    may be a detached tree from :func:`open_tree`; ``AT_RECURSIVE``: the whole subtree).
    ``propagation`` is 0 or one of ``MS_PRIVATE``/``MS_SLAVE``/``MS_SHARED``/``MS_UNBINDABLE``.
    Linux 5.12.

    Raises:
        OSError: ``EINVAL``, ``EPERM``, ``EBUSY`` (read-only while files are open for writing).
    """
    lib = _libc()
    attr = lib.MountAttr(attr_set, attr_clr, propagation, 0)
    ret = lib.call(
        "mount_setattr",
        _long(dirfd),
        lib.ctypes.c_char_p(os.fsencode(path)),
        _long(flags),
        lib.ctypes.byref(attr),
        lib.ctypes.c_size_t(lib.ctypes.sizeof(attr)),
    )
    if ret < 0:
        raise _fail(path)


def openat2(dirfd: int, path: StrPath, flags: int, mode: int = 0, resolve: int = 0) -> int:
    """``openat2(2)``: ``openat`` with a ``struct open_how`` and ``RESOLVE_*`` restrictions.

    Unlike ``openat`` the kernel rejects unknown ``flags`` and a non-zero ``mode`` without
    ``O_CREAT``/``O_TMPFILE`` (``EINVAL``). ``O_CLOEXEC`` is *not* added: pass it. Linux 5.6.

    Returns the new file descriptor.

    Raises:
        OSError: as ``open(2)``, plus ``EXDEV`` (``RESOLVE_BENEATH``/``NO_XDEV`` violated),
            ``ELOOP`` (``RESOLVE_NO_SYMLINKS``/``NO_MAGICLINKS``), ``EAGAIN``
            (``RESOLVE_IN_ROOT``/``BENEATH`` raced with a rename or mount: retry),
            ``ENOSYS`` (kernel older than 5.6, or filtered).
    """
    lib = _libc()
    how = lib.OpenHow(flags, mode, resolve)
    ret = lib.call(
        "openat2",
        _long(dirfd),
        lib.ctypes.c_char_p(os.fsencode(path)),
        lib.ctypes.byref(how),
        lib.ctypes.c_size_t(lib.ctypes.sizeof(how)),
    )
    if ret < 0:
        raise _fail(path)
    return ret


# --- compositions ---------------------------------------------------------------------------


def bind_mount_detached(
    src_path: StrPath,
    *,
    readonly: bool,
    nosuid: bool,
    nodev: bool,
    noexec: bool,
    recursive: bool = False,
) -> int:
    """Make a detached bind mount of the host path ``src_path`` with the wanted restrictions
    and return its file descriptor (``O_PATH``, close-on-exec); attach it with
    :func:`attach_mount`, or close it to drop it.

    Run this in the *host* mount namespace, before ``setns`` into the container's: the source
    need not be visible from the container's namespace (oci-runtimes.md, "Changing a running
    container from a hook"). ``open_tree(OPEN_TREE_CLONE|OPEN_TREE_CLOEXEC)`` then
    ``mount_setattr(AT_EMPTY_PATH)`` on the detached copy, so the mount never exists anywhere
    writable. Flags are only ever added: a ``False`` keeps what the source mount has.
    ``src_path`` should already be resolved (:func:`ocihook.linux.pathsafe.resolve_in_root`); a
    final symbolic link is followed. ``recursive`` also copies (and restricts) submounts.

    Raises:
        OSError: from ``open_tree`` (``ENOENT``, ``EPERM``, ...) or ``mount_setattr``.
    """
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (AT_RECURSIVE if recursive else 0)
    fd = open_tree(AT_FDCWD, src_path, flags)
    attrs = (
        (MOUNT_ATTR_RDONLY if readonly else 0)
        | (MOUNT_ATTR_NOSUID if nosuid else 0)
        | (MOUNT_ATTR_NODEV if nodev else 0)
        | (MOUNT_ATTR_NOEXEC if noexec else 0)
    )
    try:
        if attrs:
            setattr_flags = AT_EMPTY_PATH | (AT_RECURSIVE if recursive else 0)
            try:
                mount_setattr(fd, "", setattr_flags, attrs, 0)
            except OSError as err:
                raise OSError(err.errno, err.strerror, os.fsdecode(src_path)) from None
    except BaseException:
        os.close(fd)
        raise
    return fd


def attach_mount(tree_fd: int, target_fd: int) -> None:
    """Attach the detached mount ``tree_fd`` (from :func:`bind_mount_detached`) on top of the
    file or directory ``target_fd`` refers to (an ``O_PATH`` descriptor, for instance from
    :func:`ocihook.linux.pathsafe.create_file_in_root`): ``move_mount`` with
    ``MOVE_MOUNT_F_EMPTY_PATH|MOVE_MOUNT_T_EMPTY_PATH``, so no path is looked up again.

    The target must belong to the caller's *current* mount namespace: after ``setns`` into the
    container's, open the root and the target anew there (a descriptor opened in the host
    namespace gives ``EINVAL``). The types must match (file on file, directory on directory).
    ``tree_fd`` stays open; closing it afterwards does not unmount.

    Raises:
        OSError: ``EINVAL``, ``ENOTDIR``/``EISDIR`` (type mismatch), ``EPERM``.
    """
    move_mount(tree_fd, "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH)


# --- bpf(2) ---------------------------------------------------------------------------------
# Added for ocihook.linux.cgroupv2 (cgroup v2 device programs). Constants from the kernel's
# include/uapi/linux/bpf.h; system call numbers from arch/x86/entry/syscalls/syscall_64.tbl
# (321) and include/uapi/asm-generic/unistd.h (280).

SYSCALL_NUMBERS["x86_64"]["bpf"] = 321
SYSCALL_NUMBERS["aarch64"]["bpf"] = 280

# enum bpf_cmd
BPF_PROG_LOAD: Final = 5
BPF_PROG_ATTACH: Final = 8
BPF_PROG_DETACH: Final = 9
BPF_PROG_TEST_RUN: Final = 10
BPF_PROG_GET_FD_BY_ID: Final = 13
BPF_OBJ_GET_INFO_BY_FD: Final = 15
BPF_PROG_QUERY: Final = 16
# enum bpf_prog_type
BPF_PROG_TYPE_CGROUP_DEVICE: Final = 15
# enum bpf_attach_type
BPF_CGROUP_DEVICE: Final = 6
# BPF_PROG_ATTACH flags (attach_flags)
BPF_F_ALLOW_OVERRIDE: Final = 1 << 0
BPF_F_ALLOW_MULTI: Final = 1 << 1
BPF_F_REPLACE: Final = 1 << 2

__all__ += [
    "BPF_CGROUP_DEVICE",
    "BPF_F_ALLOW_MULTI",
    "BPF_F_ALLOW_OVERRIDE",
    "BPF_F_REPLACE",
    "BPF_OBJ_GET_INFO_BY_FD",
    "BPF_PROG_ATTACH",
    "BPF_PROG_DETACH",
    "BPF_PROG_GET_FD_BY_ID",
    "BPF_PROG_LOAD",
    "BPF_PROG_QUERY",
    "BPF_PROG_TEST_RUN",
    "BPF_PROG_TYPE_CGROUP_DEVICE",
    "bpf",
    "buffer_address",
]


def bpf(cmd: int, attr: bytearray) -> int:
    """``bpf(2)``: run command ``cmd`` (``BPF_PROG_LOAD``, ``BPF_PROG_QUERY``, ...) with
    ``attr`` as its ``union bpf_attr`` (the leading bytes of the command's member, laid out
    by the caller; ``len(attr)`` is passed as the size). The kernel writes its outputs
    (``prog_cnt``, ``info_len``, ...) into ``attr`` in place. Pointers inside ``attr`` are
    addresses from :func:`buffer_address`.

    Returns the call's non-negative result: a new file descriptor for the commands that make
    one (close-on-exec), 0 for the others.

    Raises:
        OSError: the ``errno`` of the call (``EPERM`` without ``CAP_BPF``/``CAP_SYS_ADMIN``,
            ``EINVAL``, ``EACCES`` from the verifier, ``ENOSPC``, ``ENOENT``, ``E2BIG`` when
            ``attr`` has non-zero bytes the kernel does not know, ...).
    """
    lib = _libc()
    ctypes = lib.ctypes
    if not attr:
        raise OSError(errno.EINVAL, "bpf: empty attribute buffer")
    buf = (ctypes.c_char * len(attr)).from_buffer(attr)
    ret = lib.call("bpf", _long(cmd), ctypes.byref(buf), _long(len(attr)))
    if ret < 0:
        raise _fail()
    return ret


def buffer_address(buf: bytearray) -> int:
    """The address of the first byte of ``buf`` (0 for an empty one), to put in a
    ``union bpf_attr`` pointer field. The address is valid while ``buf`` lives and is not
    resized; keep a reference to ``buf`` until the call that uses it returns."""
    if not buf:
        return 0
    ctypes = _libc().ctypes
    return int(ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf)))


def set_fs_ids(uid: int, gid: int) -> tuple[int, int]:
    """Set the filesystem user and group ids of the calling thread (``setfsuid(2)``,
    ``setfsgid(2)``) and return the previous ``(uid, gid)``.

    Files created afterwards belong to ``uid:gid``: a container with a user namespace
    only accepts new files whose owner is mapped in it (else ``EOVERFLOW``). Changing the
    filesystem uid from 0 drops ``CAP_MKNOD``, ``CAP_DAC_OVERRIDE`` and the other file
    capabilities from the effective set until it is set back to 0 (capabilities(7)).

    Raises:
        OSError: ``EPERM`` when the ids did not change (the calls report no errno).
    """
    lib = _libc()
    old_gid = int(lib.setfsgid(gid))
    old_uid = int(lib.setfsuid(uid))
    if int(lib.setfsuid(uid)) != uid or int(lib.setfsgid(gid)) != gid:
        raise OSError(errno.EPERM, "setfsuid/setfsgid did not take effect")
    return old_uid, old_gid
