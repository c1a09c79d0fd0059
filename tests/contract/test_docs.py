"""The README and the documentation site say what the code does: the Python example runs
as written and prints what the page says, the troubleshooting commands run, the generated
references match the code, the README stays short and its links resolve."""

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


def _page(name: str) -> str:
    with open(os.path.join(REPO, "docs", name), encoding="utf-8") as f:
        return f.read()


def test_python_example_runs_and_prints_what_the_readme_says(tmp_path: Path) -> None:
    section = _page("guide/python.md")
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

    section = _page("operations/troubleshooting.md")
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


#: The README's limit: what it is, the demo, install, the first GPU container, the modes;
#: everything else is on the documentation site.
README_LIMIT = 10 * 1024


def test_the_readme_is_short_and_its_links_resolve() -> None:
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert len(text.encode()) <= README_LIMIT
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links, "the README links to the documentation"
    missing = [link for link in links if not os.path.exists(os.path.join(REPO, link))]
    assert missing == []


def test_the_generated_references_match_the_code() -> None:
    """docs/reference/{api,cli,exit-codes}.md are what ``ocihook.commands.docref`` makes
    from the code today (``scripts/gen-reference`` rewrites them)."""
    from ocihook.commands import docref

    for name, render in (
        (docref.API_DOCUMENT, docref.render_api_reference),
        (docref.CLI_DOCUMENT, docref.render_cli_reference),
        (docref.EXIT_CODES_DOCUMENT, docref.render_exit_codes),
    ):
        assert _page(name) == render(), f"{name}: run scripts/gen-reference"


def test_every_exit_code_and_public_name_is_in_the_references() -> None:
    import ocihook
    import ocihook.cdi
    from ocihook.core.errors import EXIT_CODES

    codes = _page("reference/exit-codes.md")
    for cls, code in EXIT_CODES.items():
        assert f"| {code} | `{cls.reference}` ({cls.__name__}) |" in codes
    api = _page("reference/api.md")
    for package in (ocihook, ocihook.cdi):
        for name in package.__all__:
            assert re.search(rf"^::: [\w.]+\.{re.escape(name)}$", api, re.M), name


def test_the_toolkit_flags_page_says_what_cdi_generate_takes() -> None:
    """docs/reference/toolkit-flags.md against the parser: every option of its ``nvidia-ctk
    cdi generate`` table is taken by ``ocihook cdi generate`` unless its row says "not
    supported", and then it is not; its hook table gives a part of ocihook's hook for each
    of :data:`~ocihook.cdi.toolkitopts.SPEC_HOOKS`, and its mode table lists every mode."""
    from ocihook.cdi.toolkitopts import GENERATE_MODES, OTHER_TOOLKIT_MODES, SPEC_HOOKS
    from ocihook.commands.fast import COMMANDS

    (options,) = [opts for words, _h, opts in COMMANDS if words == ("cdi", "generate")]
    taken = {name for o in options for name in o.names}
    page = _page("reference/toolkit-flags.md")
    section = page.split("## `nvidia-ctk cdi generate`", 1)[1].split("\n## ", 1)[0]
    table = section.split("### ", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| `--")]
    assert len(rows) >= 15
    for row in rows:
        toolkit, ours = row.split(" | ")[:2]
        names = re.findall(r"`(--[a-z.-]+)", toolkit)
        assert names, row
        supported = ours != "not supported"
        for name in names:
            assert (name in taken) == supported, row
    hook_table = section.split("### Hook names", 1)[1].split("### ", 1)[0]
    hooks = re.findall(r"^\| `([a-z-]+)` \| `--", hook_table, re.M)
    assert sorted(hooks) == sorted(SPEC_HOOKS)
    mode_table = section.split("### Modes", 1)[1]
    rows = re.findall(r"^\| (`[^|]+`) \| ", mode_table, re.M)
    listed = {mode for row in rows for mode in re.findall(r"`([a-z]+)`", row)}
    assert listed == {*GENERATE_MODES, *OTHER_TOOLKIT_MODES}


def test_every_page_is_in_the_site_navigation() -> None:
    """mkdocs only warns about a page left out of ``nav`` (fatal under ``--strict`` in
    scripts/test); this says which page, without building the site."""
    import yaml

    with open(os.path.join(REPO, "mkdocs.yml"), encoding="utf-8") as f:
        config = yaml.safe_load(f)

    def pages(node: Any) -> list[str]:
        if isinstance(node, str):
            return [node]
        if isinstance(node, list):
            return [p for item in node for p in pages(item)]
        if isinstance(node, dict):
            return [p for value in node.values() for p in pages(value)]
        return []

    listed = set(pages(config["nav"]))
    docs = os.path.join(REPO, "docs")
    present = {
        os.path.relpath(os.path.join(d, n), docs)
        for d, _, names in os.walk(docs)
        for n in names
        if n.endswith(".md")
    }
    assert present == listed
