"""ocihook.linux.loaders: an image's loaders found from its files (the machine's real glibc
loader and Debian's musl loader copied into rootfs layouts: Debian merged-/usr, RHEL
/usr/lib64, Alpine-like musl, hostile links), the layout chosen from them, and the musl
path file's parser and extension (property tests)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.images import (
    GLIBC_LOADER,
    MUSL_LOADER,
    alpine,
    debian_merged_usr,
    needs_musl,
    needs_x86_64,
    rhel,
)

from ocihook.linux.loaders import (
    MUSL_DEFAULT_PATH,
    find_loaders,
    musl_path_with,
    parse_musl_path,
)
from ocihook.pipeline.bundle import layout_for_rootfs


@needs_x86_64
def test_debian_merged_usr_loader_is_glibc_in_the_multiarch_directory(tmp_path: Path) -> None:
    (loader,) = find_loaders(str(debian_merged_usr(tmp_path)))
    assert (loader.kind, loader.interpreter) == ("glibc", "/lib64/ld-linux-x86-64.so.2")
    assert loader.path == "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    assert (loader.elf_class, loader.machine) == (64, 62)
    assert loader.multiarch_dir == "/usr/lib/x86_64-linux-gnu"
    assert loader.path_file is None


@needs_x86_64
def test_distroless_like_image_gets_the_debian_layout_from_its_loader(tmp_path: Path) -> None:
    """No /etc/debian_version, no ldconfig, no cache: the multiarch loader decides."""
    root = debian_merged_usr(tmp_path)
    assert not (root / "etc/debian_version").exists()
    layout = layout_for_rootfs(str(root))
    assert (layout.libdir, layout.libdir32) == (
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/i386-linux-gnu",
    )


@needs_x86_64
def test_rhel_layout_is_lib64(tmp_path: Path) -> None:
    root = rhel(tmp_path)
    (loader,) = find_loaders(str(root))
    assert loader.path == "/usr/lib64/ld-linux-x86-64.so.2"
    assert loader.multiarch_dir is None
    assert layout_for_rootfs(str(root)).libdir == "/usr/lib64"


@needs_musl
def test_alpine_like_image_has_a_musl_loader_and_the_lib64_layout(tmp_path: Path) -> None:
    root = alpine(tmp_path)
    (loader,) = find_loaders(str(root))
    assert (loader.kind, loader.arch, loader.interpreter) == (
        "musl",
        "x86_64",
        "/lib/ld-musl-x86_64.so.1",
    )
    assert (loader.elf_class, loader.machine) == (64, 62)
    assert loader.path_file == "/etc/ld-musl-x86_64.path"
    assert layout_for_rootfs(str(root)).libdir == "/usr/lib64"


@needs_x86_64
@needs_musl
def test_an_image_with_both_libcs_has_both_loaders_glibc_first(tmp_path: Path) -> None:
    root = debian_merged_usr(tmp_path)
    shutil.copyfile(MUSL_LOADER, root / "usr/lib/ld-musl-x86_64.so.1")
    assert [(x.kind, x.path) for x in find_loaders(str(root))] == [
        ("glibc", "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"),
        ("musl", "/usr/lib/ld-musl-x86_64.so.1"),
    ]


@needs_x86_64
def test_links_never_lead_out_of_the_root(tmp_path: Path) -> None:
    """A loader name linking to the host's loader (absolute, or with ..) resolves inside
    the image, where nothing is: no loader. A file that is not ELF is none either."""
    root = tmp_path / "root"
    (root / "lib").mkdir(parents=True)
    (root / "lib64").mkdir()
    (root / "lib64/ld-linux-x86-64.so.2").symlink_to("../" * 12 + GLIBC_LOADER.lstrip("/"))
    (root / "lib/ld-musl-x86_64.so.1").symlink_to(GLIBC_LOADER)
    (root / "lib/ld-linux.so.2").write_bytes(b"#!/bin/sh\n")
    assert find_loaders(str(root)) == ()
    assert find_loaders(str(tmp_path / "missing")) == ()


@needs_x86_64
def test_a_loader_of_the_wrong_machine_is_not_taken(tmp_path: Path) -> None:
    """An x86-64 file at i386's loader path is not i386's loader."""
    (tmp_path / "lib").mkdir()
    shutil.copyfile(GLIBC_LOADER, tmp_path / "lib/ld-linux.so.2")
    assert find_loaders(str(tmp_path)) == ()


# --- the musl path file ---------------------------------------------------------------

DIR = st.lists(
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=8),
    min_size=1,
    max_size=4,
).map(lambda parts: "/" + "/".join(parts))
SEPARATORS = st.sampled_from([":", "\n", "::", ":\n", "\n\n"])


@given(dirs=st.lists(DIR, max_size=6), seps=st.lists(SEPARATORS, min_size=7, max_size=7))
def test_parse_musl_path_reads_colon_and_newline_lists(dirs: list[str], seps: list[str]) -> None:
    text = seps[0] + "".join(d + s for d, s in zip(dirs, seps[1:], strict=False))
    assert parse_musl_path(text.encode()) == tuple(dirs)


@given(data=st.binary(max_size=200))
def test_parse_musl_path_never_raises_and_stops_at_nul(data: bytes) -> None:
    parsed = parse_musl_path(data)
    assert all(p and ":" not in p and "\n" not in p and "\0" not in p for p in parsed)
    assert parse_musl_path(data + b"\0/after/nul") == parsed or b"\0" in data


@given(existing=st.none() | st.lists(DIR, max_size=5), dirs=st.lists(DIR, max_size=5))
def test_musl_path_with_appends_what_is_missing_once(
    existing: list[str] | None, dirs: list[str]
) -> None:
    before = None if existing is None else "".join(f"{d}\n" for d in existing).encode()
    new = musl_path_with(before, dirs)
    named_before = MUSL_DEFAULT_PATH if existing is None else tuple(existing)
    if all(d in named_before for d in dirs):
        assert new is None
        return
    assert new is not None
    parsed = parse_musl_path(new)
    # what was searched before comes first, unchanged; then the new directories, once each
    assert parsed[: len(named_before)] == named_before
    assert parsed[len(named_before) :] == tuple(
        d for d in dict.fromkeys(dirs) if d not in named_before
    )
    assert musl_path_with(new, dirs) is None  # idempotent


def test_musl_path_file_made_with_the_defaults_first() -> None:
    assert musl_path_with(None, ["/usr/lib64"]) == b"/lib\n/usr/local/lib\n/usr/lib\n/usr/lib64\n"
    assert musl_path_with(None, ["/usr/lib"]) is None  # searched already: no file
    assert musl_path_with(b"/opt/lib", ["/usr/lib64"]) == b"/opt/lib\n/usr/lib64\n"
    assert musl_path_with(b"/a:/usr/lib64\n", ["/usr/lib64"]) is None


@pytest.mark.parametrize("bad", ["usr/lib64", "/a:b", "/a\nb", "/a\0"])
def test_musl_path_with_refuses_a_directory_it_cannot_write(bad: str) -> None:
    with pytest.raises(ValueError, match="musl's path file"):
        musl_path_with(None, [bad])
