"""A hostile image environment against every hook stage, under real runc and crun.

The container's ``process.env`` sets ``LD_PRELOAD`` (a shared object compiled here whose
constructor appends ``preload <program>`` to a marker file), ``PYTHONPATH`` (a
``sitecustomize`` and a ``PYTHONWARNINGS`` category module that append their names),
``PYTHONWARNINGS`` and ``PYTHONPYCACHEPREFIX`` (unchecked ``.pyc`` files for ocihook's own
modules that append ``pycache``); a second set sets ``PYTHONHOME``. ocihook is registered
at each of the six OCI stages in five forms:

- ``snippet``: the documented registration (packaging/config.json-hooks-snippet.json.in,
  hooks.d): this interpreter with ``-I`` and an explicit ``env``;
- ``script``: the installed ``ocihook`` command (packaging/bin) with an explicit ``env``;
- ``bare``, ``bare-script``: the same two without ``env``;
- ``hand``: a hand registration without ``env`` or ``-I`` (``python -c``).

What each stage runs with (the oracle is the marker file and the container's start):
a hook without ``env`` gets the runtime's environment at prestart, createRuntime,
poststart and poststop, and — under runc only — the container's at createContainer
(crun's hook does not get it). startContainer hooks are looked up in the container, where
a host program does not exist: the start fails for every form. So only runc's
createContainer with a registration without ``env`` is reached by the image: its
``LD_PRELOAD`` runs in every process started (sh too, for the installed command), which
ocihook's refusal (exit 9) cannot undo; ``-I`` keeps the ``PYTHON*`` ones out; without
``-I`` the image's ``sitecustomize``, warning category and ``.pyc`` files run as well.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import need_root_and, packaged_hook, run_runtime

import ocihook
import ocihook._main
from ocihook.config.options import is_hook_program
from ocihook.sim import host as simhost

STAGES = ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"]
FORMS = ["snippet", "script", "bare", "bare-script", "hand"]
#: ocihook's command at each OCI stage: the injection where it injects, else the
#: removal of what hook mode made (its shipped poststop registration).
OCIHOOK_STAGE = {
    "prestart": "prestart",
    "createRuntime": "createRuntime",
    "createContainer": "createContainer",
    "startContainer": "poststop",
    "poststart": "poststop",
    "poststop": "poststop",
}
#: The installed ``ocihook`` command of this environment (packaging/bin/ocihook).
SCRIPT = os.path.join(os.path.dirname(sys.executable), "ocihook")
#: The container's command: how many GPU nodes it sees.
COUNT = ["sh", "-c", "ls /dev | grep -c nvidia; exit 0"]
#: nvidia0, nvidiactl, nvidia-uvm, nvidia-uvm-tools.
NODES = "4"
RECORD = ".ocihook-created.json"


class Kit:
    """The image's hostile files (on the host: the hooks that run before pivot_root see
    them at these paths, as an attacker who knows the bundle path would arrange)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.marker = root / "marker"
        src = root / "evil.c"
        src.write_text(
            "#include <stdio.h>\n#include <unistd.h>\n"
            "__attribute__((constructor)) static void f(void) {\n"
            '  char exe[512] = {0}; readlink("/proc/self/exe", exe, sizeof exe - 1);\n'
            f'  FILE *p = fopen("{self.marker}", "a");\n'
            '  if (p) { fprintf(p, "preload %s\\n", exe); fclose(p); }\n}\n'
        )
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-o", str(root / "evil.so"), str(src)], check=True
        )
        py = root / "py"
        py.mkdir()
        write = f"open({str(self.marker)!r}, 'a').write(__name__ + chr(10))\n"
        (py / "sitecustomize.py").write_text(write)
        (py / "evilwarn.py").write_text(write + "class W(Warning): pass\n")
        evil = root / "evilpyc.py"
        evil.write_text(f"open({str(self.marker)!r}, 'a').write('pycache' + chr(10))\n")
        saved = sys.pycache_prefix
        sys.pycache_prefix = str(root / "pfx")
        try:
            for module in (ocihook, ocihook._main):
                assert module.__file__ is not None
                py_compile.compile(
                    str(evil),
                    cfile=importlib.util.cache_from_source(module.__file__),
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                )
        finally:
            sys.pycache_prefix = saved
        self.code = [
            f"LD_PRELOAD={root / 'evil.so'}",
            f"PYTHONPATH={py}",
            "PYTHONWARNINGS=error::evilwarn.W",
            f"PYTHONPYCACHEPREFIX={root / 'pfx'}",
        ]
        self.home = [f"PYTHONHOME={root / 'nohome'}"]


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Kit:
    need_root_and("runc", "crun", "gcc", "unshare")
    return Kit(tmp_path_factory.mktemp("image"))


