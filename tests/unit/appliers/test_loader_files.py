"""What each loader of an image reads, written in its rootfs: ``ld.so.cache`` always and a
musl loader's ``/etc/ld-musl-<arch>.path`` (made with musl's defaults first, or appended
to), by the createContainer hook (spec mode, CDI) and recorded for hook mode's poststop,
which puts back exactly what was there. Rootfs trees hold Debian's real musl loader."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ocihook.appliers.live.hooks import create_container_hook
from ocihook.appliers.live.leftovers import record_created, remove_recorded
from ocihook.appliers.live.libraries import (
    LoaderFile,
    restore_loader_files,
    write_loader_files,
)
from ocihook.core.errors import ApplyError
from ocihook.linux import ldcache
from ocihook.linux.pathsafe import open_root
from ocihook.oci.bundle import load_bundle

MUSL_LOADER = os.path.realpath("/lib/ld-musl-x86_64.so.1")
PATH_FILE = "etc/ld-musl-x86_64.path"

pytestmark = pytest.mark.skipif(
    os.uname().machine != "x86_64" or not os.path.isfile(MUSL_LOADER),
    reason="needs x86-64 and Debian's musl package (scripts/setup)",
)

LIB64 = "/usr/lib64/libcuda.so.1::0x0303"  # flags as discovery gives them
LIB32 = "/usr/lib32/libcuda.so.1::0x0003"


def musl_bundle(bundle_factory: Any) -> Path:
    bundle = Path(bundle_factory(["true"], []))
    lib = bundle / "rootfs/lib"
    lib.mkdir(exist_ok=True)
    shutil.copyfile(MUSL_LOADER, lib / "ld-musl-x86_64.so.1")
    return bundle


def test_hook_makes_the_path_file_with_musl_defaults_first(bundle_factory: Any) -> None:
    bundle = musl_bundle(bundle_factory)
    create_container_hook(load_bundle(str(bundle)), (), [LIB64, LIB32])
    text = (bundle / "rootfs" / PATH_FILE).read_text()
    # the 32-bit library is not for the x86-64 loader
    assert text == "/lib\n/usr/local/lib\n/usr/lib\n/usr/lib64\n"
    assert oct((bundle / "rootfs" / PATH_FILE).stat().st_mode & 0o777) == "0o644"
    cache = ldcache.parse((bundle / "rootfs/etc/ld.so.cache").read_bytes())
    assert {(e.soname, e.path) for e in cache} == {
        ("libcuda.so.1", "/usr/lib64/libcuda.so.1"),
        ("libcuda.so.1", "/usr/lib32/libcuda.so.1"),
    }
    # a second run (a restarted container) changes nothing
    create_container_hook(load_bundle(str(bundle)), (), [LIB64])
    assert (bundle / "rootfs" / PATH_FILE).read_text() == text


def test_hook_appends_to_the_images_path_file(bundle_factory: Any) -> None:
    bundle = musl_bundle(bundle_factory)
    (bundle / "rootfs" / PATH_FILE).write_text("/opt/app/lib:/usr/lib")
    create_container_hook(load_bundle(str(bundle)), (), [LIB64])
    assert (bundle / "rootfs" / PATH_FILE).read_text() == "/opt/app/lib:/usr/lib\n/usr/lib64\n"


def test_an_image_without_a_musl_loader_gets_no_path_file(bundle_factory: Any) -> None:
    bundle = Path(bundle_factory(["true"], []))
    create_container_hook(load_bundle(str(bundle)), (), [LIB64])
    assert not list((bundle / "rootfs/etc").glob("ld-musl-*"))
    assert (bundle / "rootfs/etc/ld.so.cache").is_file()


def test_a_hostile_path_file_fails_the_hook_and_nothing_stays(bundle_factory: Any) -> None:
    """A FIFO planted at the path file is refused (never opened for a blocking read); the
    cache written before it is taken back."""
    bundle = musl_bundle(bundle_factory)
    os.mkfifo(bundle / "rootfs" / PATH_FILE)
    before = sorted(str(p) for p in (bundle / "rootfs").rglob("*"))
    with pytest.raises(ApplyError) as err:
        create_container_hook(load_bundle(str(bundle)), (), [LIB64])
    assert err.value.path == "/etc/ld-musl-x86_64.path"
    assert "not a regular file" in err.value.message
    assert sorted(str(p) for p in (bundle / "rootfs").rglob("*")) == before
    assert not (bundle / "rootfs/etc/ld.so.cache").exists()


def test_a_path_file_link_to_the_host_is_replaced_not_written_through(
    bundle_factory: Any, tmp_path: Path
) -> None:
    host_file = tmp_path / "host-file"
    host_file.write_text("/host\n")
    bundle = musl_bundle(bundle_factory)
    (bundle / "rootfs" / PATH_FILE).symlink_to(host_file)
    create_container_hook(load_bundle(str(bundle)), (), [LIB64])
    assert host_file.read_text() == "/host\n"
    assert (bundle / "rootfs" / PATH_FILE).read_text().endswith("/usr/lib64\n")


def test_write_loader_files_returns_what_it_wrote(bundle_factory: Any) -> None:
    bundle = musl_bundle(bundle_factory)
    (bundle / "rootfs" / PATH_FILE).write_text("/lib\n")
    fd = open_root(str(bundle / "rootfs"))
    try:
        files = write_loader_files(
            fd,
            str(bundle / "rootfs"),
            ["/usr/lib64/libcuda.so.1"],
            known={"/usr/lib64/libcuda.so.1": 0x0303},
        )
    finally:
        os.close(fd)
    assert [(f.path, f.previous, f.written) for f in files] == [
        ("/etc/ld.so.cache", None, None),
        ("/etc/ld-musl-x86_64.path", b"/lib\n", b"/lib\n/usr/lib64\n"),
    ]


@pytest.mark.parametrize("previous", [None, b"/opt/lib\n"])
def test_poststop_puts_back_what_was_there(bundle_factory: Any, previous: bytes | None) -> None:
    bundle = musl_bundle(bundle_factory)
    target = bundle / "rootfs" / PATH_FILE
    if previous is not None:
        target.write_bytes(previous)
    written = (previous or b"/lib\n/usr/local/lib\n/usr/lib\n") + b"/usr/lib64\n"
    target.write_bytes(written)
    loaded = load_bundle(str(bundle))
    assert record_created(loaded, [], {}, [LoaderFile("/" + PATH_FILE, previous, written)]) is None
    removed, kept = remove_recorded(loaded)
    assert kept == []
    if previous is None:
        assert removed == ["/" + PATH_FILE] and not target.exists()
    else:
        assert removed == [] and target.read_bytes() == previous
    assert not (bundle / ".ocihook-created.json").exists()


def test_poststop_keeps_a_path_file_changed_since(bundle_factory: Any) -> None:
    bundle = musl_bundle(bundle_factory)
    target = bundle / "rootfs" / PATH_FILE
    target.write_bytes(b"/lib\n/usr/lib64\n/opt/added-by-the-container\n")
    loaded = load_bundle(str(bundle))
    record_created(loaded, [], {}, [LoaderFile("/" + PATH_FILE, None, b"/lib\n/usr/lib64\n")])
    removed, kept = remove_recorded(loaded)
    assert removed == []
    assert kept == ["/etc/ld-musl-x86_64.path changed since ocihook wrote it: kept"]
    assert target.read_bytes().endswith(b"/opt/added-by-the-container\n")


@pytest.mark.parametrize("cache", [b"", b"not a cache"])
def test_a_rollback_gives_each_file_back_its_bytes_mode_and_owner(
    bundle_factory: Any, cache: bytes
) -> None:
    """``restore_loader_files`` (the rollback of a failed edit or start): each file the
    edit replaced gets back its bytes, permission bits, owner and group, not a new file
    of the writer's (0644, root); an empty ``ld.so.cache`` comes back empty, not removed."""
    bundle = musl_bundle(bundle_factory)
    root = bundle / "rootfs"
    (root / "etc").mkdir(exist_ok=True)
    originals = {"etc/ld.so.cache": (cache, 0o600, 1234), PATH_FILE: (b"/lib\n", 0o640, 4321)}
    for rel, (data, mode, uid) in originals.items():
        (root / rel).write_bytes(data)
        os.chown(root / rel, uid, uid + 1)
        os.chmod(root / rel, mode)
    fd = open_root(str(root))
    try:
        files = write_loader_files(
            fd, str(root), ["/usr/lib64/libcuda.so.1"], known={"/usr/lib64/libcuda.so.1": 0x0303}
        )
        for rel in originals:
            st = (root / rel).stat()
            assert (st.st_mode & 0o7777, st.st_uid) == (0o644, 0), rel
        restore_loader_files(fd, files)
    finally:
        os.close(fd)
    for rel, (data, mode, uid) in originals.items():
        st = (root / rel).stat()
        assert (root / rel).read_bytes() == data
        assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == (mode, uid, uid + 1), rel


@pytest.mark.parametrize(
    ("stat", "expected"),
    [((0o600, 1234, 1235), (0o600, 1234, 1235)), (None, (0o644, 0, 0))],
)
def test_poststop_puts_back_the_files_mode_and_owner(
    bundle_factory: Any, stat: tuple[int, int, int] | None, expected: tuple[int, int, int]
) -> None:
    """The poststop record keeps a replaced file's permission bits and owner
    (``previous_stat``) and the restore gives them back; a record without them (written
    by an older ocihook) restores 0644, root's."""
    bundle = musl_bundle(bundle_factory)
    target = bundle / "rootfs" / PATH_FILE
    written = b"/opt/lib\n/usr/lib64\n"
    target.write_bytes(written)
    loaded = load_bundle(str(bundle))
    made = LoaderFile("/" + PATH_FILE, b"/opt/lib\n", written, stat)
    assert record_created(loaded, [], {}, [made]) is None
    assert remove_recorded(loaded) == ([], [])
    st = target.stat()
    assert target.read_bytes() == b"/opt/lib\n"
    assert (st.st_mode & 0o7777, st.st_uid, st.st_gid) == expected
