"""``ocihook.config.reference``: ``docs/reference/configuration.md`` is what the schema generates, and
documents every key in the loader's order."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from support import REPO

from ocihook.config.reference import DOCUMENT, main, render_reference, toml_value, type_text
from ocihook.config.validate import KEYS

with open(os.path.join(REPO, "specs", "config.schema.json")) as _f:
    SCHEMA: dict[str, Any] = json.load(_f)


def test_the_committed_reference_is_generated_from_the_schema() -> None:
    with open(os.path.join(REPO, DOCUMENT), encoding="utf-8") as f:
        committed = f.read()
    assert committed == render_reference(SCHEMA), "run scripts/gen-reference"


def test_the_reference_documents_every_key_in_order() -> None:
    text = render_reference(SCHEMA)
    sections = [line[4:-1] for line in text.splitlines() if line.startswith("## `")]
    assert sections == list(KEYS)
    for key, prop in SCHEMA["properties"].items():
        section = text.split(f"## `{key}`\n", 1)[1].split("\n## ", 1)[0]
        assert prop["description"] in section
        assert f"- Default: `{key} = {toml_value(prop['default'])}`" in section
        if prop.get("$comment", "").startswith("toolkit: "):
            assert prop["$comment"].removeprefix("toolkit: ") in section


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("driver-root", "absolute path"),
        ("ldconfig", "string"),
        ("library-path", "array of absolute path"),
        ("no-cgroups", "boolean"),
        ("mode", 'one of "auto", "legacy", "cdi"'),
        ("log-file", '"" or absolute path'),
        ("runtimes", "array of string (at least 1)"),
    ],
)
def test_types_in_words(key: str, words: str) -> None:
    assert type_text(SCHEMA["properties"][key], SCHEMA["$defs"]) == words


@pytest.mark.parametrize(
    ("value", "text"),
    [("/", '"/"'), (False, "false"), ([], "[]"), (["a", 'b"'], '["a", "b\\""]'), (3, "3")],
)
def test_defaults_as_toml(value: object, text: str) -> None:
    assert toml_value(value) == text


def test_toml_value_refuses_tables() -> None:
    with pytest.raises(TypeError):
        toml_value({"a": 1})


def test_the_script_writes_and_checks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "configuration.md"
    assert main(["--check", str(out)]) == 1  # missing
    assert "out of date" in capsys.readouterr().err
    assert main([str(out)]) == 0
    assert out.read_text() == render_reference(SCHEMA)
    assert main(["--check", str(out)]) == 0
    out.write_text(out.read_text() + "edited\n")
    assert main(["--check", str(out)]) == 1
