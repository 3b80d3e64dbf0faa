"""Benchmark the simulated BMCs: memory for a whole site's BMCs and GET Systems/<id> requests/s.

Runs the BMCs of `default_site(HOSTS, DPUS)` in a child process on 127.0.0.1 (so the client's
CPU and memory are not counted), then drives it with httpx from this process, and prints one
JSON object:

    python bench/bench_redfish.py [--hosts 1000] [--dpus-per-host 2] [--seconds 10] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used (from /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: str = "self") -> float:
    """Resident set size of a process, in MB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc status")


async def serve(hosts: int, dpus: int) -> None:
    """Child: build and serve the BMCs, report memory on stdout, serve until SIGTERM."""
    from simulators.events import Hub
    from simulators.faults import Faults
    from simulators.redfish import BMCs
    from simulators.redfish.standalone import credentials_for
    from simulators.site import default_site
    from simulators.timings import timings_for
    from simulators.violations import Violations

    rss_start = rss_mb()
    site = default_site(hosts, dpus)
    credentials = credentials_for(site)
    rss_site = rss_mb()
    bmcs = BMCs(site, Hub(), Faults("none"), timings_for("zero"), Violations(), credentials)
    await bmcs.serve()  # a port per BMC, as real BMCs each have an address of their own
    await bmcs.start()
    rss_bmcs = rss_mb()
    report = {
        "endpoints": {host.id: bmcs.endpoint(host.id) for host in site.hosts},
        "bmcs": len(bmcs.bmc_ids()),
        "rss_interpreter_and_imports_mb": round(rss_start, 1),
        "rss_site_model_mb": round(rss_site - rss_start, 1),
        "rss_bmcs_and_server_mb": round(rss_bmcs - rss_site, 1),
        "rss_total_mb": round(rss_bmcs, 1),
    }
    print(json.dumps(report), flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await bmcs.stop()


async def drive(endpoints: dict[str, str], hosts: int, seconds: float, concurrency: int) -> dict[str, Any]:
    """Parent: GET Systems/<id> on random host BMCs (basic auth) for `seconds`."""
    from simulators.redfish.host import PROFILES
    from simulators.site import DEFAULT_ROTATION

    targets = []
    for i in range(hosts):
        host_id = f"host-{i + 1:03d}"
        system_id = PROFILES[DEFAULT_ROTATION[i % len(DEFAULT_ROTATION)]].system_id
        url = f"{endpoints[host_id]}/redfish/v1/Systems/{system_id}"
        targets.append((url, ("admin", f"pw-{host_id}")))
    done = 0
    errors = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def worker(seed: int) -> None:
            nonlocal done, errors
            rng = random.Random(seed)
            while time.perf_counter() < deadline:
                path, auth = targets[rng.randrange(len(targets))]
                started = time.perf_counter()
                response = await client.get(path, auth=auth)
                latencies.append(time.perf_counter() - started)
                if response.status_code == 200 and response.json()["PowerState"] == "On":
                    done += 1
                else:
                    errors += 1

        began = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "requests": done,
        "errors": errors,
        "seconds": round(elapsed, 2),
        "requests_per_second": round(done / elapsed, 1),
        "latency_p50_ms": round(1000 * latencies[len(latencies) // 2], 2),
        "latency_p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 2),
        "concurrency": concurrency,
    }


async def traced_state(hosts: int, dpus: int) -> dict[str, float]:
    """Python heap taken by the BMCs alone (tracemalloc), idle and then busy.

    Busy: every BMC holds one open session and every host has power-cycled once (two power log
    entries and a finished transition), the most state a BMC keeps between client requests.
    """
    import tracemalloc

    from simulators.events import Hub
    from simulators.faults import Faults
    from simulators.redfish import BMCs
    from simulators.redfish.standalone import credentials_for
    from simulators.site import default_site
    from simulators.timings import timings_for
    from simulators.violations import Violations

    site = default_site(hosts, dpus)
    credentials = credentials_for(site)
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    bmcs = BMCs(site, Hub(), Faults("none"), timings_for("zero"), Violations(), credentials)
    idle = tracemalloc.get_traced_memory()[0] - base
    for bmc_id in bmcs.bmc_ids():
        bmcs.auth.create(bmc_id, *credentials[bmc_id])
    for host in site.hosts:
        host_bmc = bmcs.host_bmc(host.id)
        assert host_bmc is not None
        bmcs.power.reset(host_bmc, "ForceRestart", "")
    while any(bmcs.power_state(host.id) != "On" for host in site.hosts):
        await asyncio.sleep(0.01)
    busy = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    await bmcs.stop()
    return {"bmcs_idle_heap_mb": round(idle / 2**20, 2), "bmcs_busy_heap_mb": round(busy / 2**20, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--dpus-per-host", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.hosts, args.dpus_per_host))
        return
    child = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            "--hosts",
            str(args.hosts),
            "--dpus-per-host",
            str(args.dpus_per_host),
        ],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert child.stdout is not None
        memory = json.loads(child.stdout.readline())
        endpoints = memory.pop("endpoints")
        cpu_before = cpu_seconds(child.pid)
        load = asyncio.run(drive(endpoints, args.hosts, args.seconds, args.concurrency))
        served = load["requests"] + load["errors"]
        # The client (httpx) costs more CPU than the server: report the server's own cost too.
        server_cpu = cpu_seconds(child.pid) - cpu_before
        load["server_cpu_ms_per_request"] = round(1000 * server_cpu / max(1, served), 3)
        load["server_capacity_requests_per_cpu_second"] = (
            round(served / server_cpu, 1) if server_cpu else None
        )
        memory["rss_total_after_load_mb"] = round(rss_mb(str(child.pid)), 1)
        memory.update(asyncio.run(traced_state(args.hosts, args.dpus_per_host)))
        print(json.dumps({"memory": memory, "get_system": load}, indent=2))
    finally:
        child.terminate()
        child.wait(timeout=10)


if __name__ == "__main__":
    main()
