"""Hook mode's user namespace checks (ocihook.appliers.live.procs): which containers get
bind-mounted nodes, and when the hook must join the container's user namespace."""

from __future__ import annotations

import os
import subprocess
import time

import pytest
from support import need_root_and

from ocihook.appliers.live.procs import has_cap_sys_admin, identity_uid_map, same_user_ns
from ocihook.core.errors import ApplyError


def test_own_process() -> None:
    need_root_and()
    with open("/proc/self/uid_map") as f:
        identity = f.read().split() == ["0", "0", "4294967295"]
    assert identity_uid_map(os.getpid()) is identity
    assert same_user_ns(os.getpid())
    assert has_cap_sys_admin()


def test_process_in_a_user_namespace() -> None:
    """``unshare -U -r``: root mapped to our uid, one id — not the identity map, another
    user namespace."""
    need_root_and("unshare")
    child = subprocess.Popen(["unshare", "-U", "-r", "sleep", "30"])
    try:
        for _ in range(250):  # until unshare has made the namespace and its map
            if not same_user_ns(child.pid) and not identity_uid_map(child.pid):
                break
            time.sleep(0.02)
        assert not same_user_ns(child.pid)
        assert not identity_uid_map(child.pid)
    finally:
        child.kill()
        child.wait()


def test_gone_process_is_an_apply_error() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    with pytest.raises(ApplyError, match="user namespace"):
        identity_uid_map(child.pid)
    with pytest.raises(ApplyError, match="user namespace"):
        same_user_ns(child.pid)
