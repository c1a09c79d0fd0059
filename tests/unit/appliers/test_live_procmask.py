"""The ``/proc/driver/nvidia`` mask's contents (ocihook.appliers.live.procmask): the driver's
``params`` with ``ModifyDeviceFiles: 0``, the capability minors taken from node paths within
range, and nested files written below the mask's directory only."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ocihook.appliers.live.procmask import (
    PendingMask,
    _write_nested,
    caps_minors,
    read_proc_files,
)
from ocihook.core.errors import ApplyError
from ocihook.plan.edits import ProcMask

PARAMS = b"ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"


def test_params_say_modify_device_files_0(tmp_path: Path) -> None:
    (tmp_path / "params").write_bytes(PARAMS)
    (tmp_path / "version").write_bytes(b"NVRM version: NVIDIA UNIX x86_64 Kernel Module\n")
    files = read_proc_files(str(tmp_path))
    assert files["params"] == PARAMS.replace(b"ModifyDeviceFiles: 1", b"ModifyDeviceFiles: 0")
    assert files["version"] == (tmp_path / "version").read_bytes()
    assert "registry" not in files


def test_caps_minors_bounds() -> None:
    prefix = "/dev/nvidia-caps/nvidia-cap"
    pairs: list[tuple[object, object]] = [
        (f"{prefix}1", 1),
        (f"{prefix}2", None),
        (f"{prefix}3", 1 << 20),  # past the 20-bit minor
        (f"{prefix}4", -1),
        (f"{prefix}12345678", None),  # eight digits
        (f"{prefix}٣", None),  # not ASCII
        ("/dev/nvidia0", 0),
        (7, 7),
    ]
    assert caps_minors(pairs) == {1, 2}
    assert caps_minors([(f"{prefix}9", (1 << 20) - 1)]) == {(1 << 20) - 1}


@pytest.mark.parametrize("rel", ["../escaped", "gpus/../../escaped", "a//b", "./x", "x/"])
def test_nested_file_names_stay_below_the_mask(tmp_path: Path, rel: str) -> None:
    top = tmp_path / "mask"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(ApplyError, match="malformed"):
            _write_nested(fd, rel, b"x")
        _write_nested(fd, "gpus/0000:3b:00.0/information", b"Model: X\n")
    finally:
        os.close(fd)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mask"]
    info = top / "gpus/0000:3b:00.0/information"
    assert info.read_bytes() == b"Model: X\n"
    assert oct(info.stat().st_mode & 0o777) == oct(0o444)


def _gone(pid: int) -> bool:
    """Whether ``pid`` (a child of this process) has been reaped."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_pending_mask_cancelled_leaves_no_child(tmp_path: Path) -> None:
    """A mask made ready while the runtime creates, then cancelled (the create failed): the
    waiting child ends with nothing done and is reaped."""
    (tmp_path / "params").write_text("ModifyDeviceFiles: 1\n")
    pending = PendingMask(ProcMask(host_dir=str(tmp_path), gpu_dirs=()), [])
    child = pending._child
    assert child > 0 and not _gone(child)
    pending.cancel()
    assert _gone(child)


@pytest.mark.parametrize("pid", ["self", 2**22 + 17])
def test_pending_mask_refuses_a_pid_that_is_no_container(tmp_path: Path, pid: object) -> None:
    """Given this process's own pid (in the host's mount namespace) or one that does not
    exist, the child mounts nothing and its one-line answer is raised; it is reaped."""
    (tmp_path / "params").write_text("ModifyDeviceFiles: 1\n")
    pending = PendingMask(ProcMask(host_dir=str(tmp_path), gpu_dirs=()), [])
    child = pending._child
    with pytest.raises(ApplyError) as err:
        pending.apply(os.getpid() if pid == "self" else int(str(pid)))
    want = "not in a container's mount namespace" if pid == "self" else "cannot inspect"
    said = str(err.value)
    assert want in said and "\n" not in said, said
    assert said.count("field pid") == 1 and "/proc/driver/nvidia" not in said, said
    assert _gone(child)


def test_pending_mask_cancel_twice_or_after_apply_does_nothing(tmp_path: Path) -> None:
    """cancel() once the child is reaped (a second cancel, or after apply) closes nothing
    again: the descriptor numbers may belong to other files by then."""
    (tmp_path / "params").write_text("ModifyDeviceFiles: 1\n")
    pending = PendingMask(ProcMask(host_dir=str(tmp_path), gpu_dirs=()), [])
    pending.cancel()
    keep = os.open(str(tmp_path / "params"), os.O_RDONLY)  # may reuse a number just closed
    try:
        pending.cancel()
        os.fstat(keep)
    finally:
        os.close(keep)
    pending = PendingMask(ProcMask(host_dir=str(tmp_path), gpu_dirs=()), [])
    with pytest.raises(ApplyError):
        pending.apply(os.getpid())
    keep = os.open(str(tmp_path / "params"), os.O_RDONLY)
    try:
        pending.cancel()
        os.fstat(keep)
    finally:
        os.close(keep)


def test_pending_mask_checks_the_namespace_it_enters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The masking child compares the mount namespace descriptor it enters with its own:
    with the pid check passed (here skipped, as for a pid reused after it), this
    process's own pid is still refused, and nothing is mounted on the host."""
    from ocihook.appliers.live import procs

    monkeypatch.setattr(procs, "check_container_pid", lambda pid: None)
    (tmp_path / "params").write_text("ModifyDeviceFiles: 1\n")
    pending = PendingMask(ProcMask(host_dir=str(tmp_path), gpu_dirs=()), [])
    with pytest.raises(ApplyError) as err:
        pending.apply(os.getpid())
    assert "not in a container's mount namespace" in str(err.value), str(err.value)
