"""Messages that used to mislead: an unknown option of a fast command is reported with
that command's own usage line; ``--warm-cache`` not as root says it cached nothing; the
in-root permission hint names no hook when ``edit`` is what ran; podman's hooks.d
directory given before it exists is made as a directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support import run_cli, run_cli_process

from ocihook.linux import pathsafe


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["edit", "--bogus"], "usage: ocihook edit [-h] [-b BUNDLE]"),
        (["cdi", "generate", "--bogus", "x"], "usage: ocihook cdi generate [-h]"),
        (["hook", "prestart", "--nope"], "usage: ocihook hook prestart [-h]"),
    ],
)
def test_an_unknown_option_shows_that_commands_usage(argv: list[str], usage: str) -> None:
    r = run_cli_process(*argv)
    assert r.returncode == 2
    assert r.stderr.startswith(usage), r.stderr
    command = " ".join(argv[:2] if argv[0] != "edit" else argv[:1])
    extra = " ".join(a for a in argv if a.startswith("--") or a == "x")
    assert r.stderr.rstrip().endswith(f"ocihook {command}: error: unrecognized arguments: {extra}")
    assert "{edit,hook,cdi}" not in r.stderr


def test_warm_cache_not_as_root_says_nothing_was_cached(sim: Any, tmp_path: Path) -> None:
    """A user other than root with no store of their own (no ``/run/user/<uid>``; a uid
    no session has): ``--warm-cache`` says it cached nothing, and the spec is written."""
    out = tmp_path / "spec.json"
    assert not os.path.exists("/run/user/4242424")
    code = (
        "import os, sys; os.geteuid = lambda: 4242424; from ocihook._main import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    import subprocess
    import sys

    r = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "cdi",
            "generate",
            "--warm-cache",
            "--output",
            str(out),
            "--driver-root",
            sim.root,
            "--dev-root",
            sim.root,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    assert "--warm-cache: not root and no store of this user's own" in r.stderr
    assert "so nothing was cached" in r.stderr
    assert out.exists()


@pytest.mark.parametrize("err", [13, 1])  # EACCES, EPERM
def test_the_in_root_permission_hints_name_no_hook(err: int) -> None:
    hint = pathsafe._HINTS[err]  # the hint of an in-root failure, for edit and hook alike
    assert "hook must" not in hint and "root" in hint


def test_a_missing_hooks_d_directory_is_made_as_one(tmp_path: Path) -> None:
    where = tmp_path / "etc" / "containers" / "oci" / "hooks.d"
    r = run_cli("runtime", "configure", "--runtime", "podman", "--config", str(where))
    assert r.returncode == 0, r.stderr
    assert where.is_dir()
    assert sorted(os.listdir(where)) == ["ocihook-poststop.json", "ocihook-prestart.json"]
    named = tmp_path / "mine.json"
    r = run_cli("runtime", "configure", "--runtime", "podman", "--config", str(named))
    assert r.returncode == 0 and named.is_file() and (tmp_path / "mine-poststop.json").is_file()
