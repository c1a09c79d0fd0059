"""Hook mode's cgroup v1 device rules (ocihook.appliers.live.cgroups) in a real ``devices``
cgroup made for the test under the host's v1 hierarchy, holding a real process: a rule the
cgroup allows only in part is written (a partial permit is not a permit), one it allows in
full is not, and the undo takes back exactly what was written — the kernel's
``devices.list`` is the oracle (``Documentation/admin-guide/cgroup-v1/devices.rst``).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ocihook.appliers.live.cgroups import allow_in_cgroups, device_cgroup_dir
from ocihook.appliers.live.undo import run_undo
from ocihook.core.errors import ApplyError
from ocihook.plan.edits import CgroupRule

DEVICES = Path("/sys/fs/cgroup/devices")


class Cgroup:
    """A child of the v1 devices hierarchy's root with one ``sleep`` in it."""

    def __init__(self, path: Path, proc: subprocess.Popen[bytes]) -> None:
        self.path = path
        self.proc = proc

    def write(self, name: str, text: str) -> None:
        (self.path / name).write_text(text)

    def listing(self) -> set[str]:
        return set((self.path / "devices.list").read_text().splitlines())


@pytest.fixture
def cgroup() -> Iterator[Cgroup]:
    if os.geteuid() != 0 or not (DEVICES / "devices.list").is_file():
        pytest.skip("needs root and the cgroup v1 devices hierarchy at /sys/fs/cgroup/devices")
    if Path("/proc/self/cgroup").read_text().count(":devices:/\n") != 1:
        pytest.skip("this process is not in the devices hierarchy's root")
    path = DEVICES / f"ocihook-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        path.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a devices cgroup: {e.strerror}")
    proc = subprocess.Popen(["sleep", "60"])
    try:
        (path / "cgroup.procs").write_text(str(proc.pid))
        group = Cgroup(path, proc)
        group.write("devices.deny", "a")
        group.write("devices.allow", "c 195:0 r")
        group.write("devices.allow", "c 1:3 rwm")
        yield group
    finally:
        proc.kill()
        proc.wait()
        for _ in range(100):
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.02)


def test_device_cgroup_dir_of_a_real_process(cgroup: Cgroup) -> None:
    assert device_cgroup_dir(cgroup.proc.pid) == str(cgroup.path)


def test_partial_permit_is_written_and_undone(cgroup: Cgroup) -> None:
    """``c 195:0 r`` does not permit ``rw``: ``c 195:0 rw`` is written (the kernel merges
    it into one exception); ``c 1:3 rwm`` permits ``rw``: nothing is written for it. The
    undo denies what was written — one action."""
    assert cgroup.listing() == {"c 195:0 r", "c 1:3 rwm"}
    undo: list[Callable[[], object]] = []
    rules = [CgroupRule(True, "c", 195, 0, "rw"), CgroupRule(True, "c", 1, 3, "rw")]
    allow_in_cgroups(cgroup.proc.pid, rules, undo)
    assert cgroup.listing() == {"c 195:0 rw", "c 1:3 rwm"}
    assert len(undo) == 1
    run_undo(undo)
    assert cgroup.listing() == {"c 1:3 rwm"} and undo == []


@pytest.mark.parametrize(
    ("rule", "written"),
    [
        (CgroupRule(True, "c", 195, 255, "rw"), True),  # another minor: not permitted
        (CgroupRule(True, "c", 195, 0, "r"), False),  # exactly what is allowed
        (CgroupRule(True, "c", 195, None, "r"), True),  # every minor: one is not enough
        (CgroupRule(True, "b", 195, 0, "r"), True),  # a block device of the same number
        (CgroupRule(True, "c", 1, 3, "rwm"), False),
        (CgroupRule(True, "c", 1, 3, "m"), False),
    ],
)
def test_which_rules_are_already_permitted(cgroup: Cgroup, rule: CgroupRule, written: bool) -> None:
    before = cgroup.listing()
    undo: list[Callable[[], object]] = []
    allow_in_cgroups(cgroup.proc.pid, [rule], undo)
    assert len(undo) == int(written)
    assert (cgroup.listing() != before) is written


def test_wildcard_listing_permits_everything(cgroup: Cgroup) -> None:
    """A cgroup that allows ``a *:* rwm`` (the kernel lists only that) needs no write."""
    cgroup.write("devices.allow", "a")
    assert cgroup.listing() == {"a *:* rwm"}
    undo: list[Callable[[], object]] = []
    rules = [CgroupRule(True, "c", 195, None, "rwm"), CgroupRule(True, "b", 8, 0, "r")]
    allow_in_cgroups(cgroup.proc.pid, rules, undo)
    assert undo == []


def test_root_devices_cgroup_is_refused() -> None:
    """A process in the hierarchy's root (this one): a write there would change every
    process's device access."""
    if os.geteuid() != 0 or not (DEVICES / "devices.list").is_file():
        pytest.skip("needs root and the cgroup v1 devices hierarchy")
    if Path("/proc/self/cgroup").read_text().count(":devices:/\n") != 1:
        pytest.skip("this process is not in the devices hierarchy's root")
    with pytest.raises(ApplyError, match="root devices cgroup"):
        allow_in_cgroups(os.getpid(), [CgroupRule(True, "c", 195, 0, "rw")], [])


@pytest.mark.parametrize(
    ("mount_root", "rel", "want"),
    [
        ("/", "/docker/abc", "/sys/fs/cgroup/devices/docker/abc"),
        ("/docker", "/docker/abc", "/sys/fs/cgroup/devices/abc"),  # a bind of a sub-tree
        ("/docker", "/docker", "/sys/fs/cgroup/devices"),
        ("/docker", "/dockerx/abc", "/sys/fs/cgroup/devices/dockerx/abc"),  # not below it
    ],
)
def test_device_cgroup_dir_through_the_mount_root(
    tmp_path: Path, mount_root: str, rel: str, want: str
) -> None:
    """``proc(5)``: the cgroup path of ``/proc/<pid>/cgroup`` is relative to the hierarchy's
    root; a mount whose root is a sub-tree shows the part below its root."""
    (tmp_path / "7").mkdir()
    (tmp_path / "self").mkdir()
    (tmp_path / "7/cgroup").write_text(f"5:devices:{rel}\n4:memory:/x\n")
    (tmp_path / "self/mountinfo").write_text(
        "22 1 254:0 / / rw - ext4 /dev/vda rw\n"
        "36 31 0:33 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        f"37 31 0:34 {mount_root} /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n"
    )
    assert device_cgroup_dir(7, proc=str(tmp_path)) == want
