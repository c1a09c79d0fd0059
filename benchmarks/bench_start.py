"""Start-up cost of ocihook on a container's start path, as ratios to the bare interpreter.

Measures, in one run and with the same interpreter (``sys.executable``, the real binary of
the environment ocihook is installed in — never a pyenv-style shim):

* ``bare``: ``python -I -c pass``;
* ``hook, no GPU``: the registered hook command (``ocihook hook prestart``) on a bundle whose
  container asks for no GPU — what every non-GPU container pays;
* ``hook, no GPU, debug log``: the same with a configuration that logs at debug level
  (``--config``): the fast exit then appends one line saying why (no target; reported);
* ``runtime, no GPU``: ``ocihook-runtime create`` (the installed command, as an engine runs
  it) on that bundle, exec'ing a stand-in ``runc`` (``/bin/true``) through ``env -i
  PATH=...`` — what the wrapper runtime adds to every non-GPU container start;
* ``edit, 8 GPUs``: spec mode (``ocihook edit``) giving all 8 GPUs of the realistic 535.261.03
  host (utility+compute) to a bundle, ``config.json`` restored before each run;
* ``edit, AMD all``: spec mode giving ``AMD_VISIBLE_DEVICES=all`` (five GPU entries and
  ``/dev/kfd``) of the simulated MI210-class host (:func:`ocihook.sim.vendors.build_amd`), no
  target of its own (reported beside the NVIDIA edit);
* peak memory (maximum resident set size) of each, measured by GNU ``time``.

Targets (issue 2): no-GPU hook <= 1.5x, 8-GPU edit <= 3x, peak memory <= 50 MiB; the
wrapper runtime's no-GPU start <= 1.5x as the hook's (issue 7).

Usage: ``python benchmarks/bench_start.py [--runs N] [--host DIR] [--check]``. Without
``--host`` the realistic host built by ``fixtures/realistic/build.py`` is used, or the
built-in simulated host when that is missing (said in the output). ``--check`` exits 1 when
a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TARGETS = {"hook, no GPU": 1.5, "runtime, no GPU": 1.5, "edit, 8 GPUs": 3.0}
MEMORY_TARGET_MIB = 50.0


def _hook_command() -> list[str]:
    from ocihook.config.options import hook_command

    return list(hook_command())


def _run_once(argv: list[str], stdin: bytes) -> float:
    """Run ``argv`` once and return its wall time in seconds."""
    start = time.perf_counter()
    proc = subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"{argv} failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}"
        )
    return elapsed


def _peak_mib(argv: list[str], stdin: bytes) -> float | None:
    """Peak resident memory of ``argv`` in MiB, measured by GNU time (``%M``).

    A wrapper is needed: ``ru_maxrss`` of a child forked from this (larger) Python process
    keeps the parent's high-water mark across exec. ``None`` when GNU time is missing
    (Debian package ``time``).
    """
    gnu_time = shutil.which("time") or (
        "/usr/bin/time" if os.path.exists("/usr/bin/time") else None
    )
    if gnu_time is None:
        return None
    proc = subprocess.run(
        [gnu_time, "-f", "OCIHOOK-PEAK-KB %M", *argv],
        input=stdin,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    for line in proc.stderr.decode(errors="replace").splitlines():
        if line.startswith("OCIHOOK-PEAK-KB "):
            return int(line.split()[1]) / 1024.0
    return None


def _measure(
    argv: list[str], stdin: bytes, runs: int, before: object = None
) -> tuple[float, float | None]:
    times = []
    for _ in range(runs):
        if callable(before):
            before()
        times.append(_run_once(argv, stdin))
    peaks = []
    for _ in range(3):
        if callable(before):
            before()
        peaks.append(_peak_mib(argv, stdin))
    known = [p for p in peaks if p is not None]
    return (statistics.median(times) if times else 0.0), (max(known) if known else None)


def _realistic_root() -> str | None:
    cache = os.environ.get("OCIHOOK_CACHE") or os.path.expanduser("~/.cache/ocihook")
    root = os.path.join(cache, "realistic-535.261.03", "root")
    return root if os.path.exists(os.path.join(root, ".ocihook-fixture.json")) else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="runs per measurement (30)")
    ap.add_argument("--host", help="host tree used as driver root and dev root")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ns = ap.parse_args()

    from ocihook.sim import host as simhost
    from ocihook.sim.demo import default_config

    work = tempfile.mkdtemp(prefix="ocihook-bench-")
    try:
        host = ns.host or _realistic_root()
        host_name = "realistic 535.261.03" if host and not ns.host else (ns.host or "")
        if host is None:
            host = simhost.build(os.path.join(work, "sim"), make_dev_nodes=False).root
            host_name = "simulated (realistic host not built)"

        def bundle(name: str, env: list[str]) -> str:
            path = os.path.join(work, name)
            os.makedirs(os.path.join(path, "rootfs"))
            with open(os.path.join(path, "config.json"), "w") as f:
                json.dump(default_config(["sh"], env), f, indent="\t")
            return path

        nogpu = bundle("nogpu", ["HOME=/root"])
        gpus = bundle(
            "gpus",
            ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility,compute"],
        )
        pristine = os.path.join(work, "gpus.config.json")
        shutil.copy(os.path.join(gpus, "config.json"), pristine)

        def restore() -> None:
            shutil.copy(pristine, os.path.join(gpus, "config.json"))

        from ocihook.sim import vendors as simvendors

        amd_host = simvendors.build_amd(os.path.join(work, "amd"), make_dev_nodes=False).root
        amd = bundle("amd", ["AMD_VISIBLE_DEVICES=all"])
        amd_pristine = os.path.join(work, "amd.config.json")
        shutil.copy(os.path.join(amd, "config.json"), amd_pristine)

        def restore_amd() -> None:
            shutil.copy(amd_pristine, os.path.join(amd, "config.json"))

        state = json.dumps(
            {"ociVersion": "1.0.2", "id": "bench", "status": "creating", "pid": 1, "bundle": nogpu}
        ).encode()
        cmd = _hook_command()
        debug_conf = os.path.join(work, "debug.toml")
        with open(debug_conf, "w") as f:
            f.write(f'log-file = "{os.path.join(work, "ocihook.core.log")}"\nlog-level = "debug"\n')
        fakebin = os.path.join(work, "bin")
        os.makedirs(fakebin)
        os.symlink(shutil.which("true") or "/bin/true", os.path.join(fakebin, "runc"))
        wrapper = os.path.join(os.path.dirname(sys.executable), "ocihook-runtime")
        cases = {
            "bare": ([sys.executable, "-I", "-c", "pass"], b"", None),
            "hook, no GPU": ([*cmd, "hook", "prestart"], state, None),
            "hook, no GPU, debug log": (
                [*cmd, "hook", "prestart", "--config", debug_conf],
                state,
                None,
            ),
            "runtime, no GPU": (
                ["env", "-i", f"PATH={fakebin}", wrapper, "create", "-b", nogpu, "bench"],
                b"",
                None,
            ),
            "edit, 8 GPUs": (
                [*cmd, "edit", "-b", gpus, "--driver-root", host, "--dev-root", host],
                b"",
                restore,
            ),
            "edit, AMD all": (
                [*cmd, "edit", "-b", amd, "--driver-root", amd_host, "--dev-root", amd_host],
                b"",
                restore_amd,
            ),
        }
        # warm the page cache once
        for argv, stdin, before in cases.values():
            _measure(argv, stdin, 2, before)
        # Round-robin over the cases, so that drift in the machine's load (2 shared cores)
        # hits every case alike instead of biasing whichever ran first.
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(ns.runs):
            for name, (argv, stdin, before) in cases.items():
                if callable(before):
                    before()
                times[name].append(_run_once(argv, stdin))
        results = {}
        for name, (argv, stdin, before) in cases.items():
            results[name] = (statistics.median(times[name]), _measure(argv, stdin, 0, before)[1])
        restore()
        _run_once(cases["edit, 8 GPUs"][0], b"")
        with open(os.path.join(gpus, "config.json")) as f:
            edited = json.load(f)
        n_gpu_nodes = sum(
            1 for d in edited["linux"]["devices"] if d["path"][len("/dev/nvidia") :].isdigit()
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    bare = results["bare"][0]
    print(f"interpreter: {sys.executable} (Python {sys.version.split()[0]})")
    print(f"host: {host_name}; {ns.runs} runs each, median wall time; edit gave {n_gpu_nodes} GPUs")
    print(f"{'case':24} {'median ms':>10} {'ratio':>7} {'target':>7} {'peak MiB':>9}")
    ok = True
    figures = {}
    for name, (t, mib) in results.items():
        ratio = t / bare
        target = TARGETS.get(name)
        miss = (target is not None and ratio > target) or (mib or 0.0) > MEMORY_TARGET_MIB
        ok = ok and not miss
        figures[name] = {
            "ms": round(t * 1000, 2),
            "ratio": round(ratio, 2),
            "peak_mib": None if mib is None else round(mib, 1),
        }
        shown = "n/a" if mib is None else f"{mib:.1f}"
        print(
            f"{name:24} {t * 1000:10.1f} {ratio:7.2f} "
            f"{'<=' + str(target) if target else '':>7} {shown:>9}" + ("  MISSED" if miss else "")
        )
    print(f"peak memory target: <= {MEMORY_TARGET_MIB:.0f} MiB")
    if ns.json:
        print(json.dumps(figures))
    return 1 if ns.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
