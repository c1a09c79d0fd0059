"""The code-loading-variable refusal (``ocihook._main``): every variable of
:data:`POISON_VARIABLES` refuses a hook (exit 9, one line naming it) before anything more
is imported; under ``-I`` only the C library's and the shell's still count; a hook whose
environment is the container's ``process.env`` is refused too. The installed scripts
(``packaging/bin``, as pip installs them: sh runs the ``python3`` beside them with ``-I``)
honour no ``PYTHONPATH`` ``sitecustomize``, ``PYTHONHOME``, ``PYTHONWARNINGS`` or
``.pyc`` tree of an image.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
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
    SHELL_VARIABLES,
    container_environment,
    names_a_file,
    poisoned_environment,
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
#: glibc 2.39's additions to that list: none loads code or names a file.
GLIBC_239_ADDED = frozenset(
    [
        "LD_BIND_NOT",
        "LD_BIND_NOW",
        "LD_VERBOSE",
        "LD_WARN",
        "MALLOC_ARENA_MAX",
        "MALLOC_ARENA_TEST",
        "MALLOC_MMAP_MAX_",
        "MALLOC_MMAP_THRESHOLD_",
        "MALLOC_PERTURB_",
        "MALLOC_TOP_PAD_",
        "MALLOC_TRIM_THRESHOLD_",
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


#: The variables of Python 3.11-3.13's "Environment variables" (the command-line
#: documentation) that load code or name a file to read or write, Windows- and
#: macOS-only ones aside; the rest of that page changes behaviour only.
PYTHON_DOCUMENTED_CODE_OR_FILE = frozenset(
    [
        "PYTHONBREAKPOINT",  # imports the named callable's module
        "PYTHONDUMPREFSFILE",  # 3.11 debug builds: writes the file
        "PYTHONEXECUTABLE",
        "PYTHONHOME",
        "PYTHONINSPECT",  # reads stdin as code after the script
        "PYTHONPATH",
        "PYTHONPERFSUPPORT",  # 3.12: writes /tmp/perf-<pid>.map
        "PYTHONPLATLIBDIR",
        "PYTHONPYCACHEPREFIX",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONWARNINGS",  # imports a category's module
        "PYTHON_HISTORY",  # 3.13: the REPL's history file
        "PYTHON_PERF_JIT_SUPPORT",  # 3.13: writes jit dump files
        "PYTHON_PRESITE",  # 3.13 debug builds: imports a module before site
    ]
)


def test_the_lists() -> None:
    assert GLIBC_UNSECURE_ENVVARS - LEFT_OUT | {"LD_PROFILE_OUTPUT"} == LOADER_VARIABLES
    assert not LOADER_VARIABLES & GLIBC_239_ADDED
    assert len(LOADER_VARIABLES) == 16
    assert PYTHON_VARIABLES | PYTHON_UNISOLATED_VARIABLES == PYTHON_DOCUMENTED_CODE_OR_FILE
    assert all(v.startswith("PYTHON") for v in PYTHON_VARIABLES)
    assert {"PYTHONEXECUTABLE"} == PYTHON_UNISOLATED_VARIABLES
    assert {"BASH_ENV", "ENV", "SHELLOPTS"} <= SHELL_VARIABLES
    assert POISON_VARIABLES == (
        LOADER_VARIABLES | SHELL_VARIABLES | PYTHON_VARIABLES | PYTHON_UNISOLATED_VARIABLES
    )
    assert ISOLATED_POISON_VARIABLES == (
        LOADER_VARIABLES | SHELL_VARIABLES | PYTHON_UNISOLATED_VARIABLES
    )
    assert not PYTHON_VARIABLES & ISOLATED_POISON_VARIABLES


@pytest.mark.parametrize(
    ("name", "value", "file"),
    [
        ("TZ", "Europe/Paris", False),
        ("TZ", "UTC", False),
        ("TZ", ":/rootfs/evil", True),
        ("TZ", "/rootfs/evil", True),
        ("TZ", "../../../rootfs/evil", True),
        ("TZ", ":/etc/localtime", False),
        ("TZ", "/usr/share/zoneinfo/Europe/Paris", False),
        ("TZ", "/usr/share/zoneinfo/../../../rootfs/evil", True),
        ("TZ", "/etc/localtime.d/x", True),
        ("LANG", "C.UTF-8", False),
        ("LANG", "/rootfs/locale", True),
        ("LC_ALL", "en_US.UTF-8", False),
        ("LC_CTYPE", "/rootfs/locale", True),
        ("LANGUAGE", "fr:de", False),
        ("LANGUAGE", "fr:/rootfs/x", True),
        ("HOME", "/root", False),
    ],
)
def test_names_a_file(name: str, value: str, file: bool) -> None:
    assert names_a_file(name, value) is file
    assert poisoned_environment({name: value}) == ([name] if file else [])


@given(st.text(st.characters(blacklist_characters="/."), max_size=20))
def test_a_name_without_slash_or_dot_never_names_a_file(value: str) -> None:
    for name in ("TZ", "LANG", "LANGUAGE", "LC_ALL", "LC_MESSAGES"):
        assert not names_a_file(name, value)
        assert names_a_file(name, "/" + value)


def test_exported_shell_functions_count() -> None:
    env = {"BASH_FUNC_ls%%": "() { id; }", "PATH": "/bin", "PS4": "$(id)"}
    assert poisoned_environment(env) == ["BASH_FUNC_ls%%", "PS4"]
    assert poisoned_environment(env, isolated=True) == ["BASH_FUNC_ls%%", "PS4"]


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


# --- the environment of a hook registered without env ------------------------------------


def _config(env: list[str]) -> bytes:
    doc = {
        "ociVersion": "1.0.2",
        "process": {"args": ["sh"], "env": env},
        "root": {"path": "rootfs"},
    }
    return json.dumps(doc).encode()


ENV_ENTRIES = st.lists(
    st.tuples(
        st.text(
            st.characters(min_codepoint=33, max_codepoint=0x2FF, blacklist_characters="="),
            min_size=1,
            max_size=8,
        ),
        st.text(st.characters(min_codepoint=1, max_codepoint=0x2FF), max_size=12),
    ),
    max_size=6,
    unique_by=lambda kv: kv[0],
)


@given(ENV_ENTRIES, st.dictionaries(st.sampled_from(["HOME", "container"]), st.text(max_size=4)))
def test_the_containers_environment_is_recognised(
    entries: list[tuple[str, str]], added: dict[str, str]
) -> None:
    """A hook's environment holding every ``process.env`` entry (values with quotes,
    backslashes, non-ASCII: JSON escapes) is the container's, whatever the runtime adds,
    unless those entries are only ``PATH`` and ``LC_CTYPE`` (what ocihook's registrations have)."""
    env = [f"{k}={v}" for k, v in entries]
    environ = {**added, **dict(entries)}
    found = container_environment(_config(env), environ)
    if any(k not in ("PATH", "LC_CTYPE") for k, _ in entries):
        assert found == (len(env), len(environ))
    else:
        assert found is None


@given(ENV_ENTRIES.filter(lambda e: any(k not in ("PATH", "LC_CTYPE") for k, _ in e)), st.data())
def test_one_entry_missing_or_different_is_not_the_containers(
    entries: list[tuple[str, str]], data: st.DataObject
) -> None:
    env = [f"{k}={v}" for k, v in entries]
    environ = dict(entries)
    name = data.draw(st.sampled_from(sorted(environ)))
    if data.draw(st.booleans()):
        del environ[name]
    else:
        environ[name] += "x"
    assert container_environment(_config(env), environ) is None


def test_ocihooks_registration_env_is_never_the_containers() -> None:
    """ocihook's registrations give ``PATH`` alone: equal to a container's ``PATH``, or
    an empty ``process.env``, or a file that is not a bundle's, it is not refused."""
    from ocihook.config.options import HOOK_ENV

    environ = dict(e.split("=", 1) for e in HOOK_ENV)
    assert set(environ) <= entry.REGISTRATION_VARIABLES
    assert container_environment(_config(list(HOOK_ENV)), environ) is None
    assert container_environment(_config([*HOOK_ENV, "TERM=xterm"]), environ) is None
    other = {**environ, "TERM": "xterm"}
    assert container_environment(_config([]), other) is None
    assert container_environment(b"[1]", other) is None
    assert container_environment(b"{not json", other) is None
    assert container_environment(b'{"process": {"env": "TERM=xterm"}}', other) is None


def _hook_in_child(
    tmp_path: Path, process_env: list[str], environ: dict[str, str], stage: str
) -> subprocess.CompletedProcess[str]:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True, exist_ok=True)
    (bundle / "config.json").write_bytes(_config(process_env))
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": str(bundle)})
    code = f"import sys; sys.path.insert(0, {REPO!r}); from ocihook._main import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-I", "-c", code, "hook", stage],
        input=state,
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )


