"""Hook mode's process checks (ocihook.appliers.live.procs) on real processes and real
namespaces: the ``createContainer`` hook refuses to run in the host's pid namespace, and
accepts a process in a pid namespace of its own whose parent shares its mount namespace
(what a container's ``createContainer`` hook is); the state's pid must be in another mount
namespace; the parent's host pid and the container root's host ids are read from ``proc(5)``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from support import need_root_and

from ocihook.appliers.live.procs import (
    check_container_pid,
    check_inside_container,
    container_root_ids,
    parent_pid,
    refuse_own_mount_namespace,
)
from ocihook.core.errors import ApplyError, StateError


def _nspid_levels() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("NSpid:"):
                return len(line.split()) - 1
    return 0


def test_host_pid_namespace_is_refused() -> None:
    """This process shares its parent's mount namespace but sits in the pid namespace of
    its ``/proc`` (one ``NSpid`` level): a createContainer hook there would act on the
    host, so it is refused with one line naming the stage to use."""
    if _nspid_levels() != 1:
        pytest.skip("the tests already run in a nested pid namespace")
    parent = os.getppid()
    assert parent > 1
    with pytest.raises(StateError) as err:
        check_inside_container(parent)
    assert err.value.field == "pid" and err.value.value == parent
    assert "in the container's own pid namespace" in err.value.message
    assert err.value.hint == "register it under hooks.createContainer, or use the prestart stage"


@contextlib.contextmanager
def _process_in_own_mount_namespace() -> Iterator[subprocess.Popen[bytes]]:
    """``unshare -m sleep 30``, once its mount namespace is its own; killed afterwards."""
    need_root_and("unshare")
    child = subprocess.Popen(["unshare", "-m", "sleep", "30"])
    try:
        for _ in range(250):
            if os.stat(f"/proc/{child.pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino:
                break
            time.sleep(0.02)
        yield child
    finally:
        child.kill()
        child.wait()


def test_parent_in_another_mount_namespace_is_refused() -> None:
    """A process in a mount namespace of its own: the hook's parent is not in it."""
    with _process_in_own_mount_namespace() as child:
        with pytest.raises(StateError, match="own pid namespace"):
            check_inside_container(child.pid)
        check_container_pid(child.pid)  # the state's pid: in a mount namespace of its own


def test_inside_a_new_pid_namespace_is_accepted() -> None:
    """``unshare --pid --fork``: the child is in a new pid namespace (two ``NSpid`` levels
    through the host's ``/proc``) and shares the test's mount namespace — as a hook run by
    the runtime inside the container before ``pivot_root``. Given the test's pid (its
    parent's mount namespace) it passes; given a process in another mount namespace it is
    refused; the same call from the test itself is refused (the host's pid namespace)."""
    with _process_in_own_mount_namespace() as other:
        code = (
            "import json, sys\n"
            "from ocihook.appliers.live.procs import check_inside_container\n"
            "from ocihook.core.errors import StateError\n"
            "check_inside_container(int(sys.argv[1]))\n"
            "try:\n"
            "    check_inside_container(int(sys.argv[2]))\n"
            "    refused = None\n"
            "except StateError as e:\n"
            "    refused = e.message\n"
            "with open('/proc/self/status') as f:\n"
            "    levels = [l.split()[1:] for l in f if l.startswith('NSpid:')][0]\n"
            "print(json.dumps([levels, refused]))\n"
        )
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        pids = [str(os.getpid()), str(other.pid)]
        out = subprocess.run(
            ["unshare", "--pid", "--fork", sys.executable, "-c", code, *pids],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
    assert out.returncode == 0, out.stderr
    levels, refused = json.loads(out.stdout)
    assert len(levels) == _nspid_levels() + 1 and levels[-1] == "1"
    assert refused == (
        "ocihook hook createContainer must run as a container's createContainer hook, "
        "in the container's own pid namespace"
    )


def test_state_pid_in_our_mount_namespace_is_refused() -> None:
    """A pid sharing ocihook's mount namespace is not a container being created: the hook
    would mount into the host."""
    with pytest.raises(StateError) as err:
        check_container_pid(os.getpid())
    assert err.value.message == "the state's pid is not in a container's mount namespace"
    assert err.value.value == os.getpid()


def test_own_mount_namespace_descriptor_is_refused() -> None:
    """The descriptor about to be entered is compared with ocihook's own namespace: this
    process's is refused, another's (a mount namespace of its own) is accepted; and hook
    mode's setns into a mount namespace goes through that check."""
    from ocihook.appliers.live.injection import _enter
    from ocihook.linux import syscalls

    fd = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    try:
        with pytest.raises(StateError) as err:
            refuse_own_mount_namespace(fd, 42)
        assert err.value.message == "the state's pid is not in a container's mount namespace"
        assert err.value.value == 42
    finally:
        os.close(fd)
    with pytest.raises(StateError, match="not in a container's mount namespace"):
        _enter(os.getpid(), "ns/mnt", syscalls.CLONE_NEWNS)
    with _process_in_own_mount_namespace() as other:
        fd = os.open(f"/proc/{other.pid}/ns/mnt", os.O_RDONLY)
        try:
            refuse_own_mount_namespace(fd, other.pid)  # no error
        finally:
            os.close(fd)


def test_gone_state_pid_is_a_state_error() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    with pytest.raises(StateError, match="cannot inspect the container process"):
        check_container_pid(child.pid)
    with pytest.raises(StateError, match="cannot inspect the container process"):
        check_inside_container(child.pid)
    with pytest.raises(StateError, match="cannot inspect the container process"):
        check_inside_container(0)  # crun's state pid in createContainer: no /proc/0


def test_parent_pid_is_the_host_ppid() -> None:
    """In the host's pid namespace ``PPid`` of ``/proc/self/status`` is ``getppid()``."""
    if _nspid_levels() != 1:
        pytest.skip("the tests already run in a nested pid namespace")
    assert parent_pid() == os.getppid()


def test_container_root_ids() -> None:
    """Our own user namespace: ``None``; ``unshare -U --map-root-user`` maps its root to
    our uid and gid."""
    need_root_and("unshare")
    assert container_root_ids(os.getpid()) is None
    child = subprocess.Popen(["unshare", "-U", "--map-root-user", "sleep", "30"])
    try:
        ids = None
        for _ in range(250):
            try:
                ids = container_root_ids(child.pid)
            except ApplyError:
                ids = None  # the map is not written yet
            if ids is not None:
                break
            time.sleep(0.02)
        assert ids == (os.getuid(), os.getgid())
    finally:
        child.kill()
        child.wait()


def test_user_namespace_without_root_is_an_apply_error() -> None:
    """``unshare -U`` with no map: no root inside, so no host ids for it."""
    need_root_and("unshare")
    child = subprocess.Popen(["unshare", "-U", "sleep", "30"])
    try:
        for _ in range(250):
            if os.stat(f"/proc/{child.pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino:
                break
            time.sleep(0.02)
        with pytest.raises(ApplyError, match="maps no root user"):
            container_root_ids(child.pid)
    finally:
        child.kill()
        child.wait()
