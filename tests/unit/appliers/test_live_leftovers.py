"""What hook mode made in a rootfs, recorded and removed after the container is gone
(ocihook.appliers.live.leftovers): only what is still as ocihook made it — an empty file,
a link with the recorded target, an empty directory — is removed; a file the container
filled or a link it re-pointed is kept and reported."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ocihook.appliers.live.leftovers import RECORD_NAME, record_created, remove_recorded
from ocihook.oci.bundle import Bundle


def _bundle(tmp_path: Path) -> Bundle:
    rootfs = tmp_path / "rootfs"
    (rootfs / "usr/lib64").mkdir(parents=True)
    return Bundle(str(tmp_path), str(tmp_path / "config.json"), b"{}", {}, str(rootfs))


def test_unchanged_things_are_removed_changed_ones_kept(tmp_path: Path) -> None:
    b = _bundle(tmp_path)
    lib = Path(b.rootfs, "usr/lib64")
    (lib / "libcuda.so.535.261.03").touch()  # a mount target: empty
    (lib / "libnvidia-ml.so.535.261.03").write_bytes(b"filled since")
    os.symlink("libcuda.so.535.261.03", lib / "libcuda.so.1")
    os.symlink("elsewhere.so", lib / "libnvidia-ml.so.1")  # re-pointed since
    (lib / "nvidia").mkdir()
    made = [
        "/usr/lib64/nvidia",
        "/usr/lib64/libcuda.so.535.261.03",
        "/usr/lib64/libnvidia-ml.so.535.261.03",
        "/usr/lib64/libcuda.so.1",
        "/usr/lib64/libnvidia-ml.so.1",
        "/dev/nvidia0",  # below /dev: the runtime's tmpfs, never recorded
    ]
    links = {
        "/usr/lib64/libcuda.so.1": "libcuda.so.535.261.03",
        "/usr/lib64/libnvidia-ml.so.1": "libnvidia-ml.so.535.261.03",
    }
    assert record_created(b, made, links) is None
    doc = json.loads(Path(tmp_path, RECORD_NAME).read_text())
    assert doc == {"version": 1, "paths": made[:5], "links": links}
    removed, kept = remove_recorded(b)
    assert removed == [
        "/usr/lib64/libcuda.so.1",
        "/usr/lib64/libcuda.so.535.261.03",
        "/usr/lib64/nvidia",
    ]
    assert kept == [
        "/usr/lib64/libnvidia-ml.so.1 changed since ocihook made it: kept",
        "/usr/lib64/libnvidia-ml.so.535.261.03 changed since ocihook made it: kept",
    ]
    assert sorted(p.name for p in lib.iterdir()) == [
        "libnvidia-ml.so.1",
        "libnvidia-ml.so.535.261.03",
    ]
    assert not Path(tmp_path, RECORD_NAME).exists()


def test_a_link_where_a_file_was_made_is_kept(tmp_path: Path) -> None:
    """The container replaced the empty file ocihook made by a link: not ocihook's."""
    b = _bundle(tmp_path)
    lib = Path(b.rootfs, "usr/lib64")
    os.symlink("/etc/passwd", lib / "libcuda.so.535.261.03")
    record_created(b, ["/usr/lib64/libcuda.so.535.261.03"], {})
    removed, kept = remove_recorded(b)
    assert removed == [] and len(kept) == 1
    assert os.path.islink(lib / "libcuda.so.535.261.03")


def test_no_record_and_a_foreign_record(tmp_path: Path) -> None:
    b = _bundle(tmp_path)
    assert remove_recorded(b) == ([], [])
    Path(tmp_path, RECORD_NAME).write_text(json.dumps({"paths": ["relative"], "links": {}}))
    removed, kept = remove_recorded(b)
    assert removed == []
    assert kept == [f"{tmp_path}/{RECORD_NAME} is not a record ocihook wrote; nothing removed"]


def test_the_record_is_written_without_fsync_or_guardian(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record lives in the bundle, which goes with the container: it is replaced
    atomically, with no fsync and no guardian process (about 1.3 ms of a hook's start)."""
    from ocihook.linux import atomicfile

    forked: list[str] = []
    synced: list[int] = []
    monkeypatch.setattr(atomicfile, "guard_name", lambda dir_fd, name: forked.append(name))
    monkeypatch.setattr(atomicfile.os, "fsync", lambda fd: synced.append(fd))
    b = _bundle(tmp_path)
    (Path(b.rootfs) / "usr/lib64/libcuda.so.1").symlink_to("libcuda.so.535.261.03")
    made = ["/usr/lib64/libcuda.so.1"]
    assert record_created(b, made, {made[0]: "libcuda.so.535.261.03"}) is None
    assert forked == [] and synced == []
    record = json.loads((tmp_path / RECORD_NAME).read_text())
    assert record["paths"] == made
    assert sorted(os.listdir(tmp_path)) == [RECORD_NAME, "rootfs"]
