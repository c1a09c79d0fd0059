"""Device plugin latencies on the simulated 8-GPU host (issue 16, item 6).

Cases, through the real gRPC unix sockets (kubelet's side is a minimal Registration
server and a DevicePlugin client in this process):

* ``Allocate (1 GPU)`` / ``Allocate (8 GPUs)``: one ``Allocate`` call, cdi-cri strategy;
* ``health change -> ListAndWatch``: a GPU's ``/dev/nvidia<minor>`` is renamed away (or
  back) and the time until the ListAndWatch stream delivers the new list is measured; the
  plugin's watch interval is 10 ms, so this is the polling period plus the push.

Needs root (the simulated device nodes are made with mknod) and ``ocihook[k8s]``.
Usage: ``python benchmarks/bench_k8s.py [--runs N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import statistics
import sys
import tempfile
import threading
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_k8s: needs root (mknod of the simulated GPU nodes)", file=sys.stderr)
        return 2
    import logging

    logging.getLogger("ocihook.k8s").setLevel(logging.ERROR)  # health-change warnings
    from ocihook.core.hostroot import HostRoot
    from ocihook.k8s import rpc
    from ocihook.k8s.api import deviceplugin_pb2 as dp
    from ocihook.k8s.deviceplugin import DevicePluginServer
    from ocihook.k8s.inventory import build_inventory
    from ocihook.sim import host as simhost

    with tempfile.TemporaryDirectory() as d:
        sim = simhost.build(os.path.join(d, "host"))
        plugin_dir = os.path.join(d, "dp")
        os.mkdir(plugin_dir)

        class Kubelet:
            def Register(self, request: object, context: object) -> object:
                return dp.Empty()

        kubelet = rpc.unix_server(os.path.join(plugin_dir, "kubelet.sock"))
        rpc.add_service(kubelet, rpc.REGISTRATION, Kubelet())
        inv = build_inventory(HostRoot.single(sim.root), hook_command=["ocihook"])
        server = DevicePluginServer(
            inv, plugin_dir=plugin_dir, cdi_dir=os.path.join(d, "cdi"), interval=0.01
        )
        server.start()
        plugin = server.plugin("nvidia.com/gpu")
        client = rpc.client(rpc.unix_channel(plugin.socket), rpc.DEVICE_PLUGIN)
        ids = [dev.id for dev in plugin.devices]
        results: dict[str, list[float]] = {}
        for label, want in (("Allocate (1 GPU)", ids[:1]), ("Allocate (8 GPUs)", ids)):
            request = dp.AllocateRequest()
            request.container_requests.add(devices_ids=want)
            client.Allocate(request, timeout=10)  # warm the channel
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                client.Allocate(request, timeout=10)
                times.append((time.perf_counter() - t0) * 1000)
            results[label] = times
        updates: queue.Queue[tuple[float, dict[str, str]]] = queue.Queue()

        def watch() -> None:
            for r in client.ListAndWatch(dp.Empty(), timeout=600):
                updates.put((time.perf_counter(), {x.ID: x.health for x in r.devices}))

        threading.Thread(target=watch, daemon=True).start()
        updates.get(timeout=10)
        node = os.path.join(sim.root, f"dev/nvidia{sim.gpus[3].minor}")
        times = []
        for n in range(min(args.runs, 100)):
            t0 = time.perf_counter()
            if n % 2 == 0:
                os.rename(node, node + ".gone")
            else:
                os.rename(node + ".gone", node)
            t1, _ = updates.get(timeout=10)
            times.append((t1 - t0) * 1000)
        results["health change -> ListAndWatch"] = times
        server.stop()
        kubelet.stop(0)
    summary = {
        k: {
            "median_ms": round(statistics.median(v), 3),
            "p95_ms": round(sorted(v)[int(len(v) * 0.95) - 1], 3),
            "runs": len(v),
        }
        for k, v in results.items()
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for k, v in summary.items():
            med, p95, runs = v["median_ms"], v["p95_ms"], v["runs"]
            print(f"{k:32s} median {med:8.3f} ms   p95 {p95:8.3f} ms   ({runs} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
