"""The driver-branch table of CUDA versions (:mod:`ocihook.core.cudaversion`), checked
against NVIDIA's published toolkit/driver pairs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.cudaversion import CUDA_BY_BRANCH, SOURCE_WORDS, cuda_for_driver

#: NVIDIA CUDA Toolkit release notes, Table 3 "CUDA Toolkit and Corresponding Driver
#: Versions" (Linux x86_64 column): each toolkit release and the minimum driver it needs
#: (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/, as published for 13.1).
TOOLKIT_MINIMUM_DRIVER: tuple[tuple[str, str, str], ...] = (
    ("13.1 GA", "13.1", "590.44.01"),
    ("13.0 Update 2", "13.0", "580.95.05"),
    ("13.0 Update 1", "13.0", "580.82.07"),
    ("13.0 GA", "13.0", "580.65.06"),
    ("12.9 Update 1", "12.9", "575.57.08"),
    ("12.9 GA", "12.9", "575.51.03"),
    ("12.8 Update 1", "12.8", "570.124.06"),
    ("12.8 GA", "12.8", "570.26"),
    ("12.6 Update 3", "12.6", "560.35.05"),
    ("12.6 Update 2", "12.6", "560.35.03"),
    ("12.6 Update 1", "12.6", "560.35.03"),
    ("12.6 GA", "12.6", "560.28.03"),
    ("12.5 Update 1", "12.5", "555.42.06"),
    ("12.5 GA", "12.5", "555.42.02"),
    ("12.4 Update 1", "12.4", "550.54.15"),
    ("12.4 GA", "12.4", "550.54.14"),
    ("12.3 Update 1", "12.3", "545.23.08"),
    ("12.3 GA", "12.3", "545.23.06"),
    ("12.2 Update 2", "12.2", "535.104.05"),
    ("12.2 Update 1", "12.2", "535.86.09"),
    ("12.2 GA", "12.2", "535.54.03"),
    ("12.1 Update 1", "12.1", "530.30.02"),
    ("12.1 GA", "12.1", "530.30.02"),
    ("12.0 Update 1", "12.0", "525.85.12"),
    ("12.0 GA", "12.0", "525.60.13"),
    ("11.8 GA", "11.8", "520.61.05"),
    ("11.7 Update 1", "11.7", "515.65.01"),
    ("11.7 GA", "11.7", "515.43.04"),
    ("11.6 Update 2", "11.6", "510.47.03"),
    ("11.6 Update 1", "11.6", "510.47.03"),
    ("11.6 GA", "11.6", "510.39.01"),
    ("11.5 Update 2", "11.5", "495.29.05"),
    ("11.5 Update 1", "11.5", "495.29.05"),
    ("11.5 GA", "11.5", "495.29.05"),
    ("11.4 Update 4", "11.4", "470.82.01"),
    ("11.4 Update 3", "11.4", "470.82.01"),
    ("11.4 Update 2", "11.4", "470.57.02"),
    ("11.4 Update 1", "11.4", "470.57.02"),
    ("11.4.0 GA", "11.4", "470.42.01"),
    ("11.3.1 Update 1", "11.3", "465.19.01"),
    ("11.3.0 GA", "11.3", "465.19.01"),
    ("11.2.2 Update 2", "11.2", "460.32.03"),
    ("11.2.1 Update 1", "11.2", "460.32.03"),
    ("11.2.0 GA", "11.2", "460.27.03"),
    ("11.1.1 Update 1", "11.1", "455.32"),
    ("11.1 GA", "11.1", "455.23"),
    ("11.0.3 Update 1", "11.0", "450.51.06"),
    ("11.0.2 GA", "11.0", "450.51.05"),
    ("11.0.1 RC", "11.0", "450.36.06"),
    ("10.2.89", "10.2", "440.33"),
    ("10.1 (10.1.105 general release, and updates)", "10.1", "418.39"),
    ("10.0.130", "10.0", "410.48"),
    ("9.2 (9.2.148 Update 1)", "9.2", "396.37"),
    ("9.2 (9.2.88)", "9.2", "396.26"),
    ("9.1 (9.1.85)", "9.1", "390.46"),
    ("9.0 (9.0.76)", "9.0", "384.81"),
)


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


FIRST, LAST = CUDA_BY_BRANCH[0][0], CUDA_BY_BRANCH[-1][0]


def _drivers_from(minimum: str) -> st.SearchStrategy[str]:
    """Driver versions ``major.minor.patch`` at or above ``minimum``, up to a branch past
    the table's last."""
    low = _key(minimum) + (0,) * (3 - len(_key(minimum)))
    triples = st.tuples(st.integers(low[0], LAST + 20), st.integers(0, 300), st.integers(0, 99))
    return triples.filter(lambda t: t >= low).map(lambda t: f"{t[0]}.{t[1]}.{t[2]:02d}")


