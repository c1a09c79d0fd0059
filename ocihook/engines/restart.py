"""Making the node's container engine apply a changed configuration, for ``ocihook k8s
install`` / ``uninstall --restart-mode`` (the installer runs in a pod with the node's
``/`` at a host root).

======== ===========================================================================
mode     what is done
======== ===========================================================================
none     nothing; the installer says the engine must be restarted (the default)
signal   ``SIGHUP`` to the engine's process: CRI-O only, which reloads its
         ``runtimes`` table and ``default_runtime`` on ``SIGHUP`` (its
         ``ReloadRuntimes``). containerd does **not** reload its configuration on a
         signal (``SIGHUP`` is ignored), so ``signal`` with containerd is refused
systemd  ``systemctl restart <unit>`` (:data:`SYSTEMD_UNITS`) run on the host: in the host's
         mount namespace through ``nsenter --target 1 --mount`` when this process is in
         another one (a pod), else directly (``systemctl`` ignores ``restart`` in a
         chroot, so ``chroot /host`` would not do)
======== ===========================================================================

The engine's process is found by name (:data:`PROCESS_NAMES`, the kernel's ``comm``) in
the host's procfs (``<host root>/proc``); CRI-O writes no pid file by default. A pid read
there is the host's: it can be signalled only from the host's pid namespace, so the pod
needs ``hostPID: true`` (checked: the procfs's ``self`` must be this process). Restarting
containerd or CRI-O with systemd keeps the running containers (their shims, conmon).
Every refusal is an :class:`~ocihook.core.errors.EngineConfigError` (exit 13).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections.abc import Sequence

from ..core.errors import EngineConfigError

__all__ = [
    "NSENTER",
    "PROCESS_NAMES",
    "RESTART_MODES",
    "SYSTEMD_UNITS",
    "check_mode",
    "restart_engine",
    "systemctl_command",
]

#: The values of ``--restart-mode``.
RESTART_MODES = ("none", "signal", "systemd")
#: The systemd unit of each engine the installer configures.
SYSTEMD_UNITS = {"containerd": "containerd.service", "crio": "crio.service"}
#: The process name (``/proc/<pid>/comm``) of each engine that reloads its configuration
#: on ``SIGHUP``; an engine not listed cannot be signalled.
PROCESS_NAMES = {"crio": "crio"}
#: How a command is run in the host's mount namespace (pid 1's), before ``--``.
NSENTER = ("nsenter", "--target", "1", "--mount")
#: Seconds ``systemctl restart`` may take.
TIMEOUT = 120.0


def check_mode(engine: str | None, mode: str, host_root: str | None = None) -> None:
    """Refuse ``mode`` for ``engine`` (``None``: no engine registered) before anything is
    written; with ``host_root`` (a restart will be needed) also what would make it fail:
    for ``signal``, the host's processes not in this pid namespace or not exactly one
    engine process; for ``systemd``, the command's program not on ``PATH``.

    Raises:
        EngineConfigError: an unknown mode, ``signal`` for an engine that does not reload
            on ``SIGHUP`` (containerd), a restart asked for with no engine, or one of the
            failures above.
    """
    if mode not in RESTART_MODES:
        raise EngineConfigError(
            f"unknown restart mode {mode!r}", value=mode, hint=", ".join(RESTART_MODES)
        )
    if mode == "none":
        return
    if engine is None:
        raise EngineConfigError(
            f"--restart-mode {mode} with no engine to restart (--runtime none)",
            hint="--restart-mode none",
        )
    if mode == "signal" and engine not in PROCESS_NAMES:
        raise EngineConfigError(
            f"{engine} does not reload its configuration on SIGHUP: --restart-mode signal "
            "cannot apply it",
            value=engine,
            hint="--restart-mode systemd (restarts it; running containers keep running) or none",
        )
    if mode == "systemd" and engine not in SYSTEMD_UNITS:
        raise EngineConfigError(f"no systemd unit known for {engine}", value=engine)
    if host_root is None:
        return
    proc = _proc(host_root)
    if mode == "signal":
        _target(engine, proc)
        return
    program = systemctl_command(engine, proc)[0]
    if shutil.which(program) is None:
        raise EngineConfigError(
            f"{program} not found: cannot restart {engine} with systemd",
            hint="--restart-mode none, then restart it by hand",
        )


def _proc(host_root: str) -> str:
    """The host's procfs as this process sees it: ``<host_root>/proc``."""
    from ..core.hostroot import HostRoot

    return HostRoot.single(host_root).proc("")


