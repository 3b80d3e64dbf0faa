"""`fleet()`, the listing behind `host list`, over many pages of a real dev server's visibility.

Pages of two rows, so a handful of workflows take several pages: every entity comes back once,
sorted, whatever the order pages arrive in and although the next page is asked for before the
last one is decoded; progress is told after each page; `--phase` filters on the server. The
workflows run on a task queue no worker polls (they stay Running with the attributes they were
started with, as `bench/bench_host_list.py` does); the join of real operations to their entity
is covered by tests/test_cli_host_decide.py.
"""

from __future__ import annotations

import asyncio
import os
import pty
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sim_support import start_dev_server
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from contracts import names
from metalflow.cli.host_list import fleet

HOSTS = [f"node-{i:02d}" for i in (7, 3, 11, 0, 5, 9, 1)]  # started out of order
AWAITING = {"node-03", "node-09"}


@pytest.fixture(scope="module")
async def listed(lifeline_bin: Path) -> AsyncIterator[Client]:
    """A dev server of this module's own (`fleet` lists the whole namespace) with the entities."""
    env = await start_dev_server(lifeline_bin)
    try:
        since = datetime(2026, 11, 23, 6, 0, tzinfo=UTC)
        for host in HOSTS:
            phase = "awaiting-approval" if host in AWAITING else "idle"
            attributes = TypedSearchAttributes(
                [
                    SearchAttributePair(names.HOST_ID, host),
                    SearchAttributePair(names.OPERATION, names.HOST),
                    SearchAttributePair(names.PHASE, phase),
                    SearchAttributePair(names.SITE, "paging"),
                    SearchAttributePair(names.PHASE_SINCE, since),
                    *([SearchAttributePair(names.INSTANCE, f"i-{host}")] if host in AWAITING else []),
                ]
            )
            await env.client.start_workflow(
                "HostWorkflow",
                id=names.host_workflow_id(host),
                task_queue="nobody-polls",
                search_attributes=attributes,
            )
        for _ in range(300):  # visibility follows the starts a moment later
            if (await env.client.count_workflows(f'{names.OPERATION.name} = "host"')).count == len(HOSTS):
                break
            await asyncio.sleep(0.1)
        yield env.client
    finally:
        await env.shutdown()


async def test_every_host_once_sorted_across_pages(listed: Client) -> None:
    told: list[int] = []
    rows, requests = await fleet(listed, page_size=2, progress=told.append)
    assert [row.host for row in rows] == sorted(HOSTS)
    assert {row.host: row.phase for row in rows} == {
        host: "awaiting-approval" if host in AWAITING else "idle" for host in HOSTS
    }
    assert rows[sorted(HOSTS).index("node-03")].instance == "i-node-03"
    assert all(
        row.site == "paging" and row.phase_since == datetime(2026, 11, 23, 6, 0, tzinfo=UTC) for row in rows
    )
    assert all(row.workflow_id is None for row in rows)  # no operation runs
    # 7 entities in pages of 2 (4 or 5: the server may end on an empty page), 1 empty page of
    # operations and 1 of closed entity runs holding the OFF mark; progress after each page, the
    # last one counting every row.
    assert 6 <= requests <= 7 and len(told) == requests
    assert told == sorted(told) and told[-1] == len(HOSTS)
    whole, one_request_each = await fleet(listed)
    assert whole == rows and one_request_each == 3


async def test_phase_is_filtered_by_the_server_page_by_page(listed: Client) -> None:
    rows, requests = await fleet(listed, "awaiting-approval", page_size=2)
    assert [row.host for row in rows] == sorted(AWAITING)
    # The server sent only the matching entities (1 or 2 pages), the matching operations and the
    # operations in flight (none: 1 empty page each): not the 7 entities in 4 pages.
    assert 3 <= requests <= 4
    assert await fleet(listed, "rebooting-host", page_size=2) == ([], 3)


def test_a_person_at_a_terminal_sees_the_rows_read_so_far(listed: Client, tmp_path: Path) -> None:
    """`metalflow host list` with stderr on a terminal counts the rows read, then clears the line
    before the table's summary; stdout (not a terminal) holds the table alone."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TEMPORAL_")}
    env["TEMPORAL_ADDRESS"] = listed.service_client.config.target_host
    env["METALFLOW_STATE_DIR"] = str(tmp_path)
    controller, terminal = pty.openpty()
    try:
        completed = subprocess.run(
            [str(Path(sys.executable).parent / "metalflow"), "host", "list"],
            stdout=subprocess.PIPE, stderr=terminal, env=env, timeout=120, check=False,
        )  # fmt: skip
        os.close(terminal)
        shown = b""
        while True:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the terminal's other end is closed and everything was read
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(controller)
    assert completed.returncode == 0
    assert completed.stdout.decode().splitlines()[1].startswith("node-00 ")
    said = shown.decode().replace("\r\n", "\n")
    counted = said.index(f"\rreading Temporal visibility: {len(HOSTS)} workflows")
    cleared = said.index("\r\x1b[K", counted)
    assert said.index(f"{len(HOSTS)} hosts, 0 with an operation in flight", cleared) > cleared, said
