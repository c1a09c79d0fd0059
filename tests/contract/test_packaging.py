"""packaging/: the systemd units and udev rule that regenerate the CDI spec, the example
engine configurations, the hooks.d files; and the distribution: a wheel and an sdist
built here, installed into a fresh virtual environment, whose two console scripts run.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from support import REPO, bare_venv

from ocihook.engines import (
    configure_containerd,
    configure_crio,
    configure_docker,
    hooks_d_document,
)
from ocihook.sim import host as simhost

PACKAGING = os.path.join(REPO, "packaging")
SERVICE = os.path.join(PACKAGING, "systemd/ocihook-cdi-refresh.service.in")
PATH_UNIT = os.path.join(PACKAGING, "systemd/ocihook-cdi-refresh.path")
UDEV = os.path.join(PACKAGING, "udev/71-ocihook-cdi-refresh.rules")
BINDIR = os.path.dirname(sys.executable)

#: The interface of ``ocihook cdi generate`` the units rely on (its documented flags).
CDI_GENERATE_FLAGS = {
    "--vendor",
    "--class",
    "--format",
    "--output",
    "--driver-root",
    "--dev-root",
    "--device-name-strategy",
}

#: Keys systemd accepts in the sections the units use (systemd.unit(5), systemd.service(5),
#: systemd.path(5), systemd.exec(5): the subset these units may use).
UNIT_KEYS = {
    "Unit": {
        "Description", "Documentation", "After", "Before", "Wants", "Requires",
        "ConditionPathExists", "ConditionPathExistsGlob",
    },
    "Service": {
        "Type", "ExecStart", "ExecCondition", "RemainAfterExit", "Environment",
        # the sandbox (systemd.exec(5), systemd.resource-control(5))
        "RuntimeDirectory", "RuntimeDirectoryPreserve", "ReadWritePaths", "UMask",
        "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateNetwork", "IPAddressDeny",
        "RestrictAddressFamilies", "PrivateIPC", "PrivateMounts", "DevicePolicy",
        "DeviceAllow", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
        "ProtectControlGroups", "ProtectClock", "ProtectHostname", "ProtectProc",
        "NoNewPrivileges", "CapabilityBoundingSet", "AmbientCapabilities",
        "RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality",
        "SystemCallArchitectures", "SystemCallFilter", "SystemCallErrorNumber",
    },
    "Path": {"PathChanged", "PathModified", "PathExists", "Unit"},
    "Install": {"WantedBy", "RequiredBy"},
}  # fmt: skip


#: Keys whose empty value means something (no capabilities at all).
EMPTY_OK = {"CapabilityBoundingSet", "AmbientCapabilities"}


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """A systemd unit file as {section: [(key, value)]} (keys may repeat)."""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        m = re.fullmatch(r"\[([A-Za-z]+)\]", line)
        if m:
            current = m.group(1)
            assert current not in sections, f"section {current} twice"
            sections[current] = []
            continue
        assert current is not None, f"key outside a section: {line!r}"
        key, eq, value = line.partition("=")
        empty_ok = key.strip() in EMPTY_OK
        assert eq and key.strip() and (value.strip() or empty_ok), f"not key=value: {line!r}"
        sections[current].append((key.strip(), value.strip()))
    return sections


def rendered_service(bindir: str = BINDIR) -> str:
    with open(SERVICE) as f:
        return f.read().replace("@BINDIR@", bindir)


def test_units_structure() -> None:
    service = parse_unit(rendered_service())
    with open(PATH_UNIT) as f:
        path = parse_unit(f.read())
    for unit in (service, path):
        for section, entries in unit.items():
            assert section in UNIT_KEYS, section
            for key, _value in entries:
                assert key in UNIT_KEYS[section], (section, key)
    assert dict(service["Service"])["Type"] == "oneshot"
    # a oneshot that stays "active" would not run again when the path unit triggers it
    assert "RemainAfterExit" not in dict(service["Service"])
    assert dict(service["Install"])["WantedBy"] == "multi-user.target"
    assert dict(path["Path"])["Unit"] == "ocihook-cdi-refresh.service"
    watched = [v for k, v in path["Path"] if k == "PathChanged"]
    assert "/lib/modules/%v/modules.dep" in watched and "/etc/ld.so.cache" in watched
    assert all(w.startswith("/") for w in watched)


def test_service_runs_cdi_generate() -> None:
    """ExecStart is this installation's ``ocihook cdi generate --warm-cache --output
    /var/run/cdi/nvidia.yaml``, with the command's documented flags only, and its parser
    accepts the line (the discovery cache is warmed)."""
    (exec_start,) = [v for k, v in parse_unit(rendered_service())["Service"] if k == "ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0] == os.path.join(BINDIR, "ocihook") and os.access(argv[0], os.X_OK)
    assert argv[1:4] == ["cdi", "generate", "--warm-cache"]
    options = dict(zip(argv[4::2], argv[5::2], strict=True))
    assert options == {"--output": "/var/run/cdi/nvidia.yaml"}
    assert set(options) <= CDI_GENERATE_FLAGS
    from ocihook.commands.fast import parse_fast

    ns = parse_fast(argv[1:])  # the command's own (fast) parser takes the line
    assert ns is not None and (ns.command, ns.stage) == ("cdi", "generate")
    assert ns.output == "/var/run/cdi/nvidia.yaml" and ns.warm_cache


def test_units_verify_with_systemd(tmp_path: Path) -> None:
    """``systemd-analyze verify`` (where installed) accepts both units."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return  # test_units_structure checked them by hand
    (tmp_path / "ocihook-cdi-refresh.service").write_text(rendered_service())
    shutil.copy(PATH_UNIT, tmp_path / "ocihook-cdi-refresh.path")
    units = [
        str(tmp_path / "ocihook-cdi-refresh.service"),
        str(tmp_path / "ocihook-cdi-refresh.path"),
    ]
    proc = subprocess.run([analyze, "verify", *units], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "ocihook-cdi-refresh" not in proc.stderr, proc.stderr
    # and it does catch a broken one: the command missing
    (tmp_path / "ocihook-cdi-refresh.service").write_text(rendered_service("/nonexistent/bin"))
    proc = subprocess.run([analyze, "verify", units[0]], capture_output=True, text=True)
    assert proc.returncode != 0 and "/nonexistent/bin/ocihook" in proc.stderr


#: The most ``systemd-analyze security`` may rate each service's exposure (0 safest, 10
#: least safe). Both run as root with the host's /dev (NVML opens /dev/nvidia*; the links
#: service creates nodes there): what keeps them from 0.
MAX_EXPOSURE = 1.5


@pytest.mark.parametrize(
    "template", ["ocihook-cdi-refresh.service.in", "ocihook-dev-char-symlinks.service.in"]
)
def test_services_are_sandboxed(template: str, tmp_path: Path) -> None:
    """``systemd-analyze security`` rates each service OK, not UNSAFE: read-only system,
    no network, no capabilities but the links service's CAP_MKNOD, a system-call filter,
    the NVIDIA device groups only."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian: systemd)")
    unit = tmp_path / template.removesuffix(".in")
    unit.write_text(Path(PACKAGING, "systemd", template).read_text().replace("@BINDIR@", BINDIR))
    proc = subprocess.run(
        [analyze, "security", "--offline=true", "--no-pager", str(unit)],
        capture_output=True,
        text=True,
    )
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d) (\w+)", proc.stdout)
    assert found is not None, proc.stdout + proc.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE and found.group(2) == "OK", proc.stdout
    service = dict(parse_unit(unit.read_text())["Service"])
    assert service["ProtectSystem"] == "strict" and service["NoNewPrivileges"] == "yes"
    assert service["RestrictAddressFamilies"] == "AF_UNIX"


def test_udev_rule() -> None:
    with open(UDEV) as f:
        rules = [ln for ln in f.read().splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(rules) == 1
    pairs = re.findall(r'([A-Z]+(?:\{[A-Z_]+\})?)(==|!=|\+=|=)"([^"]*)"', rules[0])
    assert ", ".join(f'{k}{op}"{v}"' for k, op, v in pairs) == rules[0]
    keys = {(k, op): v for k, op, v in pairs}
    assert keys[("ACTION", "==")] == "add"
    assert keys[("SUBSYSTEM", "==")] == "module"
    assert keys[("KERNEL", "==")] == "nvidia"
    run = shlex.split(keys[("RUN", "+=")])
    assert run[0].endswith("/systemctl") and run[1:] == [
        "--no-block",
        "start",
        "ocihook-cdi-refresh.service",
    ]


# --- examples and hooks.d files ------------------------------------------------------------

EXAMPLE_RUNTIME = "/usr/local/bin/ocihook-runtime"


@pytest.mark.parametrize(
    ("name", "edit"),
    [
        ("docker-daemon.json", configure_docker),
        ("containerd-config.toml", configure_containerd),
        ("crio-99-ocihook.conf", configure_crio),
    ],
)
def test_examples_are_what_configure_writes(name: str, edit: object) -> None:
    """packaging/examples/ are ``ocihook runtime configure --cdi`` on a missing file,
    with the wrapper in /usr/local/bin (so they cannot drift from the command)."""
    with open(os.path.join(PACKAGING, "examples", name), "rb") as f:
        example = f.read()
    after, _ = edit(None, path=name, runtime_path=EXAMPLE_RUNTIME, cdi=True)  # type: ignore[operator]
    assert example == after


#: Where the Debian package installs ocihook (``scripts/build-deb``'s ``@SYSPATH@``).
DEB_SYS_PATH = ["/usr/lib/python3/dist-packages"]


def test_hooks_d_files() -> None:
    for stage in ("prestart", "poststop"):
        with open(os.path.join(PACKAGING, f"hooks.d/ocihook-{stage}.json.in")) as f:
            text = f.read().replace("@PYTHON@", "/usr/bin/python3")
            always = json.loads(text.replace("@SYSPATH@", repr(DEB_SYS_PATH)))
        assert always == hooks_d_document("/usr/bin/python3", stage, sys_path=DEB_SYS_PATH)
        assert always["when"] == {"always": True} and always["stages"] == [stage]
    # no file runs the hook only for cdi.k8s.io/ annotations: the hook cannot serve them
    # (a prestart hook cannot apply a CDI spec's env, hooks or additionalGids), so such a
    # file let annotated containers start without their GPUs, without a word
    assert sorted(os.listdir(os.path.join(PACKAGING, "hooks.d"))) == [
        "ocihook-poststop.json.in",
        "ocihook-prestart.json.in",
    ]


def _k8s_plugin_containers() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(manifest, container, pod spec) of every ``ocihook k8s`` container in
    packaging/kubernetes/."""
    import yaml

    out = []
    directory = os.path.join(PACKAGING, "kubernetes")
    for name in sorted(n for n in os.listdir(directory) if n.endswith(".yaml")):
        with open(os.path.join(directory, name)) as f:
            for doc in yaml.safe_load_all(f):
                pod = doc.get("spec", {}).get("template", {}).get("spec", {})
                for c in pod.get("containers", []):
                    if c.get("command", [])[:2] == ["ocihook", "k8s"]:
                        out.append((name, c, pod))
    return out


def test_k8s_manifests_name_host_paths() -> None:
    """The plugins' manifests: every option exists, and the driver root is the host's
    path while the plugin reads it where a hostPath volume mounts it (specs written with
    the container's ``/host`` prefix fail every pod)."""
    from ocihook.commands.cli_k8s import k8s

    found = _k8s_plugin_containers()
    assert {(name, c["command"][2]) for name, c, _ in found} == {
        ("device-plugin-daemonset.yaml", "device-plugin"),
        ("dra-plugin-daemonset.yaml", "dra-plugin"),
    }
    for name, c, pod in found:
        command = k8s.commands[c["command"][2]]
        known = {o for p in command.params for o in getattr(p, "opts", ())}
        args = dict(a.partition("=")[::2] for a in c["command"][3:] + c.get("args", []))
        assert set(args) <= known, (name, set(args) - known)
        driver, seen = args["--driver-root"], args["--container-driver-root"]
        host_path = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
        mounts = {m["mountPath"]: host_path[m["name"]] for m in c["volumeMounts"]}
        assert mounts.get(seen) == driver, (name, seen, driver)
        assert "--dev-root" not in args, name  # the dev root follows: / under the driver root


# --- the distribution -------------------------------------------------------------------------


def _source_copy(dest: Path) -> Path:
    """The repository's files without build outputs, virtual environments or caches."""
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
    )
    shutil.copytree(REPO, dest, ignore=ignore)
    return dest


