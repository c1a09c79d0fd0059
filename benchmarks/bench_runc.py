"""What ocihook's hook adds to a container start, measured with real runc.

In one run, interleaved (median of ``--runs``): ``runc run`` of a busybox container that
exits at once, without a hook, with ocihook's prestart hook giving it 8 GPUs
(utility,compute,graphics on the realistic 535.261.03 host), and with spec mode (the
``ocihook edit`` before ``runc run`` plus its createContainer hook); and the bare
interpreter start (``python -I -c pass``) for scale.

Target (issue: live hook mode): what the hook adds <= 3x the bare interpreter start.

Usage (as root): ``python benchmarks/bench_runc.py [--runs N]``.
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
import uuid


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ns = ap.parse_args()
    if os.geteuid() != 0 or shutil.which("runc") is None:
        print("needs root and runc")
        return 1
    from ocihook.config.options import hook_command
    from ocihook.sim.demo import make_busybox_bundle

    cache = os.environ.get("OCIHOOK_CACHE") or os.path.expanduser("~/.cache/ocihook")
    root = os.path.join(cache, "realistic-535.261.03", "root")
    if not os.path.exists(os.path.join(root, ".ocihook-fixture.json")):
        print(f"realistic host not built at {root}: run python fixtures/realistic/build.py")
        return 1
    work = tempfile.mkdtemp(prefix="ocihook-bench-runc-")
    env = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=utility,compute,graphics"]
    try:
        plain = make_busybox_bundle(os.path.join(work, "plain"), ["sh", "-c", "exit 0"], [])
        hooked = make_busybox_bundle(os.path.join(work, "hook"), ["sh", "-c", "exit 0"], env)
        spec = make_busybox_bundle(os.path.join(work, "spec"), ["sh", "-c", "exit 0"], env)
        cmd = [*hook_command(), "hook", "prestart", "--driver-root", root, "--dev-root", root]
        cfg = os.path.join(hooked, "config.json")
        with open(cfg) as f:
            doc = json.load(f)
        doc["hooks"] = {"prestart": [{"path": cmd[0], "args": cmd, "env": ["PATH=/usr/bin:/bin"]}]}
        with open(cfg, "w") as f:
            json.dump(doc, f)
        spec_cfg = os.path.join(spec, "config.json")
        with open(spec_cfg, "rb") as f:
            pristine = f.read()
        state = os.path.join(work, "state")
        edit = [*hook_command(), "edit", "-b", spec, "--driver-root", root, "--dev-root", root]

        def run(bundle: str) -> None:
            subprocess.run(
                ["runc", "--root", state, "run", "-b", bundle, f"b{uuid.uuid4().hex[:10]}"],
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )

        def run_spec() -> None:
            with open(spec_cfg, "wb") as f:
                f.write(pristine)
            subprocess.run(edit, check=True, stdout=subprocess.DEVNULL)
            run(spec)

        cases = {
            "bare interpreter": lambda: subprocess.run(
                [sys.executable, "-I", "-c", "pass"], check=True
            ),
            "runc run, no hook": lambda: run(plain),
            "runc run + prestart hook": lambda: run(hooked),
            "edit + runc run (spec mode)": run_spec,
        }
        times: dict[str, list[float]] = {k: [] for k in cases}
        for fn in cases.values():
            fn()  # warm up
        for _ in range(ns.runs):
            for name, fn in cases.items():
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    bare = med["bare interpreter"]
    for name, ms in med.items():
        print(f"{name:32} {ms:8.1f} ms")
    for name, target in (
        ("runc run + prestart hook", " (target 3x)"),
        ("edit + runc run (spec mode)", " (no target set)"),
    ):
        added = med[name] - med["runc run, no hook"]
        print(f"{name}: adds {added:.1f} ms = {added / bare:.2f}x the bare interpreter{target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
