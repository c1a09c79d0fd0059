"""The code-loading-variable refusal (``ocihook._main``): every variable of
:data:`POISON_VARIABLES` refuses a hook (exit 9, one line naming it) before anything more
is imported; under ``-I`` only the C library's still count; and the installed scripts do
not run an image's ``.pyc`` tree (``PYTHONPYCACHEPREFIX``). What no script can prevent, a
``sitecustomize`` on ``PYTHONPATH`` run before the script's first line, is pinned too, with
the ``-I`` start the registrations use, which prevents it.
"""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO

import ocihook
import ocihook._main as entry
import ocihook.runtime
from ocihook._main import (
    ISOLATED_POISON_VARIABLES,
    LOADER_VARIABLES,
    POISON_VARIABLES,
    PYTHON_UNISOLATED_VARIABLES,
    PYTHON_VARIABLES,
)

#: glibc's secure-execution list (``UNSECURE_ENVVARS``, ``sysdeps/generic/unsecvars.h``,
#: glibc 2.38) and the entries of it that neither load code nor name a file, which
#: :data:`LOADER_VARIABLES` leaves out on purpose (its docstring says why).
GLIBC_UNSECURE_ENVVARS = frozenset(
    [
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LD_AUDIT",
        "LD_DEBUG",
        "LD_DEBUG_OUTPUT",
        "LD_DYNAMIC_WEAK",
        "LD_HWCAP_MASK",
        "LD_LIBRARY_PATH",
        "LD_ORIGIN_PATH",
        "LD_PRELOAD",
        "LD_PROFILE",
        "LD_SHOW_AUXV",
        "LD_USE_LOAD_BIAS",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TMPDIR",
        "TZDIR",
    ]
)
LEFT_OUT = frozenset(
    [
        "LD_DEBUG",
        "LD_DYNAMIC_WEAK",
        "LD_HWCAP_MASK",
        "LD_SHOW_AUXV",
        "LD_USE_LOAD_BIAS",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        "NIS_PATH",
        "TMPDIR",
    ]
)

CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}

#: A hook run in a fresh interpreter: the modules that the call imported after
#: ``ocihook._main`` are printed after the exit code.
PROBE = (
    "import sys\n"
    f"sys.path.insert(0, {REPO!r})\n"
    "from ocihook._main import main\n"
    "before = set(sys.modules)\n"
    "code = main(['hook', 'prestart'])\n"
    "print(code, sorted(set(sys.modules) - before))\n"
)


def test_the_lists() -> None:
    assert LOADER_VARIABLES == GLIBC_UNSECURE_ENVVARS - LEFT_OUT
    assert len(LOADER_VARIABLES) == 15
    assert {"PYTHONPYCACHEPREFIX", "PYTHONWARNINGS", "PYTHONBREAKPOINT"} <= PYTHON_VARIABLES
    assert {"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP"} <= PYTHON_VARIABLES
    assert all(v.startswith("PYTHON") for v in PYTHON_VARIABLES)
    assert {"PYTHONEXECUTABLE"} == PYTHON_UNISOLATED_VARIABLES
    assert POISON_VARIABLES == LOADER_VARIABLES | PYTHON_VARIABLES | PYTHON_UNISOLATED_VARIABLES
    assert ISOLATED_POISON_VARIABLES == LOADER_VARIABLES | PYTHON_UNISOLATED_VARIABLES
    assert not PYTHON_VARIABLES & ISOLATED_POISON_VARIABLES