@pytest.mark.parametrize("stage", ["prestart", "createContainer", "poststop"])
def test_a_hook_with_the_containers_environment_refuses(tmp_path: Path, stage: str) -> None:
    """One line, exit 9, naming config.json; the same hook with ocihook's registration
    env goes on (no GPU asked for: exit 0)."""
    env = ["PATH=/bin", "TERM=xterm", "HOSTNAME=c1"]
    proc = _hook_in_child(tmp_path, env, {"PATH": "/bin", "TERM": "xterm", "HOSTNAME": "c1"}, stage)
    assert proc.returncode == 9, proc.stderr
    config = tmp_path / "bundle/config.json"
    assert proc.stderr.splitlines() == [
        "ocihook: error[container-environment]: refusing to run a hook whose environment is "
        f"the container's: all 3 entries of process.env in {config} are set in it "
        "(4 variables), so it was registered without an explicit env; hint: " + entry._POISON_HINT
    ]
    proc = _hook_in_child(tmp_path, env, dict(CLEAN_ENV, PATH="/bin"), stage)
    assert proc.returncode == 0, proc.stderr


# --- the installed scripts -------------------------------------------------------------------


@pytest.fixture(scope="module")
def installed_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``bin`` directory of a fresh virtual environment holding ``packaging/bin``'s
    scripts as pip installs them (unchanged: their first line is ``#!/bin/sh``), ocihook
    found through a ``.pth`` file naming this checkout and this environment's packages."""
    venv = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = subprocess.run(
        [str(venv / "bin/python3"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # this checkout, then this environment's packages (click...) as plain directories
    Path(site, "ocihook-checkout.pth").write_text(f"{REPO}\n{sysconfig.get_path('purelib')}\n")
    for name in ("ocihook", "ocihook-runtime", "nvidia-container-runtime-hook"):
        shutil.copy(Path(REPO, "packaging/bin", name), venv / "bin" / name)
    return venv / "bin"


def _installed(bindir: Path, name: str) -> Path:
    """``packaging/bin/<name>`` as pip installs it."""
    path = bindir / name
    assert path.read_bytes() == Path(REPO, "packaging/bin", name).read_bytes()
    assert os.access(path, os.X_OK)
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
        # started with -I, Docker's hook counts only what the interpreter still honoured:
        # it goes on and reports the empty state (exit 4)
        ("nvidia-container-runtime-hook", ["prestart"], 4),
        ("ocihook", ["--version"], 0),
        ("ocihook-runtime", ["--help"], 0),
    ],
)
def test_installed_script_ignores_an_image_pycache(
    tmp_path: Path, installed_bin: Path, script: str, args: list[str], code: int
) -> None:
    marker = tmp_path / "ran"
    _hostile_pycache(tmp_path / "pfx", marker)
    env = {**CLEAN_ENV, "PYTHONPYCACHEPREFIX": str(tmp_path / "pfx")}
    proc = subprocess.run(
        [str(_installed(installed_bin, script)), *args],
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


@pytest.mark.parametrize("isolated", [True, False])
def test_pythoninspect_refuses_in_one_line(
    tmp_path: Path, installed_bin: Path, isolated: bool
) -> None:
    """``PYTHONINSPECT``, ignored by the installed script's ``-I`` start and honoured by a
    ``python3 <script>`` start: the refusal is exit 9 and one line either way, not a
    ``SystemExit`` traceback (exit 1) and a prompt reading stdin."""
    marker = tmp_path / "ran"
    script = str(_installed(installed_bin, "ocihook"))
    proc = subprocess.run(
        [*([] if isolated else [str(installed_bin / "python3")]), script, "hook", "prestart"],
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


def _image_python_tree(tmp_path: Path, marker: Path) -> Path:
    """What an image can name with ``PYTHONPATH``: a ``sitecustomize`` (run by ``site``
    before any script line) and a module ``evilwarn`` (imported by a ``PYTHONWARNINGS``
    category ``evilwarn.W``), each writing ``marker``."""
    tree = tmp_path / "evil"
    tree.mkdir()
    code = f"open({str(marker)!r}, 'a').write(__name__ + chr(10))\n"
    (tree / "sitecustomize.py").write_text(code)
    (tree / "usercustomize.py").write_text(code)
    (tree / "evilwarn.py").write_text(code + "class W(Warning): pass\n")
    return tree


@pytest.mark.parametrize("script", ["ocihook", "nvidia-container-runtime-hook", "ocihook-runtime"])
def test_installed_scripts_start_isolated(tmp_path: Path, installed_bin: Path, script: str) -> None:
    """Each installed script, run by its path, by a relative path from its directory and
    by its bare name from ``PATH``, honours none of the image's ``PYTHONPATH``,
    ``PYTHONWARNINGS``, ``PYTHONHOME``, ``PYTHONSTARTUP``: nothing is imported from the
    image's tree, and the interpreter starts (a ``PYTHONHOME`` it honoured would make it
    fail to find its standard library)."""
    marker = tmp_path / "ran"
    tree = _image_python_tree(tmp_path, marker)
    env = {
        **CLEAN_ENV,
        "PATH": f"{installed_bin}:{CLEAN_ENV['PATH']}",
        "PYTHONPATH": str(tree),
        "PYTHONWARNINGS": "error::evilwarn.W",
        "PYTHONHOME": str(tmp_path / "nohome"),
        "PYTHONSTARTUP": str(tree / "sitecustomize.py"),
    }
    args = (
        ["--version"]
        if script == "ocihook"
        else ["--help"]
        if script == "ocihook-runtime"
        else ["poststop"]
    )
    for argv0, cwd in (
        (str(installed_bin / script), tmp_path),
        (f"./{script}", installed_bin),
        (script, tmp_path),
    ):
        proc = subprocess.run(
            [argv0, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=60
        )
        assert proc.returncode == 0, (argv0, proc.stderr)
        assert not marker.exists(), (argv0, marker.read_text())


def test_the_image_tree_is_real(tmp_path: Path, installed_bin: Path) -> None:
    """The same variables do run the image's code when the script is started by an
    interpreter that honours them (``python3 <script>``, as pip's ``#!<python>`` line
    would): the test above would notice a script that lets them."""
    marker = tmp_path / "ran"
    tree = _image_python_tree(tmp_path, marker)
    env = {**CLEAN_ENV, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "error::evilwarn.W"}
    script = _installed(installed_bin, "ocihook")
    proc = subprocess.run(
        [str(installed_bin / "python3"), str(script), "hook", "prestart"],
        input="{}",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 9 and "sets PYTHONPATH, PYTHONWARNINGS;" in proc.stderr
    assert sorted(marker.read_text().split()) == ["evilwarn", "sitecustomize"]


def test_script_through_a_link_elsewhere_runs_the_python3_beside_the_link(
    tmp_path: Path, installed_bin: Path
) -> None:
    """sh takes the interpreter from the directory of the path it was started by: a link
    in a directory without ``python3`` fails with sh's one line (exit 127), never with
    another interpreter found on ``PATH``."""
    link = tmp_path / "bin/ocihook"
    link.parent.mkdir()
    link.symlink_to(_installed(installed_bin, "ocihook"))
    proc = subprocess.run(
        [str(link), "--version"],
        capture_output=True,
        text=True,
        env={**CLEAN_ENV, "PATH": f"{installed_bin}:/usr/bin:/bin"},
        timeout=60,
    )
    assert proc.returncode == 127
    assert f"{tmp_path}/bin/python3" in proc.stderr  # dash: "not found"; bash: "No such file"