pairs = st.sampled_from(TOOLKIT_MINIMUM_DRIVER)


@given(pairs.flatmap(lambda p: st.tuples(st.just(p), _drivers_from(p[2]))))
def test_a_driver_at_or_above_a_toolkits_minimum_supports_that_toolkit(
    case: tuple[tuple[str, str, str], str],
) -> None:
    """For any driver at or above a toolkit's published minimum, the table says a CUDA
    version at least that toolkit's, wherever it says one; it says one for every branch
    from its first to its last."""
    (_release, cuda, _minimum), driver = case
    found = cuda_for_driver(driver)
    branch = int(driver.split(".")[0])
    if FIRST <= branch <= LAST:
        assert found is not None, driver
    if found is not None:
        assert _key(found) >= _key(cuda), (driver, found, cuda)


@given(pairs, st.integers(0, LAST + 20), st.integers(0, 300))
def test_the_table_never_claims_a_toolkit_that_needs_a_newer_branch(
    pair: tuple[str, str, str], branch: int, minor: int
) -> None:
    """A driver whose branch is below a toolkit's minimum driver's branch does not
    support that toolkit: the table gives it a lower CUDA version."""
    _release, cuda, minimum = pair
    found = cuda_for_driver(f"{branch}.{minor}")
    if found is not None and branch < _key(minimum)[0]:
        assert _key(found) < _key(cuda), (branch, found, cuda)


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [
        ("535.261.03", "12.2"),
        ("535", "12.2"),
        ("550", "12.4"),
        ("552.1", "12.4"),
        ("580.95.05", "13.0"),
        ("590.44.01", "13.1"),
        ("591.10", None),  # newer than the table: not guessed
        ("417.99", None),
        ("390.1", None),
        ("x", None),
        ("", None),
        ("5" * 40, None),
    ],
)
def test_cuda_for_driver(driver: str, cuda: str | None) -> None:
    assert cuda_for_driver(driver) == cuda


@given(st.integers(FIRST, LAST), st.integers(FIRST, LAST))
def test_cuda_for_driver_is_monotonic_inside_the_table(a: int, b: int) -> None:
    lo, hi = sorted((a, b))
    ca, cb = cuda_for_driver(f"{lo}.1"), cuda_for_driver(f"{hi}.1")
    assert ca is not None and cb is not None
    assert _key(ca) <= _key(cb)


@given(st.text(max_size=40))
def test_cuda_for_driver_takes_any_text(text: str) -> None:
    found = cuda_for_driver(text)
    assert found is None or found in {c for _b, c in CUDA_BY_BRANCH}


def test_table_is_sorted_by_branch_and_cuda_version() -> None:
    branches = [b for b, _c in CUDA_BY_BRANCH]
    assert branches == sorted(set(branches))
    keys = [_key(c) for _b, c in CUDA_BY_BRANCH]
    assert keys == sorted(set(keys))


def test_doctor_uses_the_same_table() -> None:
    from ocihook.doctor import cuda

    assert cuda.CUDA_BY_BRANCH is CUDA_BY_BRANCH and cuda.cuda_for_driver is cuda_for_driver
    assert set(SOURCE_WORDS) == {"nvml", "elf-note", "driver-branch"}
