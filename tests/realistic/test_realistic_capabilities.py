"""Discovery on the realistic 535.261.03 host against an independent oracle, capability by capability.

The oracle (``fixtures/realistic/expected.py``, stdlib only, no ocihook import) derives the files a
correct discovery must report from what NVIDIA's Debian packages install plus the capability
tables of /work/shared/reference/nvidia.md section 3; its module docstring lists every rule and
its source. Here both sides are compared as sets of ``(capability, kind, real path)`` (libraries
also by ELF class) and a mismatch fails with the missing / unexpected entries.

Needs the tree built by ``fixtures/realistic/build.py`` (honours ``OCIHOOK_CACHE`` like
tests/conftest.py); skips with the reason when it is absent. The oracle and the discovery run once
per session; only the stale-library test copies the tree (``cp -a``, about 870 MB, into tmp).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support import REPO, realistic_dir

ORACLE = Path(REPO, "fixtures", "realistic", "expected.py")
VERSION = "535.261.03"
STALE = "470.57.02"
LIBRARY_CAPABILITIES = ("utility", "compute", "video", "graphics", "ngx")
FILE_CAPABILITIES = ("utility", "compute", "video", "graphics", "ngx", "all")

Entry = tuple[Any, ...]


# ----------------------------------------------------------------------------------------------
# Fixtures
# ----------------------------------------------------------------------------------------------


def _load_oracle() -> ModuleType:
    name = "ocihook_realistic_expected"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ORACLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def _skip(reason: str) -> None:
    print(f"SKIP test_realistic_capabilities: {reason}", file=sys.stderr)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def oracle_mod() -> ModuleType:
    return _load_oracle()


@pytest.fixture(scope="session")
def cache_dir() -> str:
    root = realistic_dir()
    if not os.path.exists(os.path.join(root, ".ocihook-fixture.json")):
        _skip(f"realistic host not built at {root}: run python fixtures/realistic/build.py")
    fdir = os.path.dirname(root)
    if not os.path.exists(os.path.join(fdir, "debs", "manifest.json")):
        _skip(f"no cached packages in {fdir}/debs (rerun fixtures/realistic/build.py)")
    return fdir


@pytest.fixture(scope="session")
def root(cache_dir: str) -> str:
    return os.path.join(cache_dir, "root")


@pytest.fixture(scope="session")
def expected(oracle_mod: ModuleType, cache_dir: str) -> dict[str, frozenset[Entry]]:
    try:
        result: dict[str, frozenset[Entry]] = oracle_mod.expected_files(cache_dir)
    except oracle_mod.OracleError as e:
        pytest.fail(f"oracle cannot run on this tree: {e}", pytrace=False)
    return result


@pytest.fixture(scope="session")
def expected_all(expected: dict[str, frozenset[Entry]]) -> frozenset[Entry]:
    return frozenset().union(*expected.values())


def _discover(root: str) -> Any:
    from ocihook.core.hostroot import HostRoot
    from ocihook.discovery.nvidia import discover

    return discover(HostRoot.single(root))


@pytest.fixture(scope="session")
def host(root: str) -> Any:
    return _discover(root)


# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def _rel(root: str, host_path: str) -> str:
    """``host_path`` minus the root prefix; fails when the path is not under the root."""
    if not host_path.startswith(root.rstrip("/") + "/"):
        pytest.fail(f"host path outside the driver root {root}: {host_path}", pytrace=False)
    return host_path[len(root.rstrip("/")) :]


def _found_libraries(host: Any, root: str) -> set[Entry]:
    return {
        (lib.capability, "library", _rel(root, lib.host_path), lib.elf_class)
        for lib in host.libraries
    }


def _found_files(host: Any, root: str) -> set[Entry]:
    return {(f.capability, f.kind, _rel(root, f.host_path)) for f in host.files}


def _files_only(entries: Iterable[Entry]) -> set[Entry]:
    return {e[:3] for e in entries if e[1] != "library"}


def _fmt(entries: Iterable[Entry]) -> str:
    rows = sorted(entries, key=lambda e: tuple("" if x is None else str(x) for x in e))
    return (
        "\n".join("    " + "  ".join("-" if x is None else str(x) for x in e) for e in rows)
        or "    (none)"
    )


def _assert_same(label: str, expected: Iterable[Entry], found: Iterable[Entry]) -> None:
    want, got = set(expected), set(found)
    missing, unexpected = want - got, got - want
    if missing or unexpected:
        pytest.fail(
            f"{label}: discovery differs from the package oracle "
            f"(expected {len(want)}, found {len(got)})\n"
            f"  missing ({len(missing)}), in the packages but not reported:\n{_fmt(missing)}\n"
            f"  unexpected ({len(unexpected)}), reported but not in the oracle:\n{_fmt(unexpected)}",
            pytrace=False,
        )


def _elf_class(host_path: str) -> int | None:
    with open(host_path, "rb") as f:
        ident = f.read(5)
    if ident[:4] != b"\x7fELF":
        return None
    return {1: 32, 2: 64}.get(ident[4])


# ----------------------------------------------------------------------------------------------
# The oracle itself (cheap guards, so a broken oracle does not pass for a broken discovery)
# ----------------------------------------------------------------------------------------------


def test_oracle_sane(
    oracle_mod: ModuleType,
    cache_dir: str,
    root: str,
    expected_all: frozenset[Entry],
    realistic: dict[str, Any],
) -> None:
    for cap, kind, path, cls in expected_all:
        assert stat.S_ISREG(os.lstat(root + path).st_mode) or kind == "ipc", path
        assert (cls in (32, 64)) == (kind in ("library", "binary")), (cap, kind, path, cls)
    real = {e[2] for e in expected_all}
    assert "/usr/lib/nvidia/current/nvidia-smi" in real
    assert f"/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{VERSION}" in real
    assert f"/usr/lib/i386-linux-gnu/nvidia/current/libcuda.so.{VERSION}" in real
    # The builder's own facts agree with the oracle where they overlap.
    firmware = {oracle_mod.resolve_in_tree(root, p) for p in realistic["firmware"]}
    assert firmware == {e[2] for e in expected_all if e[1] == "firmware"}
    sockets = {oracle_mod.resolve_in_tree(root, p) for p in realistic["sockets"]}
    assert sockets == {e[2] for e in expected_all if e[1] == "ipc"}
    missing = oracle_mod.library_files_missing_from_ldcache(cache_dir)
    assert (
        "utility",
        "library",
        f"/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-cfg.so.{VERSION}",
        64,
    ) in missing


def test_oracle_listing_matches_dpkg_deb(oracle_mod: ModuleType, cache_dir: str) -> None:
    """The fast control-archive listing equals ``dpkg-deb -c`` (small packages: conffile, alternatives)."""
    if shutil.which("dpkg-deb") is None:
        pytest.skip("needs dpkg-deb")
    debs = Path(cache_dir) / "debs"
    for name in ("nvidia-opencl-common", "nvidia-smi", "nvidia-driver-bin", "nvidia-persistenced"):
        (deb,) = debs.glob(f"{name}_*_amd64.deb")
        fast = oracle_mod._package_from_control(str(deb))
        slow = oracle_mod._package_from_dpkg(str(deb))
        assert fast == slow, name


# ----------------------------------------------------------------------------------------------
# Discovery against the oracle
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("elf_class", [64, 32])
@pytest.mark.parametrize("capability", LIBRARY_CAPABILITIES)
def test_libraries(
    capability: str, elf_class: int, host: Any, root: str, expected: dict[str, frozenset[Entry]]
) -> None:
    want = {e for e in expected[capability] if e[1] == "library" and e[3] == elf_class}
    got = {e for e in _found_libraries(host, root) if e[0] == capability and e[3] == elf_class}
    _assert_same(f"{capability} libraries, {elf_class}-bit", want, got)


@pytest.mark.parametrize("capability", FILE_CAPABILITIES)
def test_files(
    capability: str, host: Any, root: str, expected: dict[str, frozenset[Entry]]
) -> None:
    want = _files_only(expected[capability])
    got = {e for e in _found_files(host, root) if e[0] == capability}
    _assert_same(f"{capability} files (binaries, firmware, config, ipc, profile)", want, got)


def test_no_capability_outside_the_oracle(
    host: Any, root: str, expected_all: frozenset[Entry]
) -> None:
    known = set(FILE_CAPABILITIES)
    stray = {
        e for e in _found_libraries(host, root) | _found_files(host, root) if e[0] not in known
    }
    _assert_same("entries with a capability the oracle does not know", set(), stray)
    _assert_same(
        "everything (libraries and files, all capabilities)",
        {e if e[1] == "library" else e[:3] for e in expected_all},
        _found_libraries(host, root) | _found_files(host, root),
    )


def test_libraries_outside_ldcache_found_by_fallback(
    oracle_mod: ModuleType, cache_dir: str, host: Any, root: str
) -> None:
    """libnvidia-cfg and libvdpau_nvidia have no ld.so.cache entry on Debian: the fallback dirs find them."""
    missing = oracle_mod.library_files_missing_from_ldcache(cache_dir)
    assert missing, "expected some libraries outside ld.so.cache on this tree"
    found = _found_libraries(host, root)
    _assert_same("libraries outside ld.so.cache", missing, {e for e in found if e in missing})


def test_no_duplicates(host: Any) -> None:
    """Sets hide duplicates: each real file is reported once (per kind for files)."""
    libs = [lib.host_path for lib in host.libraries]
    files = [(f.kind, f.host_path) for f in host.files]
    assert len(libs) == len(set(libs)), sorted(p for p in set(libs) if libs.count(p) > 1)
    assert len(files) == len(set(files)), sorted(p for p in set(files) if files.count(p) > 1)


def test_library_records(host: Any, root: str, oracle_mod: ModuleType) -> None:
    assert host.libraries
    for lib in host.libraries:
        hp = lib.host_path
        rel = _rel(root, hp)
        st = os.lstat(hp)
        assert stat.S_ISREG(st.st_mode), f"{hp}: not a regular file (links must be resolved)"
        assert os.path.realpath(hp) == hp, f"{hp}: not the real path"
        assert os.path.basename(hp).endswith("." + VERSION), hp
        assert lib.elf_class in (32, 64) and _elf_class(hp) == lib.elf_class, hp
        assert oracle_mod.resolve_in_tree(root, lib.path) == rel, (lib.path, hp)
        assert lib.name and lib.soname, hp


def test_file_records(host: Any, root: str, oracle_mod: ModuleType) -> None:
    assert host.files
    for f in host.files:
        rel = _rel(root, f.host_path)
        assert os.path.realpath(f.host_path) == f.host_path, f"{f.host_path}: not the resolved file"
        assert oracle_mod.resolve_in_tree(root, f.path) == rel, (f.path, f.host_path)


def test_nothing_outside_the_root(host: Any, root: str) -> None:
    real_root = os.path.realpath(root) + "/"
    paths = [lib.host_path for lib in host.libraries] + [f.host_path for f in host.files]
    outside = [p for p in paths if not os.path.realpath(p).startswith(real_root)]
    assert not outside, f"files outside the driver root: {outside}"


def test_nvidia_smi(host: Any) -> None:
    smi = [
        f
        for f in host.files
        if f.kind == "binary" and os.path.basename(f.host_path) == "nvidia-smi"
    ]
    assert len(smi) == 1, f"expected one nvidia-smi binary, found {[f.host_path for f in smi]}"
    (f,) = smi
    assert f.capability == "utility"
    assert _elf_class(f.host_path) == 64
    if hasattr(f, "elf_class"):
        assert f.elf_class == 64
    assert os.path.basename(f.path) == "nvidia-smi"


def test_no_32bit_binaries(host: Any) -> None:
    """Debian ships no i386 nvidia-smi (or any i386 binary): none may be reported."""
    bad = [f.host_path for f in host.files if f.kind == "binary" and _elf_class(f.host_path) != 64]
    assert not bad, f"non-64-bit binaries reported: {bad}"


# ----------------------------------------------------------------------------------------------
# Stale files from an older driver must never be selected
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stale_root(
    root: str, tmp_path_factory: pytest.TempPathFactory, oracle_mod: ModuleType
) -> Iterator[str]:
    """A ``cp -a`` copy of the tree with 470.57.02 leftovers planted (the shared cache is untouched).

    The copy's ld.so.cache entry ``libcuda.so`` (both ABIs) then leads to ``libcuda.so.470.57.02``;
    libnvidia-ml/libnvidia-cfg leftovers sit unlinked in the default and fallback directories.
    Removed afterwards (it is as big as the tree).
    """
    copy = str(tmp_path_factory.mktemp("stale") / "root")
    subprocess.run(["cp", "-a", "--reflink=auto", root, copy], check=True)
    for triplet in ("x86_64-linux-gnu", "i386-linux-gnu"):
        cur = f"{copy}/usr/lib/{triplet}/nvidia/current"
        shutil.copyfile(f"{cur}/libcuda.so.{VERSION}", f"{cur}/libcuda.so.{STALE}")
        # ld.so.cache's "libcuda.so" entry leads to the stale file from here on.
        os.unlink(f"{cur}/libcuda.so")
        os.symlink(f"libcuda.so.{STALE}", f"{cur}/libcuda.so")
        # Leftovers with no link at all, in the fallback and default library directories.
        shutil.copyfile(
            f"{cur}/libnvidia-ml.so.{VERSION}", f"{copy}/usr/lib/{triplet}/libnvidia-ml.so.{STALE}"
        )
    cur64 = f"{copy}/usr/lib/x86_64-linux-gnu/nvidia/current"
    shutil.copyfile(f"{cur64}/libnvidia-cfg.so.{VERSION}", f"{cur64}/libnvidia-cfg.so.{STALE}")
    for triplet in ("x86_64-linux-gnu", "i386-linux-gnu"):  # the planted route is really there
        assert oracle_mod.resolve_in_tree(copy, f"/lib/{triplet}/libcuda.so").endswith(STALE)
    yield copy
    shutil.rmtree(os.path.dirname(copy), ignore_errors=True)


def test_stale_libraries_never_selected(stale_root: str, expected_all: frozenset[Entry]) -> None:
    host = _discover(stale_root)
    chosen = [lib.host_path for lib in host.libraries] + [f.host_path for f in host.files]
    stale = [p for p in chosen if STALE in p]
    assert not stale, f"stale {STALE} files selected: {stale}"
    _assert_same(
        "libraries with stale leftovers planted",
        {e for e in expected_all if e[1] == "library"},
        _found_libraries(host, stale_root),
    )
