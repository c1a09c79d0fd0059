"""This host's processes and mounts: :func:`wait_gone`, :func:`pids_with_arg`,
:func:`mounts_under`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any


def mounts_under(*paths: str) -> list[str]:
    """The lines of this process's mountinfo that name any of ``paths``."""
    with open("/proc/self/mountinfo") as f:
        return [ln for ln in f if any(p in ln for p in paths)]


def pids_with_arg(arg: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if arg.encode() in f.read().split(b"\0"):
                        found.append(int(entry))
            except OSError:
                pass
    return found


def wait_gone(pids: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    left = pids()
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = pids()
    return left
