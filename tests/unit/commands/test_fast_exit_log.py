"""Decision logging for containers that take the hook's no-GPU fast exit.

The fast exit (``ocihook.commands.voidexit.void_hook_exit``) decides without parsing JSON or TOML.
With ``log-level = "debug"`` and a ``log-file`` it leaves one line saying why the container
got no GPU; with logging off it opens nothing beyond ``config.json`` and the configuration
file. Which files the hook opens is observed with an audit hook (PEP 578 ``open`` events)
in a fresh interpreter running the registered hook command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import make_bundle, need_root_and, packaged_hook

from ocihook.config.scan import scan_debug_log_file
from ocihook.config.validate import config_from_dict

# --- the byte scan ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (None, ""),
        (b"", ""),
        (b'no-cgroups = true\nlog-level = "debug"\n', ""),  # no log file
        (b'log-file = "/var/log/o.log"\n', ""),  # level info by default
        (b'log-file = "/var/log/o.log"\nlog-level = "info"\n', ""),
        (b'log-file = "/var/log/o.log"\nlog-level = "debug"\n', "/var/log/o.log"),
        (b"log-level='debug'   # chatty\n  log-file = '/l/debug.log'\n", "/l/debug.log"),
        (b'# log-file = "/x"\nlog-level = "debug"\n', ""),  # a comment sets nothing
        (b'log-file = ""\nlog-level = "debug"\n', ""),
        (b'library-path = ["/opt/debug"]\nlog-file = "/l"\n', ""),
        # too unusual to tell: the caller parses
        (b'log-file = "/l"\nlog-level = "de\\u0062ug"\n', None),
        (b'log-file = """/l"""\nlog-level = "debug"\n', None),
        (b'"log-level" = "debug"\nlog-file = "/l"\n', None),
        (b'log-level = "debug"\nlog-file = "/l"\nlog-file = "/m"\n', None),
        (b'log-level = "debug"\nlog-file = "relative.log"\n', None),
        (b'log-level = "debug"\nlog-file = "/l" trailing\n', None),
        (b'log-level = "debug"\n[nvidia-container-cli]\nlog-file = "/l"\n', None),
        (b'log-level = "debug"\nlibrary-path = ["/log-file"]\n', None),
    ],
)
def test_scan(text: bytes | None, want: str | None) -> None:
    assert scan_debug_log_file(text) == want


LINES = [
    'log-file = "/var/log/ocihook.core.log"',
    "log-file = '/l/debug.log'",
    'log-file = ""',
    'log-file = "rel.log"',
    'log-level = "debug"',
    "log-level = 'debug' # on",
    'log-level = "info"',
    'log-level = "warning"',
    '# log-level = "debug"',
    '"log-level" = "debug"',
    "no-cgroups = true",
    'library-path = ["/opt/debug", "/opt/log-file"]',
    'swarm-resource = "DOCKER_RESOURCE_GPU"',
    'log-file = """/x"""',
    "",
    "[section]",
    'default-kind = "debug.example.com/gpu"',
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(LINES), max_size=7))
def test_scan_agrees_with_the_loader(lines: list[str]) -> None:
    """Whenever the scan decides, it decides what parsing the file would."""
    text = "\n".join(lines) + "\n"
    got = scan_debug_log_file(text.encode())
    try:
        cfg = config_from_dict(tomllib.loads(text))
    except Exception:
        return  # invalid file: the full command reports it
    want = cfg.log_file if cfg.log_level == "debug" else ""
    assert got is None or got == want


# --- the hook command ---------------------------------------------------------------------

#: Runs the packaged hook command line in-process under an audit hook, then prints the
#: non-code files it opened and whether tomllib was imported (a one-shot parse drops it
#: from sys.modules again: the audit hook's import events tell).
PROBE = """
import json, sys
opened = []
imported = []
def audit(event, args):
    if event == "open" and isinstance(args[0], str):
        opened.append(args[0])
    elif event == "import":
        imported.append(args[0])
