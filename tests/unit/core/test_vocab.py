"""The shared vocabulary of :mod:`ocihook.core.vocab`: PCI bus id spellings, defined once."""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from support import REPO

from ocihook.core.vocab import parse_bus_id, procfs_bus_id, sysfs_bus_id


@given(
    st.integers(0, 0xFFFF),
    st.integers(0, 255),
    st.integers(0, 31),
    st.integers(0, 7),
    st.booleans(),
    st.booleans(),
)
def test_sysfs_bus_id(domain: int, bus: int, dev: int, fn: int, wide: bool, upper: bool) -> None:
    width = 8 if wide else 4
    given_id = f"{domain:0{width}x}:{bus:02x}:{dev:02x}.{fn}"
    if upper:
        given_id = given_id.upper()
    key = parse_bus_id(given_id)
    assert key == (domain, bus, dev, fn)
    assert sysfs_bus_id(key) == f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    assert procfs_bus_id(key) == f"{domain:08x}:{bus:02x}:{dev:02x}.{fn}"


def test_short_bus_id_means_domain_zero() -> None:
    assert parse_bus_id("3B:00.0") is None
    key = parse_bus_id("3B:00.0", short=True)
    assert key is not None and sysfs_bus_id(key) == "0000:3b:00.0"


def test_one_definition_of_the_bus_id_spellings() -> None:
    """No module of ocihook defines its own sysfs or procfs bus id spelling."""
    defined = sorted(
        f"{path.relative_to(REPO)}:{node.name}"
        for path in Path(REPO, "ocihook").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.lstrip("_").endswith("fs_bus_id")
    )
    assert defined == [
        "ocihook/core/vocab.py:is_sysfs_bus_id",
        "ocihook/core/vocab.py:procfs_bus_id",
        "ocihook/core/vocab.py:sysfs_bus_id",
    ]
