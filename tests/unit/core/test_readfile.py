"""Bounded reads: a FIFO, a device, a directory and an oversized file are refused without
blocking or reading them; a pipe is read up to one byte past the limit."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.readfile import (
    MAX_JSON_BYTES,
    FileTooLarge,
    NotRegularFile,
    read_regular,
    read_stream,
)


def test_limit_is_16_mib() -> None:
    assert MAX_JSON_BYTES == 16 * 1024 * 1024


@given(data=st.binary(max_size=3000), limit=st.integers(min_value=0, max_value=3000))
def test_regular_file_read_or_refused_by_size(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, limit: int
) -> None:
    path = tmp_path_factory.mktemp("r") / "f"
    path.write_bytes(data)
    if len(data) <= limit:
        assert read_regular(str(path), limit) == data
    else:
        with pytest.raises(FileTooLarge) as err:
            read_regular(str(path), limit)
        assert err.value.errno == errno.EFBIG
        assert f"larger than {limit} bytes" in str(err.value.strerror)


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    done: list[BaseException] = []

    def read() -> None:
        try:
            read_regular(str(fifo))
        except BaseException as e:
            done.append(e)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "read_regular blocked on a FIFO"
    assert isinstance(done[0], NotRegularFile)
    assert done[0].strerror == "not a regular file (a FIFO)"


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda d: str(d), "a directory"),
        (lambda d: "/dev/zero", "a device"),
        (lambda d: "/dev/null", "a device"),
    ],
)
def test_special_files_refused(tmp_path: Path, make: object, kind: str) -> None:
    with pytest.raises(NotRegularFile) as err:
        read_regular(make(tmp_path))  # type: ignore[operator]
    assert err.value.strerror == f"not a regular file ({kind})"


def test_link_to_dev_zero_refused(tmp_path: Path) -> None:
    """config.json linked to /dev/zero: the wrapper and the hook once read it without end."""
    link = tmp_path / "config.json"
    link.symlink_to("/dev/zero")
    with pytest.raises(NotRegularFile):
        read_regular(str(link))


def test_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_regular(str(tmp_path / "absent"))


def test_file_exactly_at_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 4097)
    assert read_regular(str(path), 4097) == b"x" * 4097
    with pytest.raises(FileTooLarge):
        read_regular(str(path), 4096)


@given(data=st.binary(max_size=200_000), limit=st.integers(min_value=0, max_value=150_000))
def test_stream_stops_one_byte_past_limit(data: bytes, limit: int) -> None:
    r, w = os.pipe()

    def write() -> None:
        try:
            os.write(w, data) if data else None
        except BrokenPipeError:
            pass
        finally:
            os.close(w)

    t = threading.Thread(target=write, daemon=True)
    t.start()
    try:
        got = read_stream(r, limit)
    finally:
        os.close(r)
        t.join(10)
    assert got == data[: limit + 1]


@given(
    data=st.binary(max_size=300),
    needles=st.lists(st.binary(min_size=1, max_size=6), min_size=1, max_size=3),
    chunk=st.integers(min_value=1, max_value=17),
)
def test_contains_any_across_chunk_boundaries(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, needles: list[bytes], chunk: int
) -> None:
    """Read in pieces of any size, a needle split across two pieces is still found."""
    from ocihook.core.readfile import contains_any

    path = tmp_path_factory.mktemp("c") / "f"
    path.write_bytes(data)
    assert contains_any(str(path), tuple(needles), chunk) == any(n in data for n in needles)


def test_contains_any_refuses_special_files(tmp_path: Path) -> None:
    from ocihook.core.readfile import contains_any

    with pytest.raises(NotRegularFile):
        contains_any("/dev/zero", (b"x",))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile):
        contains_any(str(fifo), (b"x",))