def test_pythonexecutable_is_honoured_under_dash_i() -> None:
    """Why ``PYTHONEXECUTABLE`` still counts for an isolated interpreter."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", "import sys; print(sys.executable)"],
        capture_output=True,
        text=True,
        env={**CLEAN_ENV, "PYTHONEXECUTABLE": "/nonexistent-ocihook/python"},
        check=True,
    )
    assert proc.stdout == "/nonexistent-ocihook/python\n"


@pytest.mark.parametrize("name", sorted(POISON_VARIABLES))
def test_every_variable_refuses_before_importing(name: str) -> None:
    """``-I`` so that the interpreter itself ignores a ``PYTHON*`` one (the refusal of
    ``ocihook hook`` counts them all the same); the loader's warning about a missing
    ``LD_PRELOAD``/``LD_AUDIT`` object is its own line."""
    env = {**CLEAN_ENV, name: "/nonexistent-ocihook"}
    proc = subprocess.run(
        [sys.executable, "-I", "-c", PROBE], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.stdout == "9 []\n", (proc.stdout, proc.stderr)
    ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("ocihook:")]
    assert ours == [
        "ocihook: error[poisoned-environment]: refusing to run a hook whose environment "
        f"sets {name}; hint: {entry._POISON_HINT}"
    ]


@pytest.mark.parametrize("name", sorted(POISON_VARIABLES))
def test_loader_only_counts_what_an_isolated_interpreter_honours(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for other in POISON_VARIABLES:
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(name, "/x")
    assert entry._refuse_poisoned_hook() == 9
    still = name in ISOLATED_POISON_VARIABLES
    assert entry._refuse_poisoned_hook(loader_only=True) == (9 if still else None)
    assert capsys.readouterr().err.count(f"sets {name};") == (2 if still else 1)
    monkeypatch.setenv(name, "")  # empty: not set
    assert entry._refuse_poisoned_hook() is None


# --- the installed scripts -------------------------------------------------------------------


def _installed(tmp_path: Path, name: str) -> Path:
    """``packaging/bin/<name>`` as pip installs it: the first line names this interpreter,
    without flags (pip's ``fix_script`` drops them)."""
    text = Path(REPO, "packaging/bin", name).read_text()
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(f"#!{sys.executable}\n" + text.split("\n", 1)[1])
    path.chmod(0o755)
    return path


def _hostile_pycache(prefix: Path, marker: Path) -> None:
    """An image's ``PYTHONPYCACHEPREFIX`` tree: for ``ocihook/__init__``, ``ocihook._main``
    and ``ocihook.runtime``, an unchecked-hash ``.pyc`` (never compared with the source)
    that writes ``marker``."""
    evil = prefix.parent / "evil.py"
    evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    saved = sys.pycache_prefix
    sys.pycache_prefix = str(prefix)
    try:
        for module in (ocihook, entry, ocihook.runtime):
            assert module.__file__ is not None
            cfile = importlib.util.cache_from_source(module.__file__)
            py_compile.compile(
                str(evil),
                cfile=cfile,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
    finally:
        sys.pycache_prefix = saved


@pytest.mark.parametrize(
    ("script", "args", "code"),
    [
        ("ocihook", ["hook", "prestart"], 9),
        ("nvidia-container-runtime-hook", ["prestart"], 9),
        ("ocihook", ["--version"], 0),
        ("ocihook-runtime", ["--help"], 0),
    ],
)
def test_installed_script_ignores_an_image_pycache(
    tmp_path: Path, script: str, args: list[str], code: int
) -> None:
    marker = tmp_path / "ran"
    _hostile_pycache(tmp_path / "pfx", marker)
    env = {**CLEAN_ENV, "PYTHONPYCACHEPREFIX": str(tmp_path / "pfx")}
    proc = subprocess.run(
        [str(_installed(tmp_path, script)), *args],
        input="{}",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == code, proc.stderr
    assert not marker.exists()
    if code == 9:
        assert "sets PYTHONPYCACHEPREFIX;" in proc.stderr


def test_installed_script_refuses_pythoninspect_in_one_line(tmp_path: Path) -> None:
    """``PYTHONINSPECT`` is honoured by the script pip installs: the refusal is still exit 9
    and one line, not a ``SystemExit`` traceback (exit 1) and a prompt reading stdin."""
    marker = tmp_path / "ran"
    proc = subprocess.run(
        [str(_installed(tmp_path, "ocihook")), "hook", "prestart"],
        input=f"open({str(marker)!r}, 'w')\n",
        capture_output=True,
        text=True,
        env={**CLEAN_ENV, "PYTHONINSPECT": "1"},
        timeout=60,
    )
    assert proc.returncode == 9
    assert proc.stderr == (
        "ocihook: error[poisoned-environment]: refusing to run a hook whose environment "
        f"sets PYTHONINSPECT; hint: {entry._POISON_HINT}\n"
    )
    assert not marker.exists()


def test_hostile_pycache_is_real(tmp_path: Path) -> None:
    """The tree above does replace ocihook's modules for an interpreter that honours it:
    the test above would notice a script that lets it."""
    marker = tmp_path / "ran"
    _hostile_pycache(tmp_path / "pfx", marker)
    env = {**CLEAN_ENV, "PYTHONPYCACHEPREFIX": str(tmp_path / "pfx")}
    subprocess.run([sys.executable, "-c", "import ocihook._main"], env=env, capture_output=True)
    assert marker.read_text() == "ran"


def test_sitecustomize_runs_before_any_script_but_not_under_dash_i(tmp_path: Path) -> None:
    """What no script can prevent: pip writes ``#!<python>`` without flags, so an
    inherited ``PYTHONPATH``'s ``sitecustomize`` runs before the script's first line (the
    hook still refuses, exit 9). Started as the registrations start it (``python -I``),
    the interpreter never reads it."""
    marker = tmp_path / "ran"
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil/sitecustomize.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    env = {**CLEAN_ENV, "PYTHONPATH": str(tmp_path / "evil")}
    script = _installed(tmp_path, "ocihook")
    run = {"input": "{}", "capture_output": True, "text": True, "env": env, "timeout": 60}
    proc = subprocess.run([sys.executable, "-I", str(script), "hook", "prestart"], **run)  # type: ignore[call-overload]
    assert proc.returncode == 9 and "sets PYTHONPATH;" in proc.stderr
    assert not marker.exists()
    proc = subprocess.run([str(script), "hook", "prestart"], **run)  # type: ignore[call-overload]
    assert proc.returncode == 9 and "sets PYTHONPATH;" in proc.stderr
    assert marker.read_text() == "ran"
    assert os.access(script, os.X_OK)