def _ran(kit: Kit) -> set[str]:
    """The lines the image's code appended to the marker (then removed)."""
    if not kit.marker.exists():
        return set()
    lines = set(kit.marker.read_text().splitlines())
    kit.marker.unlink()
    return lines


def _hook(form: str, stage: str, root: str) -> dict[str, Any]:
    """ocihook's registration for ``stage`` in ``form`` (see the module docstring)."""
    ours = OCIHOOK_STAGE[stage]
    hook = packaged_hook(ours, root)
    if ours == "poststop":
        hook["args"] = hook["args"][:-4]  # no --driver-root/--dev-root
    program = next(i for i, a in enumerate(hook["args"]) if is_hook_program(a))
    if form in ("script", "bare-script"):
        hook["path"] = SCRIPT
        hook["args"] = ["ocihook", *hook["args"][program + 1 :]]
    if form == "hand":
        hook["args"] = [hook["args"][0], "-c", *hook["args"][program:]]
    if form.startswith("bare") or form == "hand":
        del hook["env"]
    return hook


def _run(
    runtime: str,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
    sim: simhost.SimulatedHost,
    stage: str,
    form: str,
    env: list[str],
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run a container whose environment is ``env`` with ocihook registered at ``stage``
    in ``form`` (and, for poststart and poststop, the documented prestart injection, so
    that there is a record for the removal to remove). Returns the runtime's result and
    the bundle."""
    bundle = bundle_factory(COUNT, ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0", *env])
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["hooks"] = {stage: [_hook(form, stage, sim.root)]}
    if stage in ("poststart", "poststop"):
        doc["hooks"]["prestart"] = [_hook("snippet", "prestart", sim.root)]
    cfg.write_text(json.dumps(doc))
    proc = run_runtime(runtime, bundle, str(tmp_path / "state"), f"he-{stage}-{form}"[:60])
    if runtime == "crun" and "setrlimit (RLIM_MEMLOCK)" in proc.stderr:
        # crun raises RLIMIT_MEMLOCK before loading a device program, which this machine
        # (no CAP_SYS_RESOURCE) refuses under cgroup v2
        pytest.skip(f"crun cannot load its device program here: {proc.stderr.strip()}")
    return proc, bundle


def _exposed(runtime: str, stage: str, form: str) -> bool:
    """Whether the image's environment reaches the hook (observed: runc's createContainer
    hook without env)."""
    return (
        runtime == "runc" and stage == "createContainer" and form in ("bare", "bare-script", "hand")
    )


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_image_code_never_runs_in_the_shipped_forms(
    kit: Kit,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
    runtime: str,
    stage: str,
    form: str,
) -> None:
    proc, bundle = _run(runtime, bundle_factory, tmp_path, sim, stage, form, kit.code)
    ran = _ran(kit)
    python = f"preload {os.path.realpath(sys.executable)}"
    if stage == "startContainer":
        # looked up in the container after pivot_root: no host program is there
        assert proc.returncode != 0
        want = "no such file or directory" if runtime == "runc" else "error executing hook"
        assert want in proc.stderr, proc.stderr
        assert ran == set()
        return
    if not _exposed(runtime, stage, form):
        assert ran == set(), (proc.stderr, ran)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [NODES]
        # the removal ran at poststart/poststop: the record of what hook mode made is gone
        assert Path(bundle, RECORD).exists() is (stage not in ("poststart", "poststop"))
        return
    assert proc.returncode != 0
    assert not Path(bundle, "rootfs/dev/nvidia0").exists()
    if form == "bare":
        # -I kept the PYTHON* variables out; the loader ran the image's constructor before
        # the interpreter, and the refusal came after it
        assert ran == {python}
        assert "error[poisoned-environment]" in proc.stderr
        assert "sets LD_PRELOAD, PYTHONPATH, PYTHONPYCACHEPREFIX, PYTHONWARNINGS;" in proc.stderr
    elif form == "bare-script":
        # sh, then the interpreter, each loaded it
        assert ran == {f"preload {os.path.realpath('/bin/sh')}", python}
        assert "error[poisoned-environment]" in proc.stderr
    else:
        # no -I: site ran sitecustomize, the warnings filter imported the category's
        # module, and the image's .pyc replaced ocihook's modules (the refusal never ran)
        assert ran == {python, "sitecustomize", "evilwarn", "pycache"}
        assert "error[poisoned-environment]" not in proc.stderr
        assert "ImportError" in proc.stderr


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_pythonhome_at_create_container(
    kit: Kit,
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
    runtime: str,
    form: str,
) -> None:
    """An image's ``PYTHONHOME`` reaches runc's createContainer hook without env: with
    ``-I`` the interpreter ignores it and ocihook refuses (exit 9); without ``-I`` the
    interpreter finds no standard library and dies before any ocihook code."""
    proc, _ = _run(runtime, bundle_factory, tmp_path, sim, "createContainer", form, kit.home)
    assert _ran(kit) == set()
    if not _exposed(runtime, "createContainer", form):
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [NODES]
    elif form == "hand":
        assert proc.returncode != 0
        assert "encodings" in proc.stderr, proc.stderr
    else:
        assert proc.returncode != 0
        assert "error[poisoned-environment]" in proc.stderr and "PYTHONHOME" in proc.stderr


@pytest.mark.parametrize("form", ["bare", "bare-script"])
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_the_containers_environment_is_refused_even_when_harmless(
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Path,
    runtime: str,
    form: str,
) -> None:
    """No variable that loads code, but the hook's environment is the container's: under
    runc ocihook refuses (exit 9, error[container-environment]) and the container does
    not start; crun does not give the hook the container's environment, so it works."""
    need_root_and(runtime, "unshare")
    env = ["TERM=xterm", "HOSTNAME=hostile"]
    proc, bundle = _run(runtime, bundle_factory, tmp_path, sim, "createContainer", form, env)
    if runtime == "crun":
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [NODES]
        return
    assert proc.returncode != 0
    config = f"{bundle}/config.json"
    with open(config) as f:
        entries = len(json.load(f)["process"]["env"])
    assert (
        "ocihook: error[container-environment]: refusing to run a hook whose environment is "
        f"the container's: all {entries} entries of process.env in {config} are set in it"
    ) in proc.stderr, proc.stderr
    assert not Path(bundle, "rootfs/dev/nvidia0").exists()


def test_the_record_stays_without_the_removal(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Path
) -> None:
    """The control of the poststart/poststop evidence above: with only the injection
    registered, the record of what hook mode made stays in the bundle."""
    need_root_and("runc")
    bundle = bundle_factory(COUNT, ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"])
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["hooks"] = {"prestart": [_hook("snippet", "prestart", sim.root)]}
    cfg.write_text(json.dumps(doc))
    proc = run_runtime("runc", bundle, str(tmp_path / "state"), "he-record")
    assert proc.returncode == 0, proc.stderr
    assert Path(bundle, RECORD).exists()
