"""Device cgroup rules for a container being created, on both cgroup versions: cgroup v1
``devices.allow`` (``Documentation/admin-guide/cgroup-v1/devices.rst``) and the cgroup v2
eBPF device program (:mod:`ocihook.linux.cgroupv2`)."""

from __future__ import annotations

import os

from ...core.errors import ApplyError
from ...plan.edits import CgroupRule
from .undo import partial

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc imports collections: milliseconds at start
    from collections.abc import Sequence

    from .undo import Undo

#: The hint of every "cannot write the device cgroup" error: the setting that skips it.
NO_CGROUPS_HINT = (
    "set no-cgroups = true in ocihook's config.toml (or pass --no-cgroups) for rootless "
    "containers, whose engine gives them no device cgroup ocihook may write"
)


__all__ = ["SYSTEMD_WARNING", "device_cgroup_dir", "systemd_scope_warning"]


def device_cgroup_dir(pid: int, *, proc: str = "/proc") -> str:
    """Host directory of the cgroup v1 ``devices`` controller that ``pid`` belongs to.

    Reads ``<proc>/<pid>/cgroup`` (the ``devices`` line) and ``<proc>/self/mountinfo``
    (where the ``devices`` hierarchy is mounted; ``proc(5)``).

    Raises:
        ApplyError: no cgroup v1 ``devices`` controller (a pure cgroup v2 host: there
            :func:`allow_in_cgroups` uses the eBPF device program instead), or the files
            cannot be read.
    """
    cgroup_file = f"{proc}/{pid}/cgroup"
    try:
        with open(cgroup_file) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ApplyError(
            f"cannot read the container's cgroup: {e.strerror}", path=cgroup_file
        ) from None
    rel = None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) == 3 and "devices" in parts[1].split(","):
            rel = parts[2]
            break
    if rel is None:
        raise ApplyError(
            "the container has no cgroup v1 devices controller",
            path=cgroup_file,
            hint="on a cgroup v2 host use spec mode (ocihook edit), or --no-cgroups",
        )
    mountinfo = f"{proc}/self/mountinfo"
    try:
        with open(mountinfo) as f:
            mounts = f.read().splitlines()
    except OSError as e:
        raise ApplyError(f"cannot read mountinfo: {e.strerror}", path=mountinfo) from None
    for line in mounts:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields = left.split()
        fstype, _source, *opts = right.split()
        if fstype == "cgroup" and opts and "devices" in opts[0].split(","):
            mount_root, mount_point = fields[3], fields[4]
            # The hierarchy's root seen through this mount is mount_root.
            if rel.startswith(mount_root.rstrip("/") + "/") or rel == mount_root:
                rel_in = rel[len(mount_root.rstrip("/")) :]
            else:
                rel_in = rel
            return os.path.normpath(mount_point + "/" + rel_in.lstrip("/"))
    raise ApplyError(
        "the cgroup v1 devices hierarchy is not mounted",
        path=mountinfo,
        hint="use --no-cgroups, or spec mode (ocihook edit)",
    )


#: Added to the hint of a cgroup v2 device program that hook mode cannot change.
V2_HINT = (
    "or use spec mode (ocihook edit, or ocihook-runtime), whose rules the runtime builds "
    "into its own device program"
)

#: The warning of hook mode under a systemd cgroup driver (:func:`systemd_scope_warning`).
SYSTEMD_WARNING = (
    "the container's cgroup is a systemd scope ({scope}): the device rules this hook added "
    "are not in the unit and are lost when systemd re-applies it (systemctl daemon-reload), "
    "and the GPUs with them; use spec mode (ocihook edit, ocihook-runtime) and run "
    "ocihook system create-dev-char-symlinks"
)


