"""``ocihook doctor``'s container layers with real runc on the simulated host: the
visibility layer PASSes (a busybox container ocihook edits, checked from inside), FAILs
when something between ocihook and the container drops the devices, the GPU layer is SKIP
(no real GPU here, never PASS), and the CUDA probe's interpreter really starts inside
the libc-less busybox container (it then reports that it found no libcuda, which a
utility-only container does not get)."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from support import need_root_and

from ocihook import doctor
from ocihook.core.hostroot import HostRoot
from ocihook.sim import host as simhost

pytestmark = pytest.mark.e2e


def _needs() -> None:
    need_root_and("runc", "busybox")


def _report(root: Path, tmp_path: Path, **kw: object) -> doctor.Report:
    return doctor.run_doctor(
        HostRoot.single(str(root)),
        config_root=str(tmp_path / "etc-root"),
        gpu_backend="procfs",
        workdir=str(tmp_path / "work"),
        **kw,  # type: ignore[arg-type]
    )


def test_visibility_passes_and_gpu_is_skip(tmp_path: Path) -> None:
    _needs()
    root = tmp_path / "host"
    sim = simhost.build(str(root))
    (tmp_path / "work").mkdir()
    env = tmp_path / "env"
    env.write_text("NVIDIA_VISIBLE_DEVICES=2\nNVIDIA_DRIVER_CAPABILITIES=compute,utility\n")
    report = _report(root, tmp_path, image_env=str(env))
    vis = [c for c in report.checks if c.layer == "visibility"]
    assert [c.status for c in vis] == ["PASS"], vis
    # nvidiactl, uvm, uvm-tools and GPU 2's node (minor 3 on the simulated host)
    assert sim.gpus[2].minor == 3
    assert vis[0].evidence.startswith(
        "runc container edited by ocihook: 4 device nodes with the right major:minor, "
        "10 libraries mounted ro,nosuid,nodev and readable, 10 links; "
        "ld.so.cache lists all 10 libraries"
    ), vis[0]
    gpu = [c for c in report.checks if c.layer == "gpu"]
    assert [(c.status, c.evidence) for c in gpu] == [
        ("SKIP", f"the dev root is {root}, not this machine's: no real GPU to run on")
    ]


def test_visibility_fails_when_devices_are_dropped(tmp_path: Path) -> None:
    _needs()
    root = tmp_path / "host"
    simhost.build(str(root))
    (tmp_path / "work").mkdir()
    # a "runtime" between ocihook and runc that loses the device entries
    wrapper = tmp_path / "runc-dropping-devices"
    wrapper.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        "b = args[args.index('--bundle') + 1] if '--bundle' in args else None\n"
        "if b:\n"
        "    p = os.path.join(b, 'config.json'); d = json.load(open(p))\n"
        "    d['linux']['devices'] = [x for x in d['linux'].get('devices', []) if x['path'] != '/dev/nvidiactl']\n"
        "    json.dump(d, open(p, 'w'))\n"
        f"os.execv({shutil.which('runc')!r}, ['runc', *args])\n"
    )
    wrapper.chmod(0o755)
    report = _report(root, tmp_path, runc=str(wrapper))
    vis = [c for c in report.checks if c.layer == "visibility"]
    assert len(vis) == 1 and vis[0].status == "FAIL", vis
    assert vis[0].evidence.startswith("/dev/nvidiactl: missing (want c3:ff)"), vis[0]
    assert vis[0].fix.startswith("check the engine registration")


def test_probe_interpreter_runs_inside_busybox(tmp_path: Path) -> None:
    _needs()
    root = tmp_path / "host"
    simhost.build(str(root))
    work = tmp_path / "work"
    work.mkdir()
    ctx = doctor.Context(HostRoot.single(str(root)))
    doctor.check_host(ctx, gpu_backend="procfs")
    ctx.facts["request_env"] = {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
    }
    from ocihook.sim.demo import find_busybox

    busybox = find_busybox()
    assert busybox is not None
    bundle, plan = doctor.prepare_bundle(ctx, str(work), busybox=busybox)
    assert plan is not None and not any("libcuda" in m.destination for m in plan.edits.mounts)
    result = doctor.run_probe(bundle, shutil.which("runc") or "runc", str(work / "runc"))
    assert result["python"] == sys.version.split()[0], result
    assert result["stage"] == "dlopen" and "libcuda.so.1" in result["error"], result
    assert result["ok"] is False
    doc = json.loads(Path(bundle, "config.json").read_text())
    binds = [m for m in doc["mounts"] if m["destination"].startswith(doctor.PROBE_DIR)]
    assert binds and all({"ro", "nosuid", "nodev"} <= set(m["options"]) for m in binds)
    assert os.path.realpath(sys.executable) in {m["source"] for m in binds}


def fake_libcuda(dest: Path) -> None:
    """tests/doubles/fake_libcuda.c built as ``dest`` (soname libcuda.so.1); skips without cc."""
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler for the libcuda stand-in (apt-get install gcc)")
    src = Path(__file__).resolve().parents[1] / "doubles/fake_libcuda.c"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(dest), str(src)], check=True
    )


def test_probe_runs_the_driver_api_inside_the_container(tmp_path: Path) -> None:
    """The GPU layer's whole path short of the hardware: the simulated host's libcuda
    replaced by a C stand-in (tests/doubles/fake_libcuda.c), the container edited by
    ocihook, the probe run in it with runc: it loads the libcuda ocihook mounted (through
    the container's ld.so.cache, the C library from /.ocihook-doctor), allocates, copies,
    launches and reads back."""
    _needs()
    from ocihook.sim.demo import find_busybox

    root = tmp_path / "host"
    sim = simhost.build(str(root))
    lib = root / sim.libdir.lstrip("/") / f"nvidia/current/libcuda.so.{sim.driver_version}"
    assert lib.is_file()
    fake_libcuda(lib)
    work = tmp_path / "work"
    work.mkdir()
    ctx = doctor.Context(HostRoot.single(str(root)))
    doctor.check_host(ctx, gpu_backend="procfs")
    ctx.facts["request_env"] = {"NVIDIA_VISIBLE_DEVICES": "0"}
    busybox = find_busybox()
    assert busybox is not None
    bundle, plan = doctor.prepare_bundle(ctx, str(work), busybox=busybox)
    assert any(m.source == str(lib) for m in plan.edits.mounts)
    result = doctor.run_probe(bundle, shutil.which("runc") or "runc", str(work / "runc"))
    assert result["ok"] is True, result
    assert result["name"] == "Fake GPU" and result["wrongWords"] == 0


def test_visibility_of_a_mig_device(tmp_path: Path) -> None:
    """A MIG device's capability nodes (/dev/nvidia-caps/...) are checked like the others."""
    _needs()
    root = tmp_path / "host"
    simhost.build(str(root))
    (tmp_path / "work").mkdir()
    env = tmp_path / "env"
    env.write_text("NVIDIA_VISIBLE_DEVICES=1:0\nNVIDIA_DRIVER_CAPABILITIES=utility\n")
    report = _report(root, tmp_path, image_env=str(env))
    vis = [c for c in report.checks if c.layer == "visibility"]
    assert [c.status for c in vis] == ["PASS"], vis
    # nvidiactl, GPU 1's node and the instance's two capability nodes
    assert vis[0].evidence.startswith("runc container edited by ocihook: 4 device nodes"), vis[0]


def test_gpu_check_kit_on_the_simulated_host(tmp_path: Path) -> None:
    """scripts/gpu-check run with a kit prepared beforehand (``scripts/gpu-check prepare``
    needs the package registries, so it is not run here: set OCIHOOK_GPU_KIT to the kit, or
    prepare .gpu-kit in the checkout): installs, runs doctor with every layer on the
    simulated host (GPU layer SKIP), compares list with ldconfig -p, exits 0."""
    import subprocess

    import jsonschema

    _needs()
    repo = Path(__file__).resolve().parents[2]
    kit = Path(os.environ.get("OCIHOOK_GPU_KIT") or repo / ".gpu-kit")
    if not (kit / "whl").is_dir():
        pytest.skip(f"no gpu-check kit at {kit}: run scripts/gpu-check prepare (needs registries)")
    root = tmp_path / "host"
    simhost.build(str(root))
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "OUT": str(out),
        "GPU_CHECK_ROOTS": str(root),
        "GPU_CHECK_DEV_ROOT": str(root),
        "GPU_CHECK_ARGS": f"--config-root {tmp_path / 'etc'}",
    }
    r = subprocess.run(
        ["bash", str(repo / "scripts/gpu-check"), "run", str(kit)],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:]
    lines = r.stdout.splitlines()
    assert f"PASS  doctor (driver root {root}): no check FAILed; gpu layer SKIP" in lines
    assert (
        f"PASS  ocihook list has every driver library of ldconfig -p (driver root {root})" in lines
    )
    assert (out / "report.txt").read_text() == r.stdout
    (record,) = out.glob("record-*.json")
    schema = json.loads((repo / "specs/doctor-record.schema.json").read_text())
    doc = json.loads(record.read_text())
    jsonschema.validate(doc, schema)
    assert doc["layers"]["visibility"] == "PASS" and doc["layers"]["gpu"] == "SKIP"
