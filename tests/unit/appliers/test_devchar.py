"""``ocihook system create-dev-char-symlinks``: /dev/char/<major>:<minor> links for the
NVIDIA nodes (what runc's systemd cgroup driver names devices by), and the packaged unit
and udev rule that keep them."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import REPO, need_root_and, run_cli

from ocihook.appliers.devchar import create_dev_char_symlinks, nvidia_char_nodes
from ocihook.core.errors import ApplyError
from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost

SERVICE = os.path.join(REPO, "packaging/systemd/ocihook-dev-char-symlinks.service.in")
UDEV = os.path.join(REPO, "packaging/udev/71-ocihook-dev-char-symlinks.rules")


@pytest.fixture
def host(tmp_path: Any) -> simhost.SimulatedHost:
    need_root_and()  # the nodes are made with mknod
    return simhost.build(str(tmp_path / "h"), gpus=2)


def _links(dev: str) -> dict[str, str]:
    char = os.path.join(dev, "char")
    return {n: os.readlink(os.path.join(char, n)) for n in sorted(os.listdir(char))}


def test_links_for_every_nvidia_node(host: simhost.SimulatedHost) -> None:
    dev = os.path.join(host.root, "dev")
    report = create_dev_char_symlinks(HostRoot.single(host.root))
    links = _links(dev)
    assert links["195:0"] == "../nvidia0" and links["195:1"] == "../nvidia1"
    assert links["195:255"] == "../nvidiactl"
    assert links[f"{simhost.UVM_MAJOR}:0"] == "../nvidia-uvm"
    assert links[f"{simhost.UVM_MAJOR}:1"] == "../nvidia-uvm-tools"
    assert links[f"{simhost.CAPS_MAJOR}:1"] == "../nvidia-caps/nvidia-cap1"
    # every link leads to a node of its own number
    for name in links:
        st = os.stat(os.path.join(dev, "char", name))
        major, minor = (int(x) for x in name.split(":"))
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(major, minor)
    assert len(report) == len(links) == len(nvidia_char_nodes(dev))
    assert create_dev_char_symlinks(HostRoot.single(host.root)) == []  # idempotent


def test_wrong_link_is_replaced_and_a_file_in_the_way_is_kept(
    host: simhost.SimulatedHost,
) -> None:
    char = Path(host.root, "dev/char")
    char.mkdir()
    (char / "195:0").symlink_to("../nvidiactl")  # another device's node
    (char / "195:1").write_text("not a link")
    report = create_dev_char_symlinks(HostRoot.single(host.root))
    assert f"replaced {char}/195:0 -> ../nvidia0" in report
    assert f"skipped {char}/195:1 (not a link)" in report
    assert os.readlink(char / "195:0") == "../nvidia0"
    assert (char / "195:1").read_text() == "not a link"
    assert not [p for p in char.iterdir() if ".ocihook-" in p.name]


def test_create_all_makes_the_missing_nodes(host: simhost.SimulatedHost) -> None:
    dev = Path(host.root, "dev")
    (dev / "nvidia1").unlink()
    (dev / "nvidia-uvm").unlink()
    report = create_dev_char_symlinks(HostRoot.single(host.root), create_all=True)
    assert f"created node {dev}/nvidia1 c 195:1" in report
    assert f"created node {dev}/nvidia-uvm c {simhost.UVM_MAJOR}:0" in report
    st = os.lstat(dev / "nvidia1")
    assert stat.S_ISCHR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666
    assert _links(str(dev))["195:1"] == "../nvidia1"


def test_missing_dev_dir_is_one_line(tmp_path: Any) -> None:
    with pytest.raises(ApplyError) as info:
        create_dev_char_symlinks(HostRoot.single(str(tmp_path / "none")))
    assert "does not exist" in str(info.value) and "--dev-root" in str(info.value)
    assert not (tmp_path / "none").exists()


def test_command_line(host: simhost.SimulatedHost) -> None:
    cmd = ["system", "create-dev-char-symlinks"]
    proc = run_cli(*cmd, "--dev-root", host.root, "--create-all")
    assert proc.returncode == 0, proc.stderr
    assert f"created {host.root}/dev/char/195:0 -> ../nvidia0" in proc.stdout.splitlines()
    again = run_cli(*cmd, "--dev-root", host.root)
    assert again.returncode == 0 and again.stdout.startswith("nothing to do")


def test_packaged_unit_and_rule() -> None:
    """The service runs this command with --create-all (its parser accepts the line); the
    udev rule starts it when nvidia or nvidia_uvm is loaded; systemd-analyze (where
    installed) accepts the unit."""
    text = Path(SERVICE).read_text().replace("@BINDIR@", os.path.dirname(sys.executable))
    (exec_start,) = [
        ln[len("ExecStart=") :] for ln in text.splitlines() if ln.startswith("ExecStart=")
    ]
    argv = shlex.split(exec_start)
    assert argv[1:] == ["system", "create-dev-char-symlinks", "--create-all"]
    import click

    from ocihook.commands.cli import cli

    group = cli.commands["system"]
    assert isinstance(group, click.Group)
    command = group.commands["create-dev-char-symlinks"]
    assert command.make_context("x", argv[3:]).params["create_all"] is True
    assert "Type=oneshot" in text and "WantedBy=multi-user.target" in text
    rules = [ln for ln in Path(UDEV).read_text().splitlines() if ln and not ln.startswith("#")]
    kernels = []
    for rule in rules:
        pairs = dict((k + op, v) for k, op, v in re.findall(r'([A-Z]+)(==|\+=)"([^"]*)"', rule))
        assert pairs["ACTION=="] == "add" and pairs["SUBSYSTEM=="] == "module"
        kernels.append(pairs["KERNEL=="])
        assert shlex.split(pairs["RUN+="])[1:] == [
            "--no-block",
            "start",
            "ocihook-dev-char-symlinks.service",
        ]
    assert kernels == ["nvidia", "nvidia_uvm"]
    analyze = shutil.which("systemd-analyze")
    if analyze is not None:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            unit = os.path.join(d, "ocihook-dev-char-symlinks.service")
            Path(unit).write_text(text)
            proc = subprocess.run([analyze, "verify", unit], capture_output=True, text=True)
            assert "ocihook-dev-char-symlinks" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("major_name", [None, "nvidia", "nvidia-frontend"])
def test_create_all_only_what_the_driver_reports(tmp_path: Any, major_name: str | None) -> None:
    """A host with no NVIDIA driver loaded (no nvidia major in /proc/devices): --create-all
    makes no node (it once made /dev/nvidiactl) and says so. A driver before 550.40
    names its major nvidia-frontend."""
    root = tmp_path / "host"
    (root / "dev").mkdir(parents=True)
    (root / "proc").mkdir()
    line = f"195 {major_name}\n" if major_name else ""
    (root / "proc" / "devices").write_text(f"Character devices:\n  1 mem\n{line}\nBlock devices:\n")
    report = create_dev_char_symlinks(HostRoot.single(str(root)), create_all=True)
    made = sorted(p.name for p in (root / "dev").iterdir())
    if major_name is None:
        assert made == []
        assert report == [
            f"created no node: {root}/proc/devices lists no nvidia major (the NVIDIA driver "
            "is not loaded)"
        ]
    else:
        assert made == ["char", "nvidiactl"]
        assert f"created node {root}/dev/nvidiactl c 195:255" in report
