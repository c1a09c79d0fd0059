"""The ``ld.so.cache`` entries a plan carries (``ContainerEdits.ldcache_flags``: the
sonames the plan passes on, so no ELF file is read again) against what reading
each host driver file's ELF header gives, on the realistic 535.261.03 host: the same
soname, path and flags for every library of every capability, so a
container's cache written from the plan is byte for byte the one written by reading.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ocihook.appliers.live.libraries import _entry_for_host, _known_entry, write_ldcache
from ocihook.core.errors import ApplyError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.linux import ldcache, pathsafe
from ocihook.plan.build import ContainerLayout, make_plan
from ocihook.plan.edits import Plan
from ocihook.request.nvidia import request_from_env

pytestmark = pytest.mark.realistic

EVERYTHING = "compute,utility,video,graphics,ngx,display"


def _plan(root: str) -> Plan:
    host = discover(HostRoot.single(root))
    request = request_from_env(
        {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": EVERYTHING}
    )
    return make_plan(host, request, ContainerLayout())


def _host_file(plan: Plan, path: str) -> str:
    """The host driver file mounted at (or linked from) container ``path``."""
    links = {s.link: s.target for s in plan.edits.symlinks}
    dest = path
    if path in links:
        dest = os.path.join(os.path.dirname(path), links[path])
    return next(m.source for m in plan.edits.mounts if m.destination == dest)


def test_plan_flags_match_the_elf_headers(realistic: dict[str, Any]) -> None:
    plan = _plan(realistic["root"])
    flags = dict(plan.edits.ldcache_flags)
    assert set(flags) == set(plan.edits.ldcache_libraries)
    assert len(flags) >= 20  # the 535 host's libraries
    assert 0x0303 in flags.values()  # x86-64 libc6
    for path, value in flags.items():
        read = _entry_for_host(_host_file(plan, path), path)
        assert _known_entry(path, value) == read, path


def test_cache_from_the_plan_is_the_cache_from_reading(
    realistic: dict[str, Any], tmp_path: Path
) -> None:
    plan = _plan(realistic["root"])
    sources = {p: _host_file(plan, p) for p in plan.edits.ldcache_libraries}
    caches = []
    for known in (None, dict(plan.edits.ldcache_flags)):
        rootfs = tmp_path / ("known" if known else "read")
        (rootfs / "etc").mkdir(parents=True)
        root_fd = pathsafe.open_root(str(rootfs))
        try:
            write_ldcache(root_fd, plan.edits.ldcache_libraries, sources=sources, known=known)
        finally:
            os.close(root_fd)
        caches.append((rootfs / "etc/ld.so.cache").read_bytes())
    assert caches[0] == caches[1]
    entries = ldcache.parse(caches[0])
    assert {e.soname for e in entries} >= {"libcuda.so.1", "libnvidia-ml.so.1"}


@pytest.mark.parametrize("path", ["libcuda.so.1", "/usr/lib/", "/usr/lib/..", "/a/b\0c"])
def test_known_entry_refuses_what_is_not_a_library_path(path: str) -> None:
    with pytest.raises(ApplyError):
        _known_entry(path, 0x0303)