def systemd_scope_warning(pid: int, *, proc: str = "/proc") -> str | None:
    """The warning for a container whose cgroup is a systemd unit (a path component
    ending in ``.scope``, as runc's and crun's systemd cgroup drivers make them:
    ``docker-<id>.scope``, ``cri-containerd-<id>.scope``), else ``None``. An unreadable
    ``<proc>/<pid>/cgroup`` gives ``None``: the cgroup step reports that itself."""
    try:
        with open(f"{proc}/{pid}/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        path = line.split(":", 2)[-1]
        for part in path.split("/"):
            if part.endswith(".scope"):
                return SYSTEMD_WARNING.format(scope=part)
    return None


def _rule_text(rule: CgroupRule) -> str:
    major = "*" if rule.major is None else str(rule.major)
    minor = "*" if rule.minor is None else str(rule.minor)
    return f"{rule.type} {major}:{minor} {rule.access}"


def _write_cgroup(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _list_permits(listing: Sequence[str], rule: CgroupRule) -> bool:
    """Whether a cgroup v1 ``devices.list`` (lines ``c 195:0 rw``, ``a *:* rwm``) already
    allows ``rule``'s access (kernel ``security/device_cgroup.c``: the list shows the
    allowed exceptions, or ``a *:* rwm`` for a cgroup that allows everything)."""
    for line in listing:
        parts = line.split()
        if len(parts) != 3:
            continue
        kind, numbers, access = parts
        major, _, minor = numbers.partition(":")
        if kind not in ("a", rule.type):
            continue
        if kind != "a":
            if major != "*" and (rule.major is None or major != str(rule.major)):
                continue
            if minor != "*" and (rule.minor is None or minor != str(rule.minor)):
                continue
        if set(rule.access) <= set(access):
            return True
    return False


def _allow_devices(
    cgroup_dir: str, rules: Sequence[CgroupRule], undo: list[Undo], *, rootless: bool = False
) -> None:
    """Allow ``rules`` in the cgroup v1 ``devices`` directory of the container.

    A rule the cgroup already allows is not written (and so never denied again on undo:
    the undo must not take away access the container had before ocihook ran). The
    hierarchy's root is refused: a container in the root devices cgroup would make these
    writes change every process's device access.

    Raises:
        ApplyError: the cgroup is the hierarchy root, or a write failed.
    """
    allow = os.path.join(cgroup_dir, "devices.allow")
    deny = os.path.join(cgroup_dir, "devices.deny")
    if not os.path.exists(os.path.join(cgroup_dir, "..", "devices.list")):
        if rootless:
            raise ApplyError(
                "the container is rootless (a user namespace) and has no device cgroup of its own",
                path=cgroup_dir,
                hint=NO_CGROUPS_HINT,
            )
        raise ApplyError(
            "the container process is in the root devices cgroup",
            path=cgroup_dir,
            hint="a container must have a cgroup of its own; is the state's pid a container? "
            "(rootless: set no-cgroups = true)",
        )
    try:
        with open(os.path.join(cgroup_dir, "devices.list")) as f:
            listing = f.read().splitlines()
    except OSError as e:
        raise ApplyError(f"cannot read the device cgroup: {e.strerror}", path=cgroup_dir) from None
    for rule in rules:
        if _list_permits(listing, rule):
            continue
        text = _rule_text(rule)
        try:
            _write_cgroup(allow, text)
        except OSError as e:
            raise ApplyError(
                f"cannot allow device {text!r}: {e.strerror}", path=allow, hint=NO_CGROUPS_HINT
            ) from None
        undo.append(partial(_write_cgroup, deny, text))


def _own_v1_cgroup(v1: str) -> bool:
    """Whether ``v1`` is a cgroup v1 devices directory of the container's own: it exists
    and is not the hierarchy's root."""
    return os.path.isfile(os.path.join(v1, "devices.list")) and os.path.isfile(
        os.path.join(v1, "..", "devices.list")
    )


def allow_in_cgroups(
    pid: int, rules: Sequence[CgroupRule], undo: list[Undo], *, rootless: bool = False
) -> None:
    """Let the container of ``pid`` use the devices of ``rules`` on both cgroup versions.

    cgroup v1 (its ``devices`` controller): ``devices.allow`` (:func:`_allow_devices`).
    cgroup v2: the eBPF device program(s) attached to the container's cgroup get allow
    rules prepended (:func:`ocihook.linux.cgroupv2.add_device_rules`: the new program is
    attached before the old one is detached). On the hybrid layout both apply — the
    kernel runs the cgroup2 programs, then the v1 check — and whichever has nothing
    (no v1 controller, or no program attached) is skipped. A cgroup2 root is never
    touched.

    ``rootless``: the container is in a user namespace that is not the initial one; a
    cgroup that cannot be written then says to set ``no-cgroups`` (libnvidia-container's
    setting of the same name).

    Raises:
        ApplyError: neither version controls the process's devices, or a step failed.
    """
    from ...linux import cgroupv2

    cg2 = cgroupv2.container_cgroup2_dir(pid)
    if cg2 is not None and not os.path.exists(os.path.join(cg2, "..", "cgroup.controllers")):
        cg2 = None  # the hierarchy's root: not the container's own cgroup
    try:
        v1: str | None = device_cgroup_dir(pid)
    except ApplyError:
        if cg2 is None:
            raise
        v1 = None
    if v1 is not None and cg2 is not None and not _own_v1_cgroup(v1):
        v1 = None  # a cgroup2 container whose v1 membership is the host's root: leave it
    if v1 is not None:
        _allow_devices(v1, rules, undo, rootless=rootless)
    if cg2 is not None:
        try:
            undo.append(cgroupv2.add_device_rules(cg2, rules))
        except ApplyError as e:
            if rootless:
                raise ApplyError(
                    f"cannot change the rootless container's device program: {e.message}",
                    path=cg2,
                    hint=NO_CGROUPS_HINT,
                ) from None
            raise ApplyError(
                e.message, path=e.path, hint=(f"{e.hint}; " if e.hint else "") + V2_HINT
            ) from None
