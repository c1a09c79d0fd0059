"""The README's Python example runs as written and prints what the README says."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import REPO


def _section(title: str) -> str:
    with open(os.path.join(REPO, "README.md")) as f:
        text = f.read()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def test_python_example_runs_and_prints_what_the_readme_says(tmp_path: Path) -> None:
    section = _section("Use ocihook from Python")
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TMPDIR": str(tmp)},
    ).stdout
    assert list(tmp.iterdir()) == []  # the example cleans up after itself
    promised = re.findall(r"prints `([^`]*)` and `([^`]*)`", section)
    assert promised, section
    assert out.splitlines() == list(promised[0])


ROOT_COMMANDS = ("info", "list", "plan", "edit", "cdi generate")


def test_troubleshooting_commands_run(sim: Any, tmp_path: Path) -> None:
    """Every command of the Troubleshooting block runs (exit 0) on the simulated host and
    a bundle asking for GPU 3, and changes nothing in the bundle."""
    from ocihook.sim.demo import default_config

    section = _section("Troubleshooting")
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    config = json.dumps(default_config(["sh"], ["NVIDIA_VISIBLE_DEVICES=3"]))
    (bundle / "config.json").write_text(config)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'cdi-spec-dirs = ["{tmp_path}"]\n')
    lines = [ln.split("#", 1)[0].strip() for ln in block.group(1).splitlines()]
    assert len(lines) == 8
    outputs = {}
    for line in lines:
        argv = shlex.split(line.replace("BUNDLE", str(bundle)))
        assert argv[0] == "ocihook"
        words = " ".join(a for a in argv[1:3] if not a.startswith("-"))
        if any(words.startswith(c) for c in ROOT_COMMANDS):
            argv += ["--driver-root", sim.root, "--dev-root", sim.root]
        if argv[1] in ("config", "edit", "plan") or argv[1:3] == ["cdi", "generate"]:
            argv += ["--config", str(cfg)]
        if argv[1:3] == ["cdi", "list"]:
            argv += ["--spec-dir", str(tmp_path)]
        r = subprocess.run(
            [sys.executable, "-m", "ocihook", *argv[1:]], capture_output=True, text=True
        )
        assert r.returncode == 0, (line, r.stderr)
        outputs[line] = r.stdout
    assert (bundle / "config.json").read_text() == config
    gpu3 = next(g for g in sim.gpus if g.index == 3)
    listed = json.loads(outputs["ocihook list --device 3 --json"])
    assert f"{sim.root}/dev/nvidia{gpu3.minor}" in listed["devices"]
    plan = json.loads(outputs["ocihook plan -b BUNDLE"])
    assert [g["uuid"] for g in plan["gpus"]] == [gpu3.uuid]
    assert f"/dev/nvidia{gpu3.minor}" in outputs["ocihook edit --dry-run --diff -b BUNDLE"]
    assert json.loads(outputs["ocihook cdi generate --format json"])["kind"] == "nvidia.com/gpu"
