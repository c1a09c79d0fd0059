"""``ocihook cdi validate`` checks each file against the packaged CDI JSON Schema too:
one line per violation naming the file, the JSON path and jsonschema's message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support import run_cli

from ocihook.sim import host as simhost


def ocihook(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd)


def test_generated_specs_pass_both_checks(tmp_path: Path, sim: simhost.SimulatedHost) -> None:
    """The specs ``cdi generate`` writes for the simulated host, JSON and YAML."""
    roots = ("--driver-root", sim.root, "--dev-root", sim.root)
    for name in ("nvidia.json", "nvidia.yaml"):
        gen = ocihook("cdi", "generate", *roots, "--output", name, cwd=tmp_path)
        assert gen.returncode == 0, gen.stderr
    out = ocihook("cdi", "validate", "nvidia.json", "nvidia.yaml", cwd=tmp_path)
    assert (out.returncode, out.stderr) == (0, "")
    devices = len(sim.gpus) * 2 + 3  # by index and UUID, and "all" (and two MIG devices)
    assert out.stdout.splitlines() == [
        f"nvidia.json: ok: kind nvidia.com/gpu, {devices} devices, cdiVersion 0.5.0 (minimum 0.5.0)",
        f"nvidia.yaml: ok: kind nvidia.com/gpu, {devices} devices, cdiVersion 0.5.0 (minimum 0.5.0)",
    ]


YAML_BAD = """\
cdiVersion: "0.6.0"
kind: vendor.com/gpu
annotations:
  "not a key": "v"
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/vgpu0
      permissions: rwx
containerEdits:
  mounts:
  - containerPath: /data
  env: [3]
"""


def test_every_schema_violation_is_one_line(tmp_path: Path) -> None:
    """A YAML file with four problems: the loader's first error, then each schema
    violation in path order, each naming the file; exit 11; no ok line."""
    (tmp_path / "bad.yaml").write_text(YAML_BAD)
    out = ocihook("cdi", "validate", "bad.yaml", cwd=tmp_path)
    assert out.returncode == 11 and out.stdout == ""
    lines = out.stderr.splitlines()
    assert lines[0].startswith("bad.yaml: invalid: ") and "schema" not in lines[0]
    schema_lines = [line for line in lines if line.startswith("bad.yaml: invalid: schema: ")]
    paths = [line.split(": ")[3] for line in schema_lines]
    assert paths == [
        "$.annotations",
        "$.containerEdits.env[0]",
        "$.containerEdits.mounts[0]",
        "$.devices[0].containerEdits.deviceNodes[0].permissions",
    ]
    assert (
        "bad.yaml: invalid: schema: $.containerEdits.mounts[0]: 'hostPath' is a required property"
        in schema_lines
    )
    assert "bad.yaml: invalid: schema: $.containerEdits.env[0]: 3 is not of type 'string'" in (
        schema_lines
    )
    assert lines[-1] == "ocihook: error[bad-cdi-spec]: 1 of 1 CDI spec files invalid"
    assert len(lines) == 1 + len(schema_lines) + 1


def test_an_unparsable_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"cdiVersion": "0.5.0", "cdiVersion": "0.6.0"}')
    out = ocihook("cdi", "validate", "x.json", cwd=tmp_path)
    assert out.returncode == 11
    assert out.stderr.splitlines()[0] == (
        "x.json: invalid: duplicate field (file x.json, value 'cdiVersion')"
    )
    assert "schema" not in out.stderr


def test_only_the_schema_objects(tmp_path: Path) -> None:
    """Where the loader accepts what the schema refuses (a spec made to differ here: a
    schema whose kind must be example.com/...), the file is invalid all the same."""
    import ocihook.schemas as schemas

    good = {
        "cdiVersion": "0.5.0",
        "kind": "vendor.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/x"}]}}],
    }
    (tmp_path / "good.json").write_text(json.dumps(good))
    schema = schemas.load_schema("cdi")
    schema["properties"]["kind"]["pattern"] = "^example\\.com/"
    code = (
        "import sys, ocihook.schemas as s; from ocihook.commands.cli import cli_main\n"
        f"s.load_schema = lambda name: {schema!r}\n"
        "sys.exit(cli_main(['cdi', 'validate', 'good.json']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 11 and out.stdout == ""
    assert out.stderr.splitlines()[0] == (
        "good.json: invalid: schema: $.kind: 'vendor.com/gpu' does not match '^example\\\\.com/'"
    )