def _same_pid_namespace(proc: str) -> bool:
    """Whether the procfs at ``proc`` shows this process's pid namespace (its ``self``
    is this process's pid)."""
    try:
        return os.readlink(os.path.join(proc, "self")) == str(os.getpid())
    except OSError:
        return False


def _find(proc: str, name: str) -> list[int]:
    """The pids under ``proc`` whose ``comm`` is ``name``."""
    found = []
    try:
        entries = os.listdir(proc)
    except OSError as e:
        raise EngineConfigError(
            f"cannot list the host's processes: {e.strerror}", path=proc
        ) from None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "comm"), "rb") as f:
                comm = f.read(64).decode("utf-8", "replace").rstrip("\n")
        except OSError:  # gone meanwhile
            continue
        if comm == name:
            found.append(int(entry))
    return sorted(found)


def _target(engine: str, proc: str) -> int:
    """The pid of ``engine``'s one process under ``proc``, which must be this process's
    pid namespace."""
    name = PROCESS_NAMES[engine]
    if not _same_pid_namespace(proc):
        raise EngineConfigError(
            f"the host's processes are not in this process's pid namespace: cannot signal {engine}",
            path=proc,
            hint="run the installer pod with hostPID: true",
        )
    pids = _find(proc, name)
    if len(pids) != 1:
        found = (
            f"{len(pids)} {name} processes on the host ({', '.join(map(str, pids))}): cannot "
            "tell which to signal"
            if pids
            else f"no {name} process on the host"
        )
        raise EngineConfigError(
            found, path=proc, hint="--restart-mode systemd, or restart it by hand"
        )
    return pids[0]


def _signal(engine: str, proc: str) -> str:
    pid = _target(engine, proc)
    try:
        os.kill(pid, signal.SIGHUP)
    except OSError as e:
        raise EngineConfigError(f"cannot signal {engine} (pid {pid}): {e.strerror}") from None
    return f"{engine}: SIGHUP sent (pid {pid}) to reload its configuration"


def systemctl_command(engine: str, proc: str) -> list[str]:
    """The command that restarts ``engine``'s unit on the host: ``systemctl restart
    <unit>``, behind :data:`NSENTER` unless this process is already in the mount
    namespace of the host's pid 1 (``<proc>/1/ns/mnt``)."""
    command = ["systemctl", "restart", SYSTEMD_UNITS[engine]]
    try:
        host = os.readlink(os.path.join(proc, "1", "ns", "mnt"))
        mine = os.readlink(os.path.join(proc, "self", "ns", "mnt"))
    except OSError:
        host, mine = "host", "unknown"
    return command if host == mine else [*NSENTER, "--", *command]


def restart_engine(engine: str, mode: str, host_root: str, *, dry_run: bool = False) -> str:
    """Make ``engine`` apply its configuration by ``mode`` (:data:`RESTART_MODES`), with
    the host's procfs at ``<host_root>/proc``; returns what was done, in words.

    Raises:
        EngineConfigError: as :func:`check_mode`; the engine's process cannot be told
            apart or signalled; ``systemctl`` (or ``nsenter``) is missing, fails or takes
            longer than :data:`TIMEOUT` seconds (its last line of output said).
    """
    check_mode(engine, mode)
    if mode == "none":
        return f"restart {engine} on the node to apply it"
    proc = _proc(host_root)
    if mode == "signal":
        if dry_run:
            return f"{engine}: would be sent SIGHUP"
        return _signal(engine, proc)
    command = systemctl_command(engine, proc)
    if dry_run:
        return f"{engine}: would be restarted: {' '.join(command)}"
    _run(command)
    return f"{engine}: restarted ({' '.join(command)})"


def _run(command: Sequence[str]) -> None:
    try:
        done = subprocess.run(
            list(command), capture_output=True, text=True, timeout=TIMEOUT, check=False
        )
    except FileNotFoundError:
        raise EngineConfigError(
            f"{command[0]} not found: cannot restart the engine",
            hint="--restart-mode none, then restart it by hand",
        ) from None
    except subprocess.TimeoutExpired:
        raise EngineConfigError(f"{' '.join(command)} did not finish in {TIMEOUT:.0f} s") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise EngineConfigError(
            f"{' '.join(command)} failed (exit {done.returncode})"
            + (f": {said[-1]}" if said else "")
        )