sys.addaudithook(audit)
from ocihook._main import main
rc = main(sys.argv[1:])
files = [p for p in opened if not p.endswith((".py", ".pyc")) and "__pycache__" not in p]
print(json.dumps({"rc": rc, "opened": files, "tomllib": "tomllib" in imported}))
"""


def _hook(bundle: str, conf: str, stage: str = "prestart") -> dict[str, Any]:
    state = {"ociVersion": "1.0.2", "id": "box-7", "status": "creating", "pid": 1, "bundle": bundle}
    proc = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, "hook", stage, "--config", conf],
        input=json.dumps(state).encode(),
        capture_output=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        timeout=60,
        check=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _conf(tmp_path: Any, text: str) -> str:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return str(p)


def test_fast_exit_logs_why_at_debug(tmp_path: Any) -> None:
    log = tmp_path / "ocihook.core.log"
    bundle = str(make_bundle(tmp_path, ["HOME=/root"], indent=None))
    conf = _conf(tmp_path, f'log-file = "{log}"\nlog-level = "debug"\n')
    out = _hook(bundle, conf, "createRuntime")
    assert out["rc"] == 0
    assert not out["tomllib"]  # decided from the bytes
    assert out["opened"] == [f"{bundle}/config.json", conf, str(log)]
    (line,) = log.read_text().splitlines()
    assert " debug " in line and "container=box-7 nothing requested stage=createRuntime" in line
    assert "reason=" in line and "NVIDIA_VISIBLE_DEVICES unset" in line
    assert f"bundle={bundle}" in line


def test_fast_exit_parses_an_unusual_file(tmp_path: Any) -> None:
    """A file the byte scan cannot read (a quoted key) is parsed, and still logs."""
    log = tmp_path / "ocihook.core.log"
    bundle = str(make_bundle(tmp_path, ["HOME=/root"], indent=None))
    conf = _conf(tmp_path, f'"log-file" = "{log}"\nlog-level = "debug"\n')
    out = _hook(bundle, conf)
    assert out["rc"] == 0 and out["tomllib"]
    assert "nothing requested stage=prestart" in log.read_text()


@pytest.mark.parametrize(
    "text",
    [
        "no-cgroups = false\n",
        'log-file = "{log}"\n',  # info
        'log-file = "{log}"\nlog-level = "warning"\n',
        'log-level = "debug"\n',  # no file
    ],
)
def test_fast_exit_with_logging_off_opens_nothing_more(tmp_path: Any, text: str) -> None:
    log = tmp_path / "ocihook.core.log"
    bundle = str(make_bundle(tmp_path, ["HOME=/root"], indent=None))
    conf = _conf(tmp_path, text.format(log=log))
    out = _hook(bundle, conf)
    assert out == {"rc": 0, "opened": [f"{bundle}/config.json", conf], "tomllib": False}
    assert not log.exists()


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        (["NVIDIA_VISIBLE_DEVICES=void"], 'reason="NVIDIA_VISIBLE_DEVICES=void"'),
        (["NVIDIA_VISIBLE_DEVICES="], 'reason="NVIDIA_VISIBLE_DEVICES empty"'),
        (["NVIDIA_DRIVER_CAPABILITIES=all"], 'reason="NVIDIA_VISIBLE_DEVICES unset"'),
    ],
)
def test_full_path_void_logs_why(tmp_path: Any, env: list[str], reason: str) -> None:
    """Containers that mention a request variable take the full path; a void request is
    logged with its reason there."""
    log = tmp_path / "ocihook.core.log"
    bundle = str(make_bundle(tmp_path, env, indent=None))
    conf = _conf(tmp_path, f'log-file = "{log}"\nlog-level = "debug"\n')
    out = _hook(bundle, conf)
    assert out["rc"] == 0
    text = log.read_text()
    assert f"container=box-7 bundle={bundle} nothing requested stage=prestart" in text
    assert reason in text


def test_unprivileged_policy_reason(tmp_path: Any) -> None:
    log = tmp_path / "ocihook.core.log"
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=all"], indent=None))
    with open(os.path.join(bundle, "config.json")) as f:
        doc = json.load(f)
    for kind in ("bounding", "effective", "permitted"):
        caps = doc["process"].get("capabilities", {}).get(kind, [])
        doc["process"].setdefault("capabilities", {})[kind] = [
            c for c in caps if c != "CAP_SYS_ADMIN"
        ]
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(doc, f)
    conf = _conf(
        tmp_path,
        f'log-file = "{log}"\nlog-level = "debug"\n'
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n",
    )
    assert _hook(bundle, conf)["rc"] == 0
    assert "unprivileged container" in log.read_text()


def test_runc_no_gpu_container_leaves_a_line(tmp_path: Any, bundle_factory: Any) -> None:
    """A real no-GPU container start under runc with the packaged prestart hook and a
    debug configuration: the log says why it got no GPU."""
    need_root_and("runc")
    from ocihook.sim.demo import run_container

    log = tmp_path / "ocihook.core.log"
    conf = _conf(tmp_path, f'log-file = "{log}"\nlog-level = "debug"\n')
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["HOME=/root"])
    path = os.path.join(bundle, "config.json")
    with open(path) as f:
        doc = json.load(f)
    hook = packaged_hook("prestart", "/")
    hook["args"] = [*hook["args"][:-4], "--config", conf]
    doc.setdefault("hooks", {})["prestart"] = [hook]
    with open(path, "w") as f:
        json.dump(doc, f)
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and "nothing requested stage=prestart" in lines[0]
    assert "NVIDIA_VISIBLE_DEVICES unset" in lines[0]
