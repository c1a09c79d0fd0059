"""doctor's hook-free check: would an image find the libraries of a hook-free CDI spec
(``cdi generate --hook-free``)? Images laid out with the machine's real glibc loader and
Debian's musl loader (as tests/unit/linux/test_loaders.py builds them); the answer is
checked against the e2e run of the same layouts in tests/e2e/test_e2e_loaders.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.images import alpine, debian_merged_usr, needs_musl, needs_x86_64, rhel

from ocihook.doctor.hookfree import hook_free_fit
from ocihook.linux import ldcache


@needs_x86_64
def test_debian_and_rhel_layouts_fit_the_default_dirs(tmp_path: Path) -> None:
    status, evidence = hook_free_fit(str(debian_merged_usr(tmp_path / "d")))
    assert (status, evidence) == (
        "PASS",
        "glibc (/lib64/ld-linux-x86-64.so.2) finds it in /usr/lib",
    )
    status, evidence = hook_free_fit(str(rhel(tmp_path / "r")))
    assert (status, evidence) == (
        "PASS",
        "glibc (/lib64/ld-linux-x86-64.so.2) finds it in /usr/lib64",
    )


@needs_x86_64
def test_dirs_no_loader_searches_are_warned(tmp_path: Path) -> None:
    status, evidence = hook_free_fit(str(rhel(tmp_path / "r")), ("/usr/local/nvidia/lib64",))
    assert status == "WARN"
    assert evidence == (
        "glibc (/lib64/ld-linux-x86-64.so.2) searches /lib64:/usr/lib64, none of "
        "/usr/local/nvidia/lib64"
    )


@needs_x86_64
def test_an_image_cache_naming_its_own_libcuda_wins(tmp_path: Path) -> None:
    root = debian_merged_usr(tmp_path / "d")
    (root / "etc").mkdir()
    entry = ldcache.CacheEntry("libcuda.so.1", "/usr/local/cuda/compat/libcuda.so.1", 0x0303)
    (root / "etc/ld.so.cache").write_bytes(ldcache.build([entry]))
    status, evidence = hook_free_fit(str(root))
    assert status == "WARN"
    assert "names its own libcuda.so.1 (/usr/local/cuda/compat/libcuda.so.1)" in evidence


@needs_musl
@pytest.mark.parametrize(
    ("path_file", "status"), [(None, "PASS"), ("/lib\n/usr/lib\n", "PASS"), ("/opt/lib\n", "WARN")]
)
def test_musl_defaults_and_its_path_file(
    tmp_path: Path, path_file: str | None, status: str
) -> None:
    root = alpine(tmp_path / "a")
    if path_file is not None:
        (root / "etc/ld-musl-x86_64.path").write_text(path_file)
    assert hook_free_fit(str(root))[0] == status


def test_a_scratch_image_cannot_tell(tmp_path: Path) -> None:
    assert hook_free_fit(str(tmp_path))[0] == "SKIP"
