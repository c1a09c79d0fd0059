"""Hook mode's device cgroup messages: a rootless container's cgroup names the
``no-cgroups`` setting; a container in a systemd scope gets the re-apply warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ocihook.appliers.live.cgroups import _allow_devices, systemd_scope_warning
from ocihook.core.errors import ApplyError
from ocihook.plan.edits import CgroupRule

RULE = CgroupRule(True, "c", 195, 0, "rw")


def test_rootless_root_cgroup_names_no_cgroups(tmp_path: Any) -> None:
    """A rootless container sits in its user's cgroup (here: the hierarchy's root, no
    devices.list above): the one line names the problem and the setting."""
    (tmp_path / "devices.list").write_text("a *:* rwm\n")
    with pytest.raises(ApplyError) as info:
        _allow_devices(str(tmp_path), [RULE], [], rootless=True)
    text = str(info.value)
    assert "rootless" in text and "no-cgroups = true" in text and "\n" not in text
    with pytest.raises(ApplyError) as info:
        _allow_devices(str(tmp_path), [RULE], [])
    assert "root devices cgroup" in str(info.value) and "no-cgroups" in str(info.value)


def test_unwritable_cgroup_names_no_cgroups(tmp_path: Any) -> None:
    cg = tmp_path / "c"
    cg.mkdir()
    (tmp_path / "devices.list").write_text("a *:* rwm\n")
    (cg / "devices.list").write_text("c 1:3 rwm\n")
    (cg / "devices.allow").mkdir()  # opening it for writing fails (EISDIR)
    with pytest.raises(ApplyError) as info:
        _allow_devices(str(cg), [RULE], [])
    assert "cannot allow device 'c 195:0 rw'" in str(info.value)
    assert "no-cgroups = true" in str(info.value)


@pytest.mark.parametrize(
    ("text", "scope"),
    [
        ("0::/system.slice/docker-abc.scope\n", "docker-abc.scope"),
        (
            "4:devices:/kubepods.slice/cri-containerd-1.scope\n1:name=systemd:/x\n",
            "cri-containerd-1.scope",
        ),
        ("0::/default/ctr\n", None),
        ("4:devices:/docker/abc\n", None),
    ],
)
def test_systemd_scope_warning(tmp_path: Any, text: str, scope: str | None) -> None:
    Path(tmp_path, "7").mkdir()
    Path(tmp_path, "7", "cgroup").write_text(text)
    warning = systemd_scope_warning(7, proc=str(tmp_path))
    if scope is None:
        assert warning is None
    else:
        assert warning is not None and scope in warning
        assert "daemon-reload" in warning and "create-dev-char-symlinks" in warning
    assert systemd_scope_warning(8, proc=str(tmp_path)) is None
