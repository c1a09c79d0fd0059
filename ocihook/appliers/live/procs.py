"""Process and namespace checks of hook mode: the container init named by the state is a real,
different process; a ``createContainer`` hook really runs inside the container (``proc(5)``:
``status``, ``ns/mnt``, ``uid_map``)."""

from __future__ import annotations

import os

from ...core.errors import ApplyError
from ...core.hostroot import HostRoot

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable


def proc_path(root: HostRoot, pid: int, name: str) -> str:
    """The path of ``/proc/<pid>/<name>`` under the host root ``root`` (``proc(5)``;
    ``root.proc`` adds the host prefix, ``/`` unless ocihook runs against another root),
    e.g. ``proc_path(root, 42, "ns/mnt")`` -> ``"/proc/42/ns/mnt"``. Reads nothing; raises
    nothing."""
    return root.proc(f"{pid}/{name}")


def _status_field(name: str) -> list[str]:
    """A field of ``/proc/self/status`` as words (``proc(5)``)."""
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key == name:
                return value.split()
    return []


def parent_pid() -> int:
    """The host pid of the hook's parent: in ``createContainer`` the runtime's process
    inside the new container, whose host pid the state does not give (runc says 1, crun
    0). ``os.getppid()`` would answer in the container's pid namespace; the ``PPid`` of
    ``/proc/self/status`` answers in the namespace of the procfs mounted at ``/proc``,
    which before ``pivot_root`` is still the host's."""
    words = _status_field("PPid")
    ok = words and words[0].isascii() and words[0].isdigit() and len(words[0]) <= 18
    return int(words[0]) if ok else 0


def container_root_ids(pid: int) -> tuple[int, int] | None:
    """The host uid and gid of the container's root when the container has a user
    namespace of its own (``/proc/<pid>/uid_map``, ``gid_map``: ``inside outside count``
    lines, ``user_namespaces(7)``), else ``None``.

    Raises:
        ApplyError: the namespace maps no root.
    """
    try:
        if os.stat(f"/proc/{pid}/ns/user").st_ino == os.stat("/proc/self/ns/user").st_ino:
            return None
        ids = []
        for name in ("uid_map", "gid_map"):
            with open(f"/proc/{pid}/{name}") as f:
                for line in f:
                    inside, outside, _count = (int(x) for x in line.split())
                    if inside == 0:
                        ids.append(outside)
                        break
    except (OSError, ValueError) as e:
        raise ApplyError(f"cannot read the container's user namespace: {e}") from None
    if len(ids) != 2:
        raise ApplyError("the container's user namespace maps no root user", value=pid)
    return ids[0], ids[1]


#: ``/proc/<pid>/uid_map`` of a process in the initial user namespace (``user_namespaces(7)``).
_IDENTITY_MAP = ("0", "0", "4294967295")


def identity_uid_map(pid: int) -> bool:
    """Whether ``pid``'s ``uid_map`` is the identity of the initial user namespace
    (``0 0 4294967295``). Any other map — a user namespace of the container's own, or the
    one a rootless engine (rootless podman, ``runc`` run by a user) made and shares with
    its containers — means the container's ``/dev`` does not allow ``mknod`` and its
    device cgroup (if any) is not ocihook's to write.

    Raises:
        ApplyError: the map cannot be read.
    """
    path = f"/proc/{pid}/uid_map"
    try:
        with open(path) as f:
            lines = [tuple(line.split()) for line in f if line.strip()]
    except OSError as e:
        raise ApplyError(
            f"cannot read the container's user namespace map: {e.strerror}", path=path
        ) from None
    return lines == [_IDENTITY_MAP]


def has_cap_sys_admin() -> bool:
    """Whether ocihook has ``CAP_SYS_ADMIN`` (bit 21 of ``CapEff`` in
    ``/proc/self/status``) in its own user namespace: what mounting there needs. A hook
    that ``runc`` run by an unprivileged user starts has none."""
    words = _status_field("CapEff")
    return bool(words) and bool(int(words[0], 16) >> 21 & 1)


def same_user_ns(pid: int) -> bool:
    """Whether ``pid`` is in ocihook's own user namespace.

    Raises:
        ApplyError: the namespace files cannot be inspected.
    """
    try:
        return os.stat(f"/proc/{pid}/ns/user").st_ino == os.stat("/proc/self/ns/user").st_ino
    except OSError as e:
        raise ApplyError(
            f"cannot inspect the container's user namespace: {e.strerror}",
            path=f"/proc/{pid}/ns/user",
        ) from None


def check_inside_container(pid: int) -> None:
    """For ``createContainer``: ocihook must already be in the container's namespaces —
    its parent's mount namespace, and a pid namespace of the container's own (``NSpid``
    of ``/proc/self/status`` has two levels or more) — never in the host's.

    Raises:
        StateError: run outside a container's createContainer stage, or for a container
            that shares the host's pid namespace (use prestart for those).
    """
    from ...core.errors import StateError

    try:
        ours = os.stat("/proc/self/ns/mnt").st_ino
        parent = os.stat(f"/proc/{pid}/ns/mnt").st_ino
        levels = len(_status_field("NSpid"))
    except OSError as e:
        raise StateError(
            f"cannot inspect the container process: {e.strerror}", field="pid", value=pid
        ) from None
    if pid <= 1 or ours != parent or levels < 2:
        raise StateError(
            "ocihook hook createContainer must run as a container's createContainer hook, "
            "in the container's own pid namespace",
            field="pid",
            value=pid,
            hint="register it under hooks.createContainer, or use the prestart stage",
        )


def _refuse_own(theirs: Callable[[], os.stat_result], cannot: str, pid: int) -> None:
    """Raise :class:`StateError` when the mount namespace ``theirs()`` stats is ocihook's
    own (``cannot``: the message's start when it cannot be stat-ed)."""
    from ...core.errors import StateError

    try:
        st, ours = theirs(), os.stat("/proc/self/ns/mnt")
    except OSError as e:
        raise StateError(f"{cannot}: {e.strerror}", field="pid", value=pid) from None
    if (st.st_dev, st.st_ino) == (ours.st_dev, ours.st_ino):
        raise StateError(
            "the state's pid is not in a container's mount namespace",
            field="pid",
            value=pid,
            hint="run ocihook hook prestart/createRuntime from the runtime, with its state",
        )


def refuse_own_mount_namespace(ns_fd: int, pid: int) -> None:
    """Refuse a mount namespace descriptor that is this process's own namespace: the one
    about to be entered (``setns``) for mounts that belong in a container. Checked on the
    descriptor itself, so a pid reused since :func:`check_container_pid` cannot turn the
    container's mounts into the host's.

    Raises:
        StateError: the descriptor is ``/proc/self/ns/mnt``'s namespace (or cannot be
            compared).
    """
    _refuse_own(lambda: os.fstat(ns_fd), "cannot inspect the container's mount namespace", pid)


def check_container_pid(pid: int) -> None:
    """The state's pid must be a process in a mount namespace of its own (the container
    init the runtime is creating): a pid in ocihook's own namespace would make it mount
    into the host and open the device cgroup of an unrelated process.

    Raises:
        StateError: no such process, or it shares ocihook's mount namespace.
    """
    _refuse_own(lambda: os.stat(f"/proc/{pid}/ns/mnt"), "cannot inspect the container process", pid)
