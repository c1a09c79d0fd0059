"""The README's Python example runs as written and prints what the README says."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO


def _section(title: str) -> str:
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_python_example_runs_and_prints_what_the_readme_says() -> None:
    section = _section("Use ocihook from Python")
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    out = subprocess.run(
        [sys.executable, "-c", code.group(1)], capture_output=True, text=True, check=True
    ).stdout
    promised = re.findall(r"prints `([^`]*)` and `([^`]*)`", section)
    assert promised, section
    assert out.splitlines() == list(promised[0])
