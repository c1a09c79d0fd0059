"""Hook mode's undo list and ``TARGET::LINK`` arguments (ocihook.appliers.live.undo, .hooks):
undo actions run last first, past the failures the runtime's teardown makes harmless
(``OSError``, :class:`OcihookError`), and nothing else is swallowed."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ocihook.appliers.live.hooks import create_symlinks_hook
from ocihook.appliers.live.undo import partial, run_undo
from ocihook.core.errors import ApplyError, OcihookError
from ocihook.oci.bundle import Bundle


def test_undo_runs_last_first_past_expected_failures() -> None:
    done: list[str] = []

    def fail(error: Exception) -> None:
        done.append(type(error).__name__)
        raise error

    undo: list[Callable[[], object]] = [
        partial(done.append, "first"),
        partial(fail, OSError(5, "EIO")),
        partial(fail, ApplyError("cannot remove a link")),
        partial(done.append, "last"),
    ]
    run_undo(undo)
    assert done == ["last", "ApplyError", "OSError", "first"]
    assert undo == []
    assert issubclass(ApplyError, OcihookError)


def test_undo_does_not_swallow_a_bug() -> None:
    undo: list[Callable[[], object]] = [partial(int, "x")]
    with pytest.raises(ValueError):
        run_undo(undo)


@pytest.mark.parametrize("spec", ["libcuda.so.1::usr/lib/libcuda.so", "::/usr/lib/x", "t:/x", "t"])
def test_malformed_link_is_refused_before_anything(tmp_path: object, spec: str) -> None:
    """A link must be ``TARGET::LINK`` with an absolute ``LINK``: refused naming the
    argument, before the rootfs is looked at (it does not even exist here)."""
    bundle = Bundle("/nonexistent", "/nonexistent/config.json", b"{}", {}, "/nonexistent/rootfs")
    with pytest.raises(ApplyError) as err:
        create_symlinks_hook(bundle, ["libc.so.6::/usr/lib/libc.so", spec])
    assert (err.value.field, err.value.value) == ("--link", spec)
