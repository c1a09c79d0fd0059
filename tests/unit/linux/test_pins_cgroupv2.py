"""Pins of finding a process's cgroup2 directory (``proc(5)``: ``/proc/<pid>/cgroup`` and
``mountinfo``): a mount whose root is ``/box`` shows ``/box/...`` and nothing of
``/boxer/...`` — a name that merely starts with the mount's root is not below it."""

from __future__ import annotations

from pathlib import Path

import pytest

from ocihook.core.errors import ApplyError
from ocihook.linux.cgroupv2 import container_cgroup2_dir

MOUNTINFO = "35 24 0:30 /box /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n"


def _proc(tmp_path: Path, cgroup: str) -> str:
    (tmp_path / "42").mkdir()
    (tmp_path / "self").mkdir()
    (tmp_path / "42/cgroup").write_text(cgroup)
    (tmp_path / "self/mountinfo").write_text(MOUNTINFO)
    return str(tmp_path)


@pytest.mark.parametrize(
    ("rel", "want"),
    [("/box/ctr", "/sys/fs/cgroup/ctr"), ("/box", "/sys/fs/cgroup"), ("/boxer/ctr", None)],
)
def test_mount_root_is_a_path_prefix_not_a_string_prefix(
    tmp_path: Path, rel: str, want: str | None
) -> None:
    proc = _proc(tmp_path, f"0::{rel}\n")
    if want is not None:
        assert container_cgroup2_dir(42, proc=proc) == want
        return
    with pytest.raises(ApplyError) as err:
        container_cgroup2_dir(42, proc=proc)
    assert err.value.message == "no cgroup2 mount shows the container's cgroup"
    assert err.value.value == rel
