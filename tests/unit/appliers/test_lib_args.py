"""``--lib PATH::FLAGS``: the createContainer hook of ocihook's CDI specs
and of spec mode's fallback carries each library's ``ld.so.cache`` flags from discovery,
so it reads no ELF header; the value parses back exactly, a malformed one is refused
naming it, ``cdi transform root`` keeps the flags, and the hook's cache is the one it
writes by reading the files."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.appliers.live.hooks import _parse_libs, create_container_hook
from ocihook.cdi.generate import generate_spec, transform_root
from ocihook.cdi.hookargs import hook_data
from ocihook.core.errors import ApplyError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.linux import ldcache
from ocihook.oci.bundle import load_bundle

NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-", min_size=1, max_size=12)
PATHS = st.lists(NAMES, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p))


@given(paths=st.lists(PATHS, max_size=6), flags=st.lists(st.integers(0, 0x7FFFFFFF)))
def test_lib_values_round_trip(paths: list[str], flags: list[int]) -> None:
    values = [
        f"{p}::{f:#06x}" if i < len(flags) else p
        for i, (p, f) in enumerate(zip(paths, [*flags, *([0] * len(paths))], strict=False))
    ]
    parsed, known = _parse_libs(values)
    assert parsed == paths
    expected = {}
    for i, p in enumerate(paths):
        if i < len(flags):
            expected[p] = flags[i]
    assert known == expected


@pytest.mark.parametrize(
    "value",
    [
        "lib/libcuda.so.1",
        "/a::303",
        "/a::0x",
        "/a::0x123456789",
        "/a::0xzz",
        "::0x303",
        "/a::",
        "/a::0x80000000",  # glibc's flags are an int32_t
        "/a::0xffffffff",
    ],
)
def test_malformed_lib_value_is_refused(value: str) -> None:
    with pytest.raises(ApplyError) as err:
        _parse_libs(["/ok/libc.so.6", value])
    assert err.value.field == "--lib" and err.value.value == value


def _lib_args(spec: Any) -> list[str]:
    data = hook_data(spec.container_edits.hooks[0].args)
    assert data is not None
    return data[2]


def test_cdi_spec_carries_flags_and_transform_keeps_them(sim: Any) -> None:
    host = discover(HostRoot.single(sim.root))
    spec = generate_spec(host, hook_command=("/usr/bin/ocihook",))
    libs = _lib_args(spec)
    assert libs and all(v.rsplit("::", 1)[1] in ("0x0303", "0x0003") for v in libs), libs
    moved = _lib_args(transform_root(spec, "/usr/lib", "/opt/lib", relative_to="container"))
    assert [v.replace("/opt/lib", "/usr/lib", 1) for v in moved] == libs
    assert any(v.startswith("/opt/lib") for v in moved)


def test_hook_cache_with_flags_is_the_cache_from_reading(
    sim: Any, tmp_path: Path, bundle_factory: Any
) -> None:
    """The createContainer hook given ``PATH::FLAGS`` writes the same ``ld.so.cache`` as
    given ``PATH`` alone (then it reads each library's ELF header in the rootfs)."""
    host = discover(HostRoot.single(sim.root))
    spec = generate_spec(host, hook_command=("/usr/bin/ocihook",))
    libs = _lib_args(spec)
    caches = []
    for with_flags in (True, False):
        bundle = Path(bundle_factory(["true"], []))
        rootfs = bundle / "rootfs"
        for value in libs:  # the library files where the mounts would put them
            path = value.split("::")[0]
            lib = next(
                lib
                for lib in host.libraries
                if os.path.dirname(lib.path) == os.path.dirname(path)
                and lib.soname == os.path.basename(path)
            )
            dest = rootfs / path.lstrip("/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(lib.host_path, dest)
        given = libs if with_flags else [v.split("::")[0] for v in libs]
        create_container_hook(load_bundle(str(bundle)), (), given)
        caches.append((rootfs / "etc/ld.so.cache").read_bytes())
    assert caches[0] == caches[1]
    assert {e.soname for e in ldcache.parse(caches[0])} >= {"libcuda.so.1"}


def test_an_unexpected_error_leaves_nothing_behind(
    bundle_factory: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failure that is not an ApplyError or OSError (a bug) in a later step still takes
    back the links and directories made before it."""
    import ocihook.appliers.live.hooks as hooks

    def broken(*_args: object, **_kwargs: object) -> None:
        raise ValueError("a bug")

    monkeypatch.setattr(hooks, "write_loader_files", broken)
    bundle = Path(bundle_factory(["true"], []))
    before = sorted(str(p) for p in (bundle / "rootfs").rglob("*"))
    with pytest.raises(ValueError, match="a bug"):
        create_container_hook(
            load_bundle(str(bundle)), ["libx.so.1.2::/opt/zz/libx.so.1"], ["/opt/zz/libx.so.1"]
        )
    assert sorted(str(p) for p in (bundle / "rootfs").rglob("*")) == before
