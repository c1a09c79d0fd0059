"""Where the suite's files are and what the host offers: :data:`REPO`, :data:`TESTS`,
:data:`DOUBLES`, :data:`WRAPPER` (the ``ocihook-runtime`` console script),
:func:`realistic_dir` (the realistic host tree), :func:`need_root_and` (skip unless root
with the named tools)."""

from __future__ import annotations

import os
import shutil
import sys

import pytest

#: The tests directory (the parent of this package).
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The repository's root directory.
REPO = os.path.dirname(TESTS)
#: Stand-ins for third-party modules (a ``pynvml`` double).
DOUBLES = os.path.join(TESTS, "doubles")


def realistic_dir() -> str:
    """Where fixtures/realistic/build.py puts the realistic 535.261.03 host tree."""
    cache = os.environ.get("OCIHOOK_CACHE") or os.path.expanduser("~/.cache/ocihook")
    return os.path.join(cache, "realistic-535.261.03", "root")


def need_root_and(*tools: str) -> None:
    """Skip unless root and every tool is installed; the reason is printed by -ra."""
    if os.geteuid() != 0:
        pytest.skip("end-to-end test needs root")
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"end-to-end test needs {tool} (apt-get install {tool})")


#: The ``ocihook-runtime`` console script of this environment.
WRAPPER = os.path.join(os.path.dirname(sys.executable), "ocihook-runtime")
