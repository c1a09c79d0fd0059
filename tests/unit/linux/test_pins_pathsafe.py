"""Pins of the in-root lookup's link budget in both resolvers: the kernel's ``openat2``
(``RESOLVE_IN_ROOT``) and the user-space walk used where it is missing (``ENOSYS``, forced
here) follow 40 links (``MAXSYMLINKS``) and refuse the 41st with ``ELOOP`` — on the way and
at the last component, absolute and relative links alike."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocihook.core.errors import ApplyError
from ocihook.linux import pathsafe
from ocihook.linux import syscalls as _linux


def _openat2_works() -> bool:
    try:
        os.close(_linux.openat2(_linux.AT_FDCWD, ".", os.O_PATH | os.O_CLOEXEC))
    except OSError as err:
        if err.errno == errno.ENOSYS:
            return False
        raise
    return True


@pytest.fixture(params=["openat2", "fallback"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "openat2" and not _openat2_works():
        pytest.skip("this kernel has no openat2")
    monkeypatch.setattr(pathsafe, "_openat2_missing", False)
    if request.param == "fallback":

        def no_openat2(*_args: object) -> int:
            raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

        monkeypatch.setattr(_linux, "openat2", no_openat2)
    yield request.param


@pytest.fixture
def chain(tmp_path: Path) -> Path:
    """``a<i>`` -> ``/a<i-1>`` (absolute) and ``r<i>`` -> ``r<i-1>`` (relative), 41 deep,
    ending in the directory ``end`` holding ``file``."""
    root = tmp_path / "root"
    (root / "end").mkdir(parents=True)
    (root / "end/file").write_text("x")
    (root / "a0").symlink_to("/end")
    (root / "r0").symlink_to("end")
    for i in range(1, 41):
        (root / f"a{i}").symlink_to(f"/a{i - 1}")
        (root / f"r{i}").symlink_to(f"r{i - 1}")
    return root


def _open(root: Path, path: str, flags: int) -> int:
    fd = pathsafe.open_root(str(root))
    try:
        return pathsafe.open_in_root(fd, path, flags)
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["a", "r"])
@pytest.mark.parametrize("flags", [os.O_PATH, os.O_RDONLY | os.O_DIRECTORY])
def test_forty_links_at_the_end_and_not_forty_one(
    chain: Path, mode: str, kind: str, flags: int
) -> None:
    os.close(_open(chain, f"{kind}39", flags))  # 40 links
    with pytest.raises(ApplyError) as err:
        _open(chain, f"{kind}40", flags)  # 41
    assert isinstance(err.value.__cause__, OSError)
    assert err.value.__cause__.errno == errno.ELOOP


@pytest.mark.parametrize("kind", ["a", "r"])
def test_forty_links_on_the_way_and_not_forty_one(chain: Path, mode: str, kind: str) -> None:
    fd = _open(chain, f"{kind}39/file", os.O_RDONLY)
    try:
        assert os.read(fd, 4) == b"x"
    finally:
        os.close(fd)
    with pytest.raises(ApplyError) as err:
        _open(chain, f"{kind}40/file", os.O_RDONLY)
    assert isinstance(err.value.__cause__, OSError)
    assert err.value.__cause__.errno == errno.ELOOP
