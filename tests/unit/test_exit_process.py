"""The start-path programs end without the interpreter's finalization
(:func:`ocihook.core.stdio.exit_process`): what they printed is flushed and the exit status
kept, objects are not torn down; a process whose finalization has work to do (a thread, an
``atexit`` callback, a stream that cannot be flushed) exits as the interpreter does.
:func:`ocihook._main.run` takes that exit for ``ocihook hook ...`` only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import make_bundle

#: An object whose finalizer writes ``finalized`` to stdout's descriptor: it runs when the
#: interpreter tears the module down, never after ``os._exit``.
_FINALIZED = (
    "import os, sys\n"
    "class Noisy:\n"
    "    def __del__(self):\n"
    "        os.write(1, b' finalized')\n"
    "noisy = Noisy()\n"
)


def _python(code: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-I", "-c", code, *args],
        input=stdin,
        capture_output=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("code", [0, 3, 7, 255])
def test_exit_process_flushes_and_skips_finalization(code: int) -> None:
    """Buffered stdout (a pipe) and stderr reach the reader, the status is ``code``, and
    no finalizer runs."""
    program = (
        _FINALIZED + "from ocihook.core.stdio import exit_process\n"
        "print('out', end='')\n"
        "print('err', end='', file=sys.stderr)\n"
        f"exit_process({code})\n"
    )
    r = _python(program)
    assert (r.returncode, r.stdout, r.stderr) == (code, b"out", b"err")


@pytest.mark.parametrize(("code", "status"), [("None", 0), ("True", 1), ("'text'", 1)])
def test_a_code_that_is_not_an_int_exits_as_sys_exit(code: str, status: int) -> None:
    """``None``, a bool or a message: what ``sys.exit`` makes of it."""
    r = _python(f"from ocihook.core.stdio import exit_process\nexit_process({code})\n")
    assert r.returncode == status


def test_the_interpreters_exit_finalizes() -> None:
    """The control: the same program ending with ``sys.exit`` runs the finalizer."""
    r = _python(_FINALIZED + "print('out', end='')\nsys.exit(3)\n")
    assert (r.returncode, r.stdout) == (3, b"out finalized")


def test_an_atexit_callback_gets_the_interpreters_exit() -> None:
    """A registered ``atexit`` callback runs: finalization is not skipped then."""
    program = (
        _FINALIZED + "import atexit\n"
        "atexit.register(lambda: os.write(1, b' atexit'))\n"
        "from ocihook.core.stdio import exit_process\n"
        "print('out', end='')\n"
        "exit_process(4)\n"
    )
    r = _python(program)
    assert r.returncode == 4
    # the callback runs before the streams are flushed, the finalizer last
    assert r.stdout == b" atexitout finalized"


def test_a_live_thread_gets_the_interpreters_exit() -> None:
    """A thread still running is waited for (the interpreter joins non-daemon threads)
    rather than cut off."""
    program = (
        "import os, threading, time\n"
        "def late():\n"
        "    time.sleep(0.3)\n"
        "    os.write(1, b'thread done')\n"
        "threading.Thread(target=late).start()\n"
        "from ocihook.core.stdio import exit_process\n"
        "exit_process(5)\n"
    )
    r = _python(program)
    assert (r.returncode, r.stdout) == (5, b"thread done")


def test_a_stdout_that_cannot_be_flushed_gets_the_interpreters_exit() -> None:
    """stdout's reader gone (EPIPE on the flush): the interpreter's own exit, status 120,
    as before."""
    program = (
        "import os, sys\n"
        "from ocihook.core.stdio import exit_process\n"
        "sys.stdout.write('x' * 100)\n"
        "r, w = os.pipe()\n"
        "os.close(r)\n"
        "os.dup2(w, 1)\n"
        "exit_process(0)\n"
    )
    r = _python(program)
    assert r.returncode == 120
    assert b"BrokenPipeError" in r.stderr


def test_run_ends_a_hook_without_finalization(tmp_path: Path) -> None:
    """``ocihook hook prestart`` through :func:`ocihook._main.run` (the installed command
    and the registered ``-c`` program): its exit status, and no finalizer runs; any other
    command (``--version``) exits through the interpreter."""
    bundle = make_bundle(tmp_path / "b", env=["PATH=/bin"])
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": str(bundle)})
    program = _FINALIZED + "from ocihook._main import run\nrun()\n"
    r = _python(program, "hook", "prestart", stdin=state.encode())
    assert (r.returncode, r.stdout) == (0, b"")  # nothing asked: exit 0, no finalizer
    r = _python(program, "hook", "prestart", stdin=b"garbage")
    assert (r.returncode, r.stdout) == (4, b"")  # bad-state, no finalizer
    assert r.stderr.startswith(b"ocihook: error[bad-state]: malformed JSON")
    r = _python(program, "--version")
    assert r.returncode == 0 and r.stdout.endswith(b" finalized")


def test_run_ends_cdi_generate_without_finalization(sim: Any, tmp_path: Path) -> None:
    """``cdi generate`` and ``edit`` (the one-shot fast commands) end the same way: the
    spec is written, the status kept, no finalizer runs; a click command does not."""
    program = _FINALIZED + "from ocihook._main import run\nrun()\n"
    out = tmp_path / "spec.json"
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    r = _python(program, "cdi", "generate", *roots, "--output", str(out))
    assert (r.returncode, r.stdout) == (0, b""), r.stderr
    assert json.loads(out.read_text())["kind"] == "nvidia.com/gpu"
    r = _python(program, "cdi", "generate", *roots, "--format", "json")  # to stdout
    assert r.returncode == 0 and json.loads(r.stdout)["kind"] == "nvidia.com/gpu"
    r = _python(program, "edit", "-b", str(tmp_path / "missing"))
    assert r.returncode != 0 and r.stdout == b"" and b"config.json" in r.stderr
    r = _python(program, "config", "show")  # click
    assert r.returncode == 0 and r.stdout.endswith(b" finalized")


@pytest.mark.parametrize(
    ("entry", "argv", "collector"),
    [
        ("ocihook._main:run", ["hook", "prestart"], "False"),
        ("ocihook._main:run", ["cdi", "generate"], "False"),  # a one-shot command
        ("ocihook._main:run", ["edit", "-b", "b"], "False"),
        ("ocihook._main:run", ["cdi", "list"], "True"),  # any other command keeps it
        ("ocihook._main:run", ["k8s", "device-plugin"], "True"),
        ("ocihook._main:run_nvidia_hook", ["prestart"], "False"),
        ("ocihook.runtime:run", ["create"], "False"),
    ],
)
def test_start_path_programs_run_without_the_cyclic_collector(
    entry: str, argv: list[str], collector: str
) -> None:
    """The start-path programs turn the cyclic garbage collector off before their work
    (:func:`ocihook.core.stdio.start_path_gc`), as do ``edit`` and ``cdi generate``;
    ``ocihook`` keeps it for every other command (a daemon must collect). The program's work is replaced by a function that
    prints whether the collector is on."""
    module, _, function = entry.partition(":")
    name = {"run": "main", "run_nvidia_hook": "nvidia_hook_main"}[function]
    program = (
        f"import gc, importlib\nm = importlib.import_module({module!r})\n"
        f"m.{name} = lambda: (print(gc.isenabled()), 3)[1]\n"
        f"m.{function}()\n"
    )
    r = _python(program, *argv)
    assert (r.returncode, r.stdout.decode().split()) == (3, [collector]), r.stderr
