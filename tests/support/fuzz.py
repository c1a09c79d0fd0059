"""The fuzz campaign (tests/fuzz/): :func:`fuzz_settings`, :func:`fuzz_record`,
:func:`time_limit`, :data:`FUZZ_COUNTS`, :data:`FUZZ_CORPUS`, and the input strategies
:func:`fuzz_mutated`, :func:`fuzz_grafted`, :func:`fuzz_json_bytes`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

from hypothesis import strategies as st

from support.paths import TESTS

#: ``OCIHOOK_FUZZ_DEEP=1``: the deep campaign (example counts times
#: ``OCIHOOK_FUZZ_FACTOR``, default 20; seed ``OCIHOOK_FUZZ_SEED`` instead of derandomised).
FUZZ_DEEP = os.environ.get("OCIHOOK_FUZZ_DEEP") == "1"
#: Where each target's kept inputs (crash regressions and seeds) are: ``<target>/<name>``.
FUZZ_CORPUS = os.path.join(TESTS, "fuzz", "corpus")
#: Target -> executions in this session (printed at the end, see conftest.py).
FUZZ_COUNTS: dict[str, int] = {}


def fuzz_settings(examples: int) -> Callable[[Any], Any]:
    """Hypothesis settings for a fuzz target: ``examples`` inputs (the CI budget), no
    deadline (no timed tests; hangs are caught by :func:`time_limit`), no example
    database (a run depends on the seed only), derandomised unless deep."""
    from hypothesis import HealthCheck, seed, settings

    factor = int(os.environ.get("OCIHOOK_FUZZ_FACTOR", "20")) if FUZZ_DEEP else 1
    conf = settings(
        max_examples=examples * factor,
        deadline=None,
        database=None,
        derandomize=not FUZZ_DEEP,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )

    def apply(test: Any) -> Any:
        test = conf(test)
        if FUZZ_DEEP:
            test = seed(int(os.environ.get("OCIHOOK_FUZZ_SEED", "0")))(test)
        return test

    return apply


def fuzz_record(target: str, data: bytes, error: BaseException | None = None) -> None:
    """Count one execution of ``target``; on an ``error`` (a crash or hang) keep the input
    under ``$OCIHOOK_FUZZ_CRASHES/<target>/`` when that is set, for the corpus."""
    FUZZ_COUNTS[target] = FUZZ_COUNTS.get(target, 0) + 1
    where = os.environ.get("OCIHOOK_FUZZ_CRASHES")
    if error is not None and where:
        import hashlib

        folder = os.path.join(where, target)
        os.makedirs(folder, exist_ok=True)
        name = f"{type(error).__name__}-{hashlib.sha256(data).hexdigest()[:16]}"
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)


def _fuzz_mutate(seed: bytes, edits: list[tuple[int, int, int, int]]) -> bytes:
    """Apply byte edits to ``seed``: (kind, position, value, length)."""
    data = bytearray(seed)
    for kind, pos, value, length in edits:
        at = pos % (len(data) + 1)
        if kind == 0 and data:  # set a byte
            data[min(at, len(data) - 1)] = value
        elif kind == 1:  # insert bytes
            data[at:at] = bytes([value]) * length
        elif kind == 2:  # delete a run
            del data[at : at + length]
        elif kind == 3:  # truncate
            del data[at:]
        elif kind == 4 and data:  # duplicate a run (splice the file into itself)
            data[at:at] = data[at : at + length * 8]
        elif kind == 5 and len(data) >= 4:  # an interesting 32-bit value
            word = (0, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, len(seed), value)[length % 6]
            at = min(at, len(data) - 4)
            data[at : at + 4] = word.to_bytes(4, "little" if value & 1 else "big")
    return bytes(data)


_FUZZ_EDITS = st.lists(
    st.tuples(
        st.integers(0, 5),
        st.integers(0, 1 << 20),
        st.integers(0, 255),
        st.integers(1, 64),
    ),
    max_size=8,
)


def fuzz_mutated(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    """A seed with byte edits applied, or random bytes now and then."""
    return st.one_of(
        st.builds(_fuzz_mutate, st.sampled_from(seeds), _FUZZ_EDITS),
        st.binary(max_size=512),
    )


_FUZZ_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40),
    st.sampled_from(
        ["", "all", "none", "void", "0", "-1", "0:0", "a" * 300, "\x00", "\ud800", "../..", "/"]
    ),
)


_FUZZ_JSON = st.recursive(
    _FUZZ_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def _fuzz_paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _fuzz_paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _fuzz_paths(v, (*prefix, i))
    return out


def _fuzz_graft(doc: Any, pick: int, value: Any, drop: bool) -> Any:
    """``doc`` with the value at path number ``pick`` replaced by ``value`` (or, with
    ``drop``, removed)."""
    doc = json.loads(json.dumps(doc))
    paths = _fuzz_paths(doc)
    path = paths[pick % len(paths)]
    if not path:
        return value
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if drop:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


def fuzz_grafted(doc: Any) -> st.SearchStrategy[Any]:
    """``doc`` with one to three random values grafted in."""
    step = st.tuples(st.integers(0, 10**6), _FUZZ_JSON, st.booleans())

    def apply(steps: list[tuple[int, Any, bool]]) -> Any:
        out = doc
        for pick, value, drop in steps:
            out = _fuzz_graft(out, pick, value, drop)
        return out

    return st.lists(step, min_size=1, max_size=3).map(apply)


def fuzz_json_bytes(doc: Any) -> st.SearchStrategy[bytes]:
    """Grafted documents as JSON (unicode escapes and non-ASCII kept), and byte mutations of
    the valid document."""

    def enc(d: Any, ascii_: bool) -> bytes:
        return json.dumps(d, ensure_ascii=ascii_).encode("utf-8", "surrogatepass")

    return st.one_of(
        st.builds(enc, fuzz_grafted(doc), st.booleans()),
        fuzz_mutated([json.dumps(doc).encode()]),
    )


class Hang(Exception):
    """An input took longer than :func:`time_limit` allows."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`Hang` in the body when it runs longer than ``seconds`` (SIGALRM; the
    main thread only)."""

    def expired(signum: int, frame: Any) -> None:
        raise Hang(f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