def test_wheel_and_sdist_install_and_run(tmp_path: Path, sim: simhost.SimulatedHost) -> None:
    """``python -m build`` (no isolation: the environment's setuptools, nothing fetched)
    makes an sdist and a wheel built from it; the wheel installs into a fresh virtual
    environment (dependencies from this environment, through a .pth file) and both
    console scripts run from there."""
    pytest.importorskip("build", reason="pip install -e '.[test]' installs build")
    src = _source_copy(tmp_path / "src")
    dist = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(dist.glob("ocihook-*-py3-none-any.whl"))
    sdists = list(dist.glob("ocihook-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(dist)
    import tarfile
    import zipfile

    with tarfile.open(sdists[0]) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for needed in (
        "packaging/systemd/ocihook-cdi-refresh.service.in",
        "packaging/udev/71-ocihook-cdi-refresh.rules",
        "packaging/hooks.d/ocihook-prestart.json.in",
        "packaging/hooks.d/ocihook-poststop.json.in",
        "specs/config.schema.json",
        "ocihook/schemas/config.toml.example",
        "ocihook/schemas/cdi.schema.json",
        "LICENSE",
    ):
        assert needed in names, needed
    with zipfile.ZipFile(wheels[0]) as z:
        wnames = set(z.namelist())
        scripts = {
            n.rsplit("/", 1)[1]: z.read(n).decode()
            for n in wnames
            if n.startswith("ocihook-0.1.0.data/scripts/")
        }
        metadata = z.read("ocihook-0.1.0.dist-info/METADATA").decode()
        license_text = z.read("ocihook-0.1.0.dist-info/licenses/LICENSE")
    # what docs/operations/install.md promises the wheel carries: every schema, the example, py.typed
    for data in (
        "ocihook/schemas/cdi.schema.json",
        "ocihook/schemas/config.schema.json",
        "ocihook/schemas/plan.schema.json",
        "ocihook/schemas/config.toml.example",
        "ocihook/py.typed",
    ):
        assert data in wnames, data
    assert license_text == Path(REPO, "LICENSE").read_bytes()
    assert license_text.split(b"\n")[1].strip() == b"Apache License"
    assert "License-Expression: Apache-2.0\n" in metadata
    assert "License-File: LICENSE\n" in metadata
    # the commands are scripts, not generated launchers (which import re on every
    # container start); sh starts the python3 beside them with -I (pip would drop a flag
    # after "#!python"), and pip leaves a "#!/bin/sh" line as it is
    assert sorted(scripts) == ["nvidia-container-runtime-hook", "ocihook", "ocihook-runtime"]
    head = "#!/bin/sh\n''':'\n"
    assert all(text.startswith(head) for text in scripts.values()), scripts
    assert all('exec "$d/python3" -I -S "$0" "$@"\n' in text for text in scripts.values())
    # each ends in the program function that leaves a start path without finalization,
    # and falls back to the entry point an older ocihook has
    for name, module, function, entry in (
        ("ocihook", "ocihook._main", "run", "main"),
        ("ocihook-runtime", "ocihook.runtime", "run", "main"),
        ("nvidia-container-runtime-hook", "ocihook._main", "run_nvidia_hook", "nvidia_hook_main"),
    ):
        tail = scripts[name][scripts[name].rindex("\ntry:\n") :]
        assert f"    from {module} import {function}\n" in tail
        assert f"    from {module} import {entry}\n" in tail
        assert tail.endswith(f"\n{function}()\n")
    assert not any("import re" in text for text in scripts.values())
    assert not any(n.endswith(".dist-info/entry_points.txt") for n in wnames)

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--disable-pip-version-check", str(wheels[0])],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # dependencies (click, jsonschema, PyYAML, pyelftools, tomlkit) from this environment
    Path(site, "zz-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    env = {"PATH": f"{venv / 'bin'}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(tmp_path)}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, capture_output=True, text=True, env=env, timeout=60, cwd=tmp_path
        )

    for name in scripts:
        with open(venv / "bin" / name) as f:
            assert f.read() == scripts[name], name  # installed unchanged
    where = run(str(python), "-c", "import ocihook; print(ocihook.__file__)")
    assert where.stdout.startswith(site + "/ocihook/"), where
    out = run(str(venv / "bin/ocihook"), "--version")
    assert out.returncode == 0 and "0.1.0" in out.stdout, out
    out = run(
        str(venv / "bin/ocihook"),
        "info",
        "--json",
        "--driver-root",
        sim.root,
        "--dev-root",
        sim.root,
    )
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["gpus"]) == len(sim.gpus)
    out = run(str(venv / "bin/ocihook"), "config", "default")  # package data
    assert out.returncode == 0 and "# runtimes = " in out.stdout
    # the schemas are found in the installed package (jsonschema checks)
    (tmp_path / "config.toml").write_text('log-level = "loud"\n')
    out = run(str(venv / "bin/ocihook"), "config", "check", "--config", "config.toml")
    assert out.returncode == 10, out
    assert out.stderr.startswith(f"{tmp_path}/config.toml: schema: $.log-level: 'loud' is not"), out
    gen = run(
        str(venv / "bin/ocihook"), "cdi", "generate", "--driver-root", sim.root,
        "--dev-root", sim.root, "--output", "nvidia.yaml",
    )  # fmt: skip
    assert gen.returncode == 0, gen.stderr
    out = run(str(venv / "bin/ocihook"), "cdi", "validate", "nvidia.yaml")
    assert out.returncode == 0 and out.stdout.startswith("nvidia.yaml: ok: "), out
    out = run(str(venv / "bin/ocihook"), "list", "-l", "--check", "--driver-root", sim.root,
              "--dev-root", sim.root)  # fmt: skip
    assert out.returncode == 0 and "libcuda.so" in out.stdout, out
    out = run(str(venv / "bin/ocihook-runtime"), "--help")
    assert out.returncode == 0 and out.stdout.startswith("usage: ocihook-runtime")
    # Docker's entry point, and the isolated script install docker-hook writes for dockerd
    out = run(str(venv / "bin/nvidia-container-runtime-hook"), "poststop")
    assert out.returncode == 0, out.stderr
    out = run(str(venv / "bin/ocihook"), "install", "docker-hook", "--bin-dir", str(tmp_path / "d"))
    assert out.returncode == 0, out.stderr
    out = run(str(tmp_path / "d" / "nvidia-container-runtime-hook"), "nope")
    assert out.returncode == 2 and "valid stages: prestart" in out.stderr, out
    # a pass-through to a stand-in runtime
    fake = tmp_path / "bin" / "runc"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "stand-in runc: $*"\n')
    fake.chmod(0o755)
    env["PATH"] = f"{fake.parent}:{env['PATH']}"
    out = run(str(venv / "bin/ocihook-runtime"), "--root", "/r", "state", "cid")
    assert out.returncode == 0 and out.stdout == "stand-in runc: --root /r state cid\n", out
    # the hooks it registers run with the fresh environment's interpreter
    out = run(
        str(venv / "bin/ocihook"), "runtime", "configure", "--runtime", "podman",
        "--config", str(tmp_path / "hook.json"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    hook = json.loads((tmp_path / "hook.json").read_text())["hook"]
    assert hook["path"] == hook["args"][0] and hook["path"].startswith(str(venv))
    out = run(
        str(venv / "bin/ocihook"), "runtime", "configure", "--runtime", "docker",
        "--config", str(tmp_path / "daemon.json"),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    daemon = json.loads((tmp_path / "daemon.json").read_text())
    assert daemon["runtimes"]["ocihook"]["path"] == str(venv / "bin/ocihook-runtime")


def _launcher_probe(venv: Path, tail: str) -> subprocess.CompletedProcess[str]:
    """``packaging/bin/ocihook`` copied into ``venv``'s bin with its program (the import
    of ocihook and the call, from the last ``try:``) replaced by ``tail``, run as a user
    runs a command."""
    with open(os.path.join(PACKAGING, "bin", "ocihook")) as f:
        text = f.read()
    assert text.endswith("\nrun()\n")
    probe = venv / "bin" / "probe"
    probe.write_text(text[: text.rindex("\ntry:\n") + 1] + tail)
    probe.chmod(0o755)
    return subprocess.run(
        [str(probe)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )


@pytest.mark.parametrize(
    ("command", "module", "entry"),
    [
        ("ocihook", "_main", "main"),
        ("ocihook-runtime", "runtime", "main"),
        ("nvidia-container-runtime-hook", "_main", "nvidia_hook_main"),
    ],
)
def test_launcher_runs_an_older_ocihook(
    tmp_path: Path, command: str, module: str, entry: str
) -> None:
    """A command newer than the ocihook beside it (an upgrade cut short, a downgraded
    library) runs the entry point that ocihook has: its output and exit status, through
    the interpreter's exit."""
    venv = tmp_path / "venv"
    lib = bare_venv(venv)
    (lib / "ocihook").mkdir()
    (lib / "ocihook" / "__init__.py").write_text("")
    (lib / "ocihook" / f"{module}.py").write_text(
        f"import sys\ndef {entry}():\n    print('older', sys.argv[1:])\n    return 3\n"
    )
    script = venv / "bin" / command
    shutil.copy(os.path.join(PACKAGING, "bin", command), script)
    script.chmod(0o755)
    proc = subprocess.run(
        [str(script), "hook", "x"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
    )
    assert (proc.returncode, proc.stdout) == (3, "older ['hook', 'x']\n"), proc.stderr


def test_launcher_runs_site_only_when_needed(tmp_path: Path) -> None:
    """The commands start with -I -S: in a virtual environment that holds ocihook, its
    site-packages is on sys.path without site; a module only a .pth file's directory
    holds is still found (site runs then); without ocihook there, site runs at once."""
    venv = tmp_path / "venv"
    lib = bare_venv(venv)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "zz_only_by_pth.py").write_text("VALUE = 42\n")
    (lib / "zz-extra.pth").write_text(f"{extra}\n")
    check = "print('site' in sys.modules, str(sys.path[-1]))\n"
    # no ocihook in the environment (an editable install, Debian's python): site at once
    proc = _launcher_probe(venv, "import sys\n" + check)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "True"
    (lib / "ocihook").mkdir()
    (lib / "ocihook" / "__init__.py").write_text("")
    proc = _launcher_probe(venv, "import ocihook\n" + check)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", str(lib)]
    proc = _launcher_probe(
        venv, "import ocihook, zz_only_by_pth\nprint(zz_only_by_pth.VALUE)\n" + check
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[:2] == ["42", "True"]
    proc = _launcher_probe(venv, "import zz_not_anywhere\n")
    assert (
        proc.returncode == 1
        and "ModuleNotFoundError: No module named 'zz_not_anywhere'" in proc.stderr
    )


def test_launcher_finds_the_debian_packages_directory_without_site(tmp_path: Path) -> None:
    """Debian's layout (the package's ``/usr/bin/python3`` and
    ``/usr/lib/python3/dist-packages``): an interpreter ``<prefix>/bin/python3`` with
    ocihook in ``<prefix>/lib/python3/dist-packages`` gets that directory on sys.path
    without site; an import nothing there satisfies still runs site first."""
    prefix = tmp_path / "usr"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python3").symlink_to(sys.executable)
    dist = prefix / "lib" / "python3" / "dist-packages"
    (dist / "ocihook").mkdir(parents=True)
    (dist / "ocihook" / "__init__.py").write_text("")
    check = "print('site' in sys.modules, str(sys.path[-1]))\n"
    proc = _launcher_probe(prefix, "import ocihook\n" + check)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", str(dist)]
    proc = _launcher_probe(
        prefix,
        "import ocihook\ntry:\n    import zz_not_anywhere\nexcept ImportError:\n    pass\n" + check,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "True"
    shutil.rmtree(dist / "ocihook")  # not the package's directory: site at once
    proc = _launcher_probe(prefix, "import sys\n" + check)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "True"


def test_launcher_site_runs_before_hook_directories_are_named(tmp_path: Path) -> None:
    """A command that deferred site runs it before ocihook names the directories of a hook
    it registers: a directory only a .pth file adds is among them."""
    venv = tmp_path / "venv"
    lib = bare_venv(venv)
    extra = tmp_path / "extra"
    extra.mkdir()
    (lib / "zz-extra.pth").write_text(f"{extra}\n")
    (lib / "ocihook").symlink_to(os.path.join(REPO, "ocihook"))
    proc = _launcher_probe(
        venv,
        "import ocihook\nprint('site' in sys.modules)\n"
        "from ocihook.config.options import start_path_dirs\n"
        f"print({str(extra)!r} in start_path_dirs(), 'site' in sys.modules)\n",
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True", "True"]


def test_launcher_site_on_demand_from_threads(tmp_path: Path) -> None:
    """Threads that each import a module only a .pth file's directory holds all find it:
    site runs once, whichever thread asks first."""
    venv = tmp_path / "venv"
    lib = bare_venv(venv)
    extra = tmp_path / "extra"
    extra.mkdir()
    for i in range(8):
        (extra / f"zz_pth_{i}.py").write_text(f"VALUE = {i}\n")
    (lib / "zz-extra.pth").write_text(f"{extra}\n")
    (lib / "ocihook").mkdir()
    (lib / "ocihook" / "__init__.py").write_text("")
    tail = (
        "import ocihook, threading, importlib\n"
        "out = {}\n"
        "def get(i):\n"
        "    out[i] = importlib.import_module(f'zz_pth_{i}').VALUE\n"
        "ts = [threading.Thread(target=get, args=(i,)) for i in range(8)]\n"
        "[t.start() for t in ts]\n"
        "[t.join() for t in ts]\n"
        "print(sorted(out.values()), sys.path.count(" + repr(str(extra)) + "))\n"
    )
    proc = _launcher_probe(venv, tail)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{list(range(8))} 1"
