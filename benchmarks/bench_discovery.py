"""Discovery cost: ld.so.cache parsing beside ``ldconfig -p``, and full host discovery.

Prints, measured in one run (median of ``--runs``):

* in-process parse time of the machine's ``/etc/ld.so.cache`` and of the realistic
  535.261.03 host's cache (:func:`ocihook.linux.ldcache.parse`), with their entry counts;
* whole-process ``ldconfig -p`` (machine cache) and ``ldconfig -p -C`` (realistic cache);
* in-process full discovery of the realistic host (every capability, procfs backend);
* whole-process ``ocihook list`` on the realistic host, and ``python -I -c pass`` for
  scale.

Issue target: ``ocihook list`` within 2x of ``ldconfig -p`` on the same cache. A Python
process cannot meet it (the interpreter alone starts 10x slower than ldconfig answers);
the ratio is printed so the gap stays visible.

Usage: ``python benchmarks/bench_discovery.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def _median_call(fn: object, runs: int) -> float:
    assert callable(fn)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _median_proc(argv: list[str], runs: int) -> float:
    return _median_call(
        lambda: subprocess.run(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True
        ),
        runs,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ns = ap.parse_args()

    from ocihook.core.hostroot import HostRoot
    from ocihook.discovery.nvidia import discover
    from ocihook.linux import ldcache

    cache = os.environ.get("OCIHOOK_CACHE") or os.path.expanduser("~/.cache/ocihook")
    real = os.path.join(cache, "realistic-535.261.03", "root")
    if not os.path.exists(os.path.join(real, ".ocihook-fixture.json")):
        print(f"realistic host not built at {real}: run python fixtures/realistic/build.py")
        return 1
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    rows = []
    for label, path in (("machine", "/etc/ld.so.cache"), ("realistic", f"{real}/etc/ld.so.cache")):
        with open(path, "rb") as f:
            data = f.read()
        n = len(ldcache.parse(data))
        t = _median_call(lambda d=data: ldcache.parse(d), ns.runs)
        rows.append((f"parse {label} cache ({n} entries), in-process", t))
    t_ldp = _median_proc([ldconfig, "-p"], ns.runs)
    t_ldp_real = _median_proc([ldconfig, "-p", "-C", f"{real}/etc/ld.so.cache"], ns.runs)
    rows.append(("ldconfig -p (machine), whole process", t_ldp))
    rows.append(("ldconfig -p -C (realistic), whole process", t_ldp_real))
    root = HostRoot.single(real)
    rows.append(
        (
            "discover realistic host (all capabilities), in-process",
            _median_call(lambda: discover(root), ns.runs),
        )
    )
    t_list = _median_proc(
        [
            sys.executable,
            "-I",
            "-m",
            "ocihook",
            "list",
            "--gpu-backend",
            "procfs",
            "--driver-root",
            real,
            "--dev-root",
            real,
        ],
        max(5, ns.runs // 3),
    )
    rows.append(("ocihook list (realistic), whole process", t_list))
    t_bare = _median_proc([sys.executable, "-I", "-c", "pass"], ns.runs)
    rows.append(("python -I -c pass, whole process", t_bare))
    for label, t in rows:
        print(f"{label:58} {t * 1000:9.3f} ms")
    print(
        f"ocihook list / ldconfig -p -C: {t_list / t_ldp_real:.1f}x (target 2x; the bare "
        f"interpreter alone is {t_bare / t_ldp_real:.1f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
