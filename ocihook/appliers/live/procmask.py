"""The ``/proc/driver/nvidia`` mask: a tmpfs over the container's ``/proc/driver/nvidia``
holding only the files of its own GPUs and MIG capabilities (what libnvidia-container does;
runtimes refuse such mounts in ``config.json``)."""

from __future__ import annotations

import os

from ...core.errors import ApplyError, OcihookError
from ...core.readfile import read_small
from ...plan.procmask import ProcMask
from .undo import detach, partial

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc imports collections: milliseconds at start
    from collections.abc import Callable, Sequence
    from typing import Any, NoReturn

    from .undo import Undo


__all__ = [
    "PROC_DRIVER",
    "PROC_FILES",
    "PendingMask",
    "capability_files",
    "caps_minors",
    "clone_gpu_proc_dirs",
    "gpu_dirs_of_devices",
    "mask_created_container",
    "mask_proc_driver",
    "read_proc_files",
]


PROC_DRIVER = "/proc/driver/nvidia"


#: The files of /proc/driver/nvidia copied into the mask (libnvidia-container).
PROC_FILES = ("params", "version", "registry")


def capability_files(host_dir: str, minors: set[int]) -> dict[str, bytes]:
    """The MIG capability files under ``host_dir``'s ``capabilities/`` (the host's
    ``/proc/driver/nvidia/capabilities``: ``gpu<N>/mig/gi<G>/access``,
    ``gpu<N>/mig/gi<G>/ci<C>/access``, ``mig/config``, ``mig/monitor``) whose
    ``DeviceFileMinor`` is one of ``minors`` — the ``/dev/nvidia-caps/nvidia-cap<minor>``
    nodes the container gets — by path relative to ``host_dir``, with their contents.
    NVML in the container reads them to find the capability node to open (libnvidia-container
    ``src/nvc_mount.c`` mounts the same files). Directories are walked without following
    links, at most 6 levels and 4096 entries; unreadable parts are skipped."""
    out: dict[str, bytes] = {}
    if not minors:
        return out
    budget = [4096]

    def walk(rel: str, depth: int) -> None:
        try:
            entries = sorted(os.scandir(os.path.join(host_dir, rel)), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            budget[0] -= 1
            if budget[0] < 0:
                return
            sub = f"{rel}/{entry.name}"
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < 6:
                        walk(sub, depth + 1)
                    continue
                if not entry.is_file(follow_symlinks=False):
                    continue
            except OSError:
                continue
            data = read_small(os.path.join(host_dir, sub))
            value = _info_value(data, "DeviceFileMinor")
            if value.isascii() and value.isdigit() and len(value) <= 9 and int(value) in minors:
                out[sub] = data or b""

    walk("capabilities", 1)
    return out


def caps_minors(nodes: Sequence[tuple[object, object]]) -> set[int]:
    """Minors of the ``/dev/nvidia-caps/nvidia-cap<minor>`` nodes among ``(path, minor)``
    pairs (``minor`` ``None`` when not given: read from the path); malformed items are
    skipped."""
    out: set[int] = set()
    prefix = "/dev/nvidia-caps/nvidia-cap"
    for path, minor in nodes:
        if not isinstance(path, str) or not path.startswith(prefix):
            continue
        if type(minor) is int and 0 <= minor < 1 << 20:
            out.add(minor)
        elif minor is None:
            number = path[len(prefix) :]
            if number.isascii() and number.isdigit() and len(number) <= 7:
                out.add(int(number))
    return out


def read_proc_files(host_dir: str, cap_minors: set[int] | None = None) -> dict[str, bytes]:
    """Contents for the masked ``/proc/driver/nvidia``, by path relative to it: the host's
    ``params`` with ``ModifyDeviceFiles: 0`` (the driver inside must not recreate device
    files; NVIDIA driver ``nv-procfs``), ``version`` and ``registry`` as they are, and the
    MIG capability files of ``cap_minors`` (:func:`capability_files`). Missing files are
    left out."""
    out: dict[str, bytes] = {}
    for name in PROC_FILES:
        data = read_small(os.path.join(host_dir, name))
        if data is None:
            continue
        if name == "params":
            lines = [
                b"ModifyDeviceFiles: 0" if ln.startswith(b"ModifyDeviceFiles:") else ln
                for ln in data.splitlines()
            ]
            data = b"\n".join(lines) + b"\n"
        out[name] = data
    out.update(capability_files(host_dir, cap_minors or set()))
    return out


def _info_value(data: bytes | None, key: str) -> str:
    """The value of ``key`` in a driver procfs file of ``Key: value`` lines (as
    :func:`ocihook.core.vocab.parse_gpu_information` reads them), ``""`` if absent."""
    from ...core.vocab import parse_gpu_information

    return parse_gpu_information((data or b"").decode("utf-8", "replace")).get(key, "")


def config_devices(config: dict[str, Any]) -> list[dict[str, Any]]:
    """The character device entries of ``config``'s ``linux.devices`` (OCI runtime-spec
    ``config-linux.md``, "Devices"): the list's dict entries whose ``type`` is ``"c"``
    (an entry without ``type`` counts as one), in the config's order, as the same dicts.
    A missing or non-list ``linux.devices``, and entries that are not dicts, give
    nothing; raises nothing."""
    linux = config.get("linux")
    devices = linux.get("devices") if isinstance(linux, dict) else None
    return [
        d
        for d in (devices if isinstance(devices, list) else ())
        if isinstance(d, dict) and d.get("type", "c") == "c"
    ]


def gpu_dirs_of_devices(host_dir: str, config: dict[str, Any]) -> tuple[str, ...]:
    """The ``gpus/`` entries of ``host_dir`` (the host's ``/proc/driver/nvidia``) of the GPUs
    whose node is in ``config``'s ``linux.devices`` — the GPUs a CDI spec gave the
    container: character devices ``195:<minor>`` (below 254, the modeset and control nodes),
    or, for entries without a number, paths ``/dev/nvidia<minor>`` — matched by the
    ``Device Minor`` line of each entry's ``information`` file (NVIDIA driver
    ``nv-procfs``). Sorted by name; unreadable or malformed entries and malformed
    ``linux.devices`` items are skipped, never raised."""
    minors: set[str] = set()
    for d in config_devices(config):
        major, minor = d.get("major"), d.get("minor")
        if major is not None or minor is not None:
            # the node's number decides, whatever its name in the container
            if major == 195 and type(minor) is int and 0 <= minor < 254:
                minors.add(str(minor))
            continue
        path = d.get("path")
        if isinstance(path, str) and path.startswith("/dev/nvidia"):
            number = path[len("/dev/nvidia") :]
            if number.isascii() and number.isdigit() and len(number) <= 3:
                minors.add(str(int(number)))
    if not minors:
        return ()
    gpus = os.path.join(host_dir, "gpus")
    try:
        names = sorted(os.listdir(gpus))
    except OSError:
        return ()
    out = []
    for name in names:
        data = read_small(os.path.join(gpus, name, "information"))
        if _info_value(data, "Device Minor") in minors:
            out.append(name)
    return tuple(out)


def clone_gpu_proc_dirs(mask: ProcMask) -> dict[str, int]:
    """Detached read-only, nosuid, nodev, noexec clones of the selected GPUs' host
    ``gpus/<bus id>`` directories (``open_tree``), by name; made where the host paths are
    visible (the host namespace, or the container's before ``pivot_root``)."""
    from ...linux import syscalls as _linux

    fds: dict[str, int] = {}
    try:
        for name in mask.gpu_dirs:
            path = os.path.join(mask.host_dir, "gpus", name)
            if os.path.isdir(path):
                fds[name] = _linux.bind_mount_detached(
                    path, readonly=True, nosuid=True, nodev=True, noexec=True
                )
    except OSError as e:
        for fd in fds.values():
            os.close(fd)
        raise ApplyError(f"cannot clone a GPU's proc directory: {e.strerror}", path=path) from None
    return fds


def _mask_size(files: dict[str, bytes]) -> int:
    """Bytes for the mask's tmpfs: every file and directory takes at least a page, so
    1 MiB plus a page per file and per directory level (tmpfs allocates as written)."""
    pages = sum(1 + f.count("/") + len(data) // 4096 for f, data in files.items())
    return (1 << 20) + pages * 4096


def _write_nested(top: int, rel: str, data: bytes) -> None:
    """Create ``rel`` (``a/b/file``, directories made as needed, 0555) with ``data`` (0444)
    below the directory ``top``, never following a link."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ApplyError("a /proc/driver/nvidia file name is malformed", value=rel)
    fds: list[int] = []
    here = top
    try:
        for part in parts[:-1]:
            try:  # noqa: SIM105 (contextlib is not imported on this path)
                os.mkdir(part, 0o555, dir_fd=here)
            except FileExistsError:
                pass
            here = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=here)
            fds.append(here)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(parts[-1], flags, 0o444, dir_fd=here)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    finally:
        for fd in fds:
            os.close(fd)


def _fd_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


def mask_proc_driver(
    root_fd: int,
    files: dict[str, bytes],
    gpu_fds: dict[str, int],
    undo: list[Undo],
    fd_path: Callable[[int], str] = _fd_path,
) -> bool:
    """Mask the container's ``/proc/driver/nvidia`` (see :class:`ocihook.plan.edits.ProcMask`):
    a tmpfs mounted on it (resolved inside the rootfs), the ``files`` written there, the
    ``gpu_fds`` clones attached under ``gpus/``, then the tmpfs made read-only. Runs in the
    container's mount namespace. Returns False (nothing done) when the container's procfs
    has no ``/proc/driver/nvidia`` (no driver to hide). ``fd_path`` names a descriptor
    for ``mount(2)`` (default ``/proc/self/fd/N``; after ``pivot_root`` the container's
    ``/proc`` belongs to its pid namespace, where ``self`` does not resolve for a host
    process: :func:`mask_created_container` passes a path through the host's procfs).

    Raises:
        ApplyError: a step failed (the undo list detaches the tmpfs).
    """
    from ...linux import pathsafe as ps
    from ...linux import syscalls as _linux

    directory = os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC
    try:
        target = ps.open_in_root(root_fd, PROC_DRIVER, directory)
    except ApplyError as e:
        if isinstance(e.__cause__, (FileNotFoundError, NotADirectoryError)):
            return False
        raise
    try:
        parent = ps.open_in_root(root_fd, os.path.dirname(PROC_DRIVER), directory)
    except ApplyError:
        os.close(target)
        raise
    try:
        masked = os.fstat(target).st_dev != os.fstat(parent).st_dev
    finally:
        os.close(parent)
    if masked and os.path.exists(fd_path(target) + "/params"):
        os.close(target)  # a tmpfs of ours is there already (the hook ran twice)
        return False
    try:
        _linux.mount(
            "tmpfs",
            fd_path(target),
            "tmpfs",
            _linux.MS_NOSUID | _linux.MS_NODEV | _linux.MS_NOEXEC,
            f"mode=0555,size={_mask_size(files)}",
        )
    except OSError as e:
        raise ApplyError(f"cannot mask {PROC_DRIVER}: {e.strerror}", path=PROC_DRIVER) from None
    finally:
        os.close(target)
    undo.append(partial(detach, root_fd, PROC_DRIVER))
    top = ps.open_in_root(root_fd, PROC_DRIVER, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name, data in files.items():
            _write_nested(top, name, data)
        if gpu_fds:
            os.mkdir("gpus", 0o555, dir_fd=top)
            gpus = os.open("gpus", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
            try:
                for name, tree in gpu_fds.items():
                    os.mkdir(name, 0o555, dir_fd=gpus)
                    point = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=gpus)
                    try:
                        _linux.attach_mount(tree, point)
                    finally:
                        os.close(point)
            finally:
                os.close(gpus)
        _linux.mount(
            None,
            fd_path(top),
            None,
            _linux.MS_REMOUNT
            | _linux.MS_BIND
            | _linux.MS_RDONLY
            | _linux.MS_NOSUID
            | _linux.MS_NODEV
            | _linux.MS_NOEXEC,
            None,
        )
    except OSError as e:
        raise ApplyError(f"cannot mask {PROC_DRIVER}: {e.strerror}", path=PROC_DRIVER) from None
    finally:
        os.close(top)
    return True


def mask_created_container(
    pid: int, mask: ProcMask, nodes: Sequence[tuple[object, object]]
) -> bool:
    """Mask ``/proc/driver/nvidia`` in a container the runtime has *created* (``runc
    create`` returned; its init ``pid`` waits to be started, after ``pivot_root``): what
    the createContainer hook would do, done by the caller of ``create`` instead, so that
    no second process starts. ``nodes`` are the container's device nodes as
    ``(path, minor)`` pairs (their MIG capability minors select the capability files).

    :class:`PendingMask` in one step: a caller that runs the runtime itself makes the
    :class:`PendingMask` while the runtime creates the container.

    Returns:
        Whether a mask was mounted (False: the container's procfs has no
        ``/proc/driver/nvidia``).

    Raises:
        ApplyError: the process is not in a mount namespace of its own, or a step failed
            (the message is the child's).
    """
    return PendingMask(mask, nodes).apply(pid)


class PendingMask:
    """A ``/proc/driver/nvidia`` mask made ready before its container exists, mounted in it
    by :meth:`apply` once the runtime has created it (see :func:`mask_created_container`).

    Made in the host's namespaces: the host files are read, the GPU directories cloned
    (``open_tree``), and a child forked that waits for the container's init pid on a pipe.
    Given the pid, the child (the caller never leaves the host's mount namespace, and never
    runs anything from the container) checks that the pid is in a mount namespace of its
    own, joins it (``setns``) and mounts the mask there, naming descriptors through the
    host's procfs, and answers on a second pipe. :meth:`cancel` (the runtime failed) ends
    the child with nothing done. One of the two must be called.

    Raises:
        ApplyError: a GPU directory cannot be cloned, or the host's ``/proc`` opened.
        OSError: no pipe or process can be made.
    """

    def __init__(self, mask: ProcMask, nodes: Sequence[tuple[object, object]]) -> None:
        files = read_proc_files(mask.host_dir, caps_minors(nodes))
        gpu_fds = clone_gpu_proc_dirs(mask)
        child_ends: list[int] = []  # closed here once the child has its copies
        own_ends: list[int] = []  # kept for apply() and cancel(), closed if no child is made
        try:
            host_proc = os.open("/proc", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            child_ends.append(host_proc)
            pid_r, pid_w = os.pipe()
            child_ends.append(pid_r)
            own_ends.append(pid_w)
            answer_r, answer_w = os.pipe()
            child_ends.append(answer_w)
            own_ends.append(answer_r)
            self._child = os.fork()
            if self._child == 0:  # pragma: no cover - measured through the parent
                os.close(pid_w)
                os.close(answer_r)
                _mask_in_child(pid_r, answer_w, host_proc, files, gpu_fds)
        except BaseException:
            for fd in own_ends:
                os.close(fd)
            raise
        finally:
            for fd in (*child_ends, *gpu_fds.values()):
                os.close(fd)
        self._pid_w, self._answer_r = pid_w, answer_r

    def apply(self, pid: int) -> bool:
        """Mount the mask in the container whose init is ``pid``; whether it was mounted
        (False: the container's procfs has no ``/proc/driver/nvidia``).

        Raises:
            ApplyError: ``pid`` is not a process in a mount namespace of its own, or a step
                failed (the message is the child's), or the mask was applied or
                cancelled already.
        """
        if self._child <= 0:
            raise ApplyError(f"the {PROC_DRIVER} mask was applied or cancelled already")
        try:  # noqa: SIM105 (contextlib is not imported on this path)
            os.write(self._pid_w, str(int(pid)).encode())
        except OSError:
            pass  # the child is gone: its status says so below
        os.close(self._pid_w)
        chunks = []
        while True:
            chunk = os.read(self._answer_r, 4096)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(self._answer_r)
        child, self._child = self._child, 0
        _pid, status = os.waitpid(child, 0)
        answer = b"".join(chunks)
        if answer[:1] == b"E":  # the child's one-line message, formatted there
            raise ApplyError(answer[1:].decode(errors="replace"))
        if status != 0 or answer not in (b"0", b"1"):
            code = os.waitstatus_to_exitcode(status)
            how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
            raise ApplyError(f"the process masking {PROC_DRIVER} failed ({how})")
        return answer == b"1"

    def cancel(self) -> None:
        """End the waiting child with nothing done (the container was not created); a
        second call, or one after :meth:`apply`, does nothing."""
        if self._child <= 0:
            return
        os.close(self._pid_w)
        os.close(self._answer_r)
        child, self._child = self._child, 0
        os.waitpid(child, 0)


def _mask_in_child(
    pid_r: int, answer_w: int, host_proc: int, files: dict[str, bytes], gpu_fds: dict[str, int]
) -> NoReturn:  # pragma: no cover - runs in the child of PendingMask
    """The child of :class:`PendingMask`: wait for the pid, mask, answer, exit (whatever
    happens: it never returns into its parent's code)."""
    code = 1
    try:
        from ...linux import pathsafe
        from ...linux import syscalls as _linux
        from .procs import check_container_pid, refuse_own_mount_namespace

        if TYPE_CHECKING:
            import signal
        else:  # not signal: its IntEnum wrappers import enum (milliseconds)
            import _signal as signal
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
            # not the caller's handlers (they forward to the runtime), and not SIG_DFL: a
            # signal to the process group must not end the mask of a create the runtime
            # completes; the pipe ends this child when its caller ends
            signal.signal(sig, signal.SIG_IGN)
        data = b""
        while len(data) < 32:
            chunk = os.read(pid_r, 32)
            if not chunk:
                break
            data += chunk
        if not data:  # cancelled
            os._exit(0)
        pid = int(data)
        check_container_pid(pid)  # its error names the pid
        try:
            ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise ApplyError(
                f"cannot open the container's mount namespace: {e.strerror}", value=pid
            ) from None
        refuse_own_mount_namespace(ns, pid)  # on the descriptor entered below
        _linux.setns(ns, _linux.CLONE_NEWNS)
        os.fchdir(host_proc)  # "self" resolves in the host's procfs
        root_fd = pathsafe.open_root("/")
        done = mask_proc_driver(root_fd, files, gpu_fds, [], lambda fd: f"self/fd/{fd}")
        os.write(answer_w, b"1" if done else b"0")
        code = 0
    except OcihookError as e:
        os.write(answer_w, b"E" + str(e).encode(errors="replace")[:4000])
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        os.write(answer_w, b"E" + f"cannot mask {PROC_DRIVER}: {why}".encode(errors="replace"))
    finally:
        os._exit(code)
