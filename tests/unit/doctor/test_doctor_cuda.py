"""The CUDA version per driver branch (:mod:`ocihook.doctor.cuda`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.doctor.cuda import CUDA_BY_BRANCH, cuda_for_driver


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [
        ("535.261.03", "12.2"),
        ("550", "12.4"),
        ("552.1", "12.4"),
        ("580.95.05", "13.0"),
        ("390.1", None),
        ("x", None),
    ],
)
def test_cuda_for_driver(driver: str, cuda: str | None) -> None:
    assert cuda_for_driver(driver) == cuda


@given(st.integers(0, 999), st.integers(0, 999))
def test_cuda_for_driver_is_monotonic(a: int, b: int) -> None:
    from ocihook.request.requirements import version_key

    lo, hi = sorted((a, b))
    ca, cb = cuda_for_driver(f"{lo}.1"), cuda_for_driver(f"{hi}.1")
    if ca is not None:
        assert cb is not None and version_key(ca) <= version_key(cb)  # type: ignore[operator]


def test_table_is_sorted_by_branch_and_cuda_version() -> None:
    from ocihook.request.requirements import version_key

    branches = [b for b, _c in CUDA_BY_BRANCH]
    assert branches == sorted(set(branches))
    keys = [version_key(c) for _b, c in CUDA_BY_BRANCH]
    assert all(k is not None for k in keys)
    assert keys == sorted(keys)  # type: ignore[type-var]
