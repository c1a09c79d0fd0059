"""The ``"CUDA Version"`` of a ``.note.cuda.fwd_compatibility`` note
(:func:`ocihook.linux.elfscan.parse_cuda_compat_note`) as discovery reads it from the
driver's ``libcuda``: any bytes give a note or ``None``, never an exception, and the start
path's reader does not import :mod:`json`."""

from __future__ import annotations

import json
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO

from ocihook.linux.elfscan import CudaCompatNote, parse_cuda_compat_note
from ocihook.sim.elfwrite import pack_note

OWNER = b"NVIDIA Corporation"


def _note(version: object, order: str = "little") -> bytes:
    desc = json.dumps({"Format": 1, "CUDA Version": version, "Driver": [590]}).encode()
    return pack_note(OWNER, 1, desc, endian=order)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20), st.sampled_from(["little", "big"]))
def test_any_cuda_version_text_gives_its_major_minor_or_none(text: str, endian: str) -> None:
    note = parse_cuda_compat_note(_note(text, endian), "<" if endian == "little" else ">")
    major, dot, minor = text.partition(".")
    wellformed = (
        dot == "."
        and len(text) <= 16
        and major.isascii()
        and major.isdigit()
        and minor.isascii()
        and minor.isdigit()
    )
    if wellformed:
        assert note is not None and note.cuda_version == (int(major), int(minor))
    else:
        assert note is None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 999), st.integers(0, 999), st.binary(max_size=64), st.integers(0, 80))
def test_a_good_note_among_garbage_never_raises(
    major: int, minor: int, noise: bytes, cut: int
) -> None:
    """A note with a version, then bytes appended or cut off: a note with that version,
    or ``None`` — never another value, never an exception."""
    good = _note(f"{major}.{minor}")
    for data in (good + noise, good[: max(0, len(good) - cut)], noise + good):
        result = parse_cuda_compat_note(data)
        assert result is None or (
            isinstance(result, CudaCompatNote) and result.cuda_version == (major, minor)
        )


def test_the_reader_does_not_import_json() -> None:
    """The note is read on the start path of a host not yet in the discovery cache; the
    C scanner (``ocihook.core.jsonfast``) parses it, :mod:`json` (``re``, ``enum``) stays
    out."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {REPO!r})\n"
        "from ocihook.linux.elfscan import parse_cuda_compat_note\n"
        f"n = parse_cuda_compat_note({_note('13.1')!r})\n"
        "print(n.cuda_version, 'json' in sys.modules, 're' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["(13,", "1)", "False", "False"]
