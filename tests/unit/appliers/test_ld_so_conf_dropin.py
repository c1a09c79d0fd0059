"""The ``ld.so.conf.d`` drop-in of ``hook create-container --ld-so-conf``: which directories
the image's ``ld.so.conf`` already names (includes followed inside the rootfs), and when the
drop-in is written."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.appliers.live.libraries import LD_SO_CONF_DROP_IN, ld_so_conf_dirs, write_ld_so_conf
from ocihook.core.errors import ApplyError
from ocihook.linux import pathsafe


def _rootfs(tmp_path: Path, conf: str | None, drop_ins: dict[str, str] | None = None) -> Path:
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    if conf is not None:
        (root / "etc/ld.so.conf").write_text(conf)
    if drop_ins is not None:
        (root / "etc/ld.so.conf.d").mkdir()
        for name, text in drop_ins.items():
            (root / "etc/ld.so.conf.d" / name).write_text(text)
    return root


def _dirs(root: Path) -> set[str]:
    fd = pathsafe.open_root(str(root))
    try:
        return ld_so_conf_dirs(fd)
    finally:
        os.close(fd)


def test_includes_comments_hwcap_and_old_style_lines(tmp_path: Path) -> None:
    root = _rootfs(
        tmp_path,
        "# comment\ninclude ld.so.conf.d/*.conf\n/opt/a=libc6  # trailing\nhwcap 1 nosegneg\n",
        {
            "x86_64-linux-gnu.conf": "/usr/lib/x86_64-linux-gnu\n/lib/x86_64-linux-gnu/\n",
            "multi.conf": "/usr/local/lib:/opt/b,/opt/c\tinclude-not\n",
            "ignored.txt": "/not/read\n",
        },
    )
    assert _dirs(root) == {
        "/opt/a",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/local/lib",
        "/opt/b",
        "/opt/c",
    }


def test_include_links_stay_in_the_rootfs(tmp_path: Path) -> None:
    outside = tmp_path / "outside.conf"
    outside.write_text("/from/the/host\n")
    root = _rootfs(tmp_path, "include /etc/ld.so.conf.d/*.conf\n", {})
    os.symlink(str(outside), root / "etc/ld.so.conf.d/evil.conf")  # resolved in the root
    os.symlink("/etc/ld.so.conf", root / "etc/ld.so.conf.d/loop.conf")  # an include loop
    assert _dirs(root) == set()


def _write(root: Path, libs: list[str]) -> tuple[bool, bytes | None]:
    fd = pathsafe.open_root(str(root))
    try:
        return write_ld_so_conf(fd, libs)
    finally:
        os.close(fd)


LIBS = [
    "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1",
    "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.1",
    "/usr/lib/x86_64-linux-gnu/libGLX_nvidia.so.0",
    "/usr/lib/i386-linux-gnu/nvidia/current/libcuda.so.1",
]


def test_drop_in_lists_only_what_the_image_lacks(tmp_path: Path) -> None:
    root = _rootfs(
        tmp_path,
        "include /etc/ld.so.conf.d/*.conf\n",
        {"x86_64-linux-gnu.conf": "/usr/lib/x86_64-linux-gnu\n"},
    )
    assert _write(root, LIBS) == (True, None)
    text = (root / LD_SO_CONF_DROP_IN.lstrip("/")).read_text()
    assert text.splitlines()[1:] == [
        "/usr/lib/x86_64-linux-gnu/nvidia/current",
        "/usr/lib/i386-linux-gnu/nvidia/current",
    ]
    # a second start: its own file is not counted, the same content is written again
    assert _write(root, LIBS) == (True, text.encode())
    assert (root / LD_SO_CONF_DROP_IN.lstrip("/")).read_text() == text


def test_nothing_written_when_not_needed_or_not_read(tmp_path: Path) -> None:
    known = _rootfs(tmp_path / "a", "/usr/lib/x86_64-linux-gnu\n", {})
    assert _write(known, LIBS[2:3]) == (False, None)
    no_dir = _rootfs(tmp_path / "b", "include /etc/ld.so.conf.d/*.conf\n")
    assert _write(no_dir, LIBS) == (False, None)
    assert not (no_dir / "etc/ld.so.conf.d").exists()


def test_a_hostile_drop_in_path_is_refused(tmp_path: Path) -> None:
    root = _rootfs(tmp_path, "include /etc/ld.so.conf.d/*.conf\n", {})
    target = tmp_path / "host-file"
    target.write_text("keep\n")
    os.symlink(str(target), root / LD_SO_CONF_DROP_IN.lstrip("/"))
    with contextlib.suppress(ApplyError):
        _write(root, LIBS)
    assert target.read_text() == "keep\n"  # never written through a link


@pytest.mark.parametrize("conf", ["", "include\n", "include   \n", "\x00\xff garbage\n"])
def test_odd_files_name_nothing(tmp_path: Path, conf: str) -> None:
    root = _rootfs(tmp_path, conf, {})
    assert _dirs(root) == set()


@given(
    name=st.text(alphabet="ab.-", max_size=8),
    pattern=st.text(alphabet="ab.*-", max_size=8) | st.text(alphabet="ab.*?[]!-", max_size=8),
)
def test_include_glob_is_fnmatch(name: str, pattern: str) -> None:
    """ld.so.conf ``include`` patterns match directory entries exactly as
    :func:`fnmatch.fnmatchcase` does (without importing it for ``*``-only patterns)."""
    import fnmatch

    from ocihook.appliers.live.libraries import _glob_match

    assert _glob_match(name, pattern) == fnmatch.fnmatchcase(name, pattern)
