"""CDI costs, as ratios to the bare interpreter start in the same run (issue 4, item 9).

Cases (same interpreter, ``sys.executable``; round-robin so that load drift hits all alike):

* ``bare``: ``python -I -c pass``;
* ``inject 8 GPUs (json)`` / ``(yaml)``: spec mode (``ocihook edit``, as registered: ``python
  -I -c ...``) on a bundle whose ``NVIDIA_VISIBLE_DEVICES`` names ``nvidia.com/gpu=0`` ...
  ``=7``, injected from the spec ``ocihook cdi generate`` wrote for the simulated 8-GPU host,
  ``config.json`` restored before each run. Target <= 2x (the JSON spec is the one measured
  against it; YAML costs PyYAML's import and parser and is shown for comparison);
* ``generate, realistic``: ``ocihook cdi generate --output`` for the realistic 535.261.03 host
  (the simulated host when it is not built; said in the output). Target <= 4x.

Usage (root): ``python benchmarks/bench_cdi.py [--runs N] [--check] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

from bench_start import _realistic_root, _run_once  # same directory: run as a script

TARGETS = {"inject 8 GPUs (json)": 2.0, "generate, realistic": 4.0}


def _run(argv: list[str]) -> float:
    return _run_once(argv, b"")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="runs per case (30)")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON too")
    ns = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (the simulated host's device nodes)")
        return 1

    from ocihook.config.options import hook_command
    from ocihook.sim import host as simhost
    from ocihook.sim.demo import default_config

    cmd = list(hook_command())
    cli = [sys.executable, "-I", "-m", "ocihook"]
    work = tempfile.mkdtemp(prefix="ocihook-bench-cdi-")
    try:
        # with its /dev nodes: injection refuses a spec whose device nodes are gone
        sim = simhost.build(os.path.join(work, "sim"), make_dev_nodes=True)
        real = _realistic_root()
        gen_root, gen_name = (real, "realistic 535.261.03") if real else (sim.root, "simulated")
        names = ",".join(f"nvidia.com/gpu={i}" for i in range(8))
        cases: dict[str, tuple[list[str], object]] = {
            "bare": ([sys.executable, "-I", "-c", "pass"], None)
        }
        restores = []
        for fmt in ("json", "yaml"):
            spec_dir = os.path.join(work, f"cdi-{fmt}")
            os.makedirs(spec_dir)
            root = ["--driver-root", sim.root, "--dev-root", sim.root]
            _run([*cli, "cdi", "generate", *root, "--output", f"{spec_dir}/nvidia.{fmt}"])
            cfg = os.path.join(work, f"config-{fmt}.toml")
            with open(cfg, "w") as f:
                f.write(f'cdi-spec-dirs = ["{spec_dir}"]\n')
            bundle = os.path.join(work, f"bundle-{fmt}")
            os.makedirs(os.path.join(bundle, "rootfs"))
            text = json.dumps(
                default_config(["sh"], [f"NVIDIA_VISIBLE_DEVICES={names}"]), indent="\t"
            )

            def restore(path: str = os.path.join(bundle, "config.json"), text: str = text) -> None:
                with open(path, "w") as f:
                    f.write(text)

            restore()
            restores.append(restore)
            argv = [*cmd, "edit", "-b", bundle, "--config", cfg]
            cases[f"inject 8 GPUs ({fmt})"] = (argv, restore)
        out = os.path.join(work, "generated.yaml")
        gen = [*cli, "cdi", "generate", "--driver-root", gen_root, "--dev-root", gen_root]
        cases["generate, realistic"] = ([*gen, "--output", out], None)

        for argv, before in cases.values():  # warm the page cache
            if callable(before):
                before()
            _run(argv)
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(ns.runs):
            for name, (argv, before) in cases.items():
                if callable(before):
                    before()
                times[name].append(_run(argv))
        restores[0]()
        _run(cases["inject 8 GPUs (json)"][0])
        with open(os.path.join(work, "bundle-json", "config.json")) as f:
            edited = json.load(f)
        injected = sum(1 for d in edited["linux"]["devices"] if d["path"][11:].isdigit())
        with open(out) as f:
            generated_devices = f.read().count("\n- name:")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    bare = statistics.median(times["bare"])
    print(f"interpreter: {sys.executable} (Python {sys.version.split()[0]})")
    print(
        f"{ns.runs} runs each, median wall time; injected {injected} GPU nodes; "
        f"generated {generated_devices} devices for the {gen_name} host"
    )
    print(f"{'case':22} {'median ms':>10} {'ratio':>7} {'target':>7}")
    ok = True
    figures = {}
    for name, samples in times.items():
        t = statistics.median(samples)
        ratio = t / bare
        target = TARGETS.get(name)
        miss = target is not None and ratio > target
        ok = ok and not miss
        figures[name] = {"ms": round(t * 1000, 2), "ratio": round(ratio, 2)}
        print(
            f"{name:22} {t * 1000:10.1f} {ratio:7.2f} {'<=' + str(target) if target else '':>7}"
            + ("  MISSED" if miss else "")
        )
    if ns.json:
        print(json.dumps(figures))
    return 1 if ns.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
