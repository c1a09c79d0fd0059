"""Shell completion for every command, the fast ones (``edit``, ``hook``, ``cdi
generate``) included: their options, the values of options with choices, files for other
values, and the hook's stages, from the same table their parser is built from."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ocihook.commands import fast


def complete(words: str, cword: int) -> list[str]:
    """What ``ocihook``'s bash completion offers for ``words`` (word ``cword`` being
    completed), as click's ``bash_complete`` protocol prints it: ``type,value`` lines."""
    env = {
        **os.environ,
        "COMP_WORDS": words,
        "COMP_CWORD": str(cword),
        "_OCIHOOK_COMPLETE": "bash_complete",
    }
    r = subprocess.run(
        [sys.executable, "-m", "ocihook"], env=env, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.splitlines()


def test_the_bash_script_is_printed() -> None:
    env = {**os.environ, "_OCIHOOK_COMPLETE": "bash_source"}
    r = subprocess.run(
        [sys.executable, "-m", "ocihook"], env=env, capture_output=True, text=True, check=False
    )
    assert r.returncode == 0 and "_ocihook_completion()" in r.stdout


@pytest.mark.parametrize(
    ("words", "cword", "offered"),
    [
        ("ocihook ed", 1, ["plain,edit"]),
        ("ocihook edit --dr", 2, ["plain,--dry-run", "plain,--driver-root"]),
        ("ocihook edit -b ", 3, ["file,"]),
        ("ocihook hook poststo", 2, ["plain,poststop"]),
        ("ocihook hook prestart --no", 3, ["plain,--no-cgroups"]),
        ("ocihook cdi generate --format ", 4, ["plain,json", "plain,yaml"]),
        ("ocihook cdi generate --gpu-backend p", 4, ["plain,procfs"]),
        ("ocihook runtime configure --nvidia-runtime-n", 3, ["plain,--nvidia-runtime-name"]),
    ],
)
def test_completion_offers(words: str, cword: int, offered: list[str]) -> None:
    assert complete(words, cword) == offered


def test_every_hook_stage_is_offered() -> None:
    stages = [w[1] for w, _, _ in fast.COMMANDS if w[0] == "hook"]
    assert len(stages) >= 6
    assert complete("ocihook hook ", 2) == [f"plain,{s}" for s in stages]


def test_every_option_of_every_fast_command_is_offered() -> None:
    for words, _, options in fast.COMMANDS:
        line = " ".join(["ocihook", *words, "-"])
        offered = set(complete(line, len(words) + 1))
        for option in options:
            for name in option.names:
                assert f"plain,{name}" in offered, (words, name)
