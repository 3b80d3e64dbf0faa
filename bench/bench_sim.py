"""Benchmark: the simulated site at fleet scale, as a separate process driven over HTTP.

Starts `python -m simulators serve` with N hosts x K DPUs (zero timings, initialised site),
then measures, from this process: start-up time, resident memory of the simulator, and
requests/s for Kubernetes list/get and Redfish GET of a system, with a bounded number of
concurrent requests. Prints one JSON object.

    python bench/bench_sim.py --hosts 1000 --dpus-per-host 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

NAMESPACE = "dpf-operator-system"


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _start(state_dir: Path, hosts: int, dpus: int) -> tuple[subprocess.Popen[bytes], dict[str, Any], float]:
    started = time.perf_counter()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "simulators",
            "serve",
            "--port",
            "0",
            "--state-dir",
            str(state_dir),
            "--hosts",
            str(hosts),
            "--dpus-per-host",
            str(dpus),
            "--timings",
            "zero",
            "--initialised",
        ],
        stdout=subprocess.DEVNULL,
    )
    info_path = state_dir / "sim.json"
    deadline = time.monotonic() + 300
    while not info_path.exists():
        if proc.poll() is not None:
            raise SystemExit(f"simulator exited with {proc.returncode} before serving")
        if time.monotonic() > deadline:
            proc.kill()
            raise SystemExit("simulator did not serve within 300 s")
        time.sleep(0.05)
    return proc, json.loads(info_path.read_text()), time.perf_counter() - started


async def _rate(
    client: httpx.AsyncClient,
    paths: list[str],
    total: int,
    concurrency: int,
    auth: dict[str, httpx.BasicAuth] | None = None,
) -> float:
    counter = iter(range(total))

    async def worker() -> None:
        for i in counter:
            path = paths[i % len(paths)]
            response = await client.get(path, auth=(auth or {}).get(path) or httpx.USE_CLIENT_DEFAULT)
            response.raise_for_status()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return total / (time.perf_counter() - started)


async def _measure(
    info: dict[str, Any], state_dir: Path, requests: int, concurrency: int
) -> dict[str, float]:
    import yaml

    site = yaml.safe_load((state_dir / "site.yaml").read_text())
    hosts = site["hosts"]
    base = info["url"]
    dpu_names = [f"node-{h['id']}-device-{d['id']}" for h in hosts for d in h["dpus"]]
    dpu_base = f"/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/{NAMESPACE}/dpus"
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    kubeconfig = yaml.safe_load(Path(info["kubeconfig"]).read_text())
    token = {"Authorization": f"Bearer {kubeconfig['users'][0]['user']['token']}"}  # the API needs it
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=60, headers=token) as client:
        # Each BMC names its system its own way (as real ones do): find it like a client would.
        auth: dict[str, httpx.BasicAuth] = {}
        system_paths: list[str] = []
        gate = asyncio.Semaphore(concurrency)

        async def discover(host: dict[str, Any]) -> None:
            creds = json.loads(Path(host["bmc"]["credentials"]["file"]).read_text())
            basic = httpx.BasicAuth(creds["username"], creds["password"])
            async with gate:
                # Each BMC is at the root of its own address (the site file's endpoint).
                endpoint = host["bmc"]["endpoint"]
                systems = (await client.get(f"{endpoint}/redfish/v1/Systems", auth=basic)).json()
            path = endpoint + systems["Members"][0]["@odata.id"]
            system_paths.append(path)
            auth[path] = basic

        await asyncio.gather(*(discover(h) for h in hosts))
        started = time.perf_counter()
        listing = (await client.get(dpu_base)).json()
        list_seconds = time.perf_counter() - started
        return {
            "dpus_listed": len(listing["items"]),
            "list_all_dpus_seconds": round(list_seconds, 3),
            "kube_get_dpu_per_s": round(
                await _rate(client, [f"{dpu_base}/{n}" for n in dpu_names], requests, concurrency)
            ),
            "redfish_get_system_per_s": round(await _rate(client, system_paths, requests, concurrency, auth)),
        }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--dpus-per-host", type=int, default=2)
    parser.add_argument("--requests", type=int, default=3000, help="requests per measured kind")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp)
        proc, info, startup = _start(state_dir, args.hosts, args.dpus_per_host)
        try:
            rss_idle = _rss_mb(proc.pid)
            figures = asyncio.run(_measure(info, state_dir, args.requests, args.concurrency))
            rss_after = _rss_mb(proc.pid)
        finally:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
    print(
        json.dumps(
            {
                "benchmark": "simulated-site",
                "hosts": args.hosts,
                "dpus_per_host": args.dpus_per_host,
                "startup_seconds": round(startup, 2),
                "rss_mb_idle": round(rss_idle, 1),
                "rss_mb_after_load": round(rss_after, 1),
                "concurrency": args.concurrency,
                **figures,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
