"""The site watch's flush gathers a host's changes that come together (issue 37 Deliver 2,
`activities.site_watch.watch.gather_changes`): both DPUs of a host, written milliseconds apart,
go out as one signal; a stream of changes never holds a flush past its bound."""

from __future__ import annotations

import asyncio

from activities.site_watch.watch import FLUSH_GATHER_SECONDS, FLUSH_QUIET_SECONDS, gather_changes


async def test_a_change_milliseconds_after_the_first_joins_its_flush() -> None:
    changed, seen = asyncio.Event(), []

    async def second_dpu() -> None:
        await asyncio.sleep(0)  # the next turn of the loop: well within the quiet gap
        seen.append("dpu-1")
        changed.set()

    writer = asyncio.create_task(second_dpu())
    await gather_changes(changed, FLUSH_QUIET_SECONDS, FLUSH_GATHER_SECONDS)
    assert seen == ["dpu-1"]  # came before the flush: the flush carries both DPUs
    assert not changed.is_set()
    await writer


async def test_changes_that_keep_coming_flush_within_the_bound() -> None:
    changed = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def busy() -> None:  # a change on every turn of the loop: no quiet gap, whatever the load
        while True:
            await asyncio.sleep(0)
            changed.set()

    writer = asyncio.create_task(busy())
    began = loop.time()
    await gather_changes(changed, FLUSH_QUIET_SECONDS, FLUSH_GATHER_SECONDS)
    took = loop.time() - began
    writer.cancel()
    assert FLUSH_GATHER_SECONDS - 0.01 <= took < FLUSH_GATHER_SECONDS + 0.5


async def test_a_lone_change_waits_only_the_quiet_gap() -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()
    await gather_changes(asyncio.Event(), FLUSH_QUIET_SECONDS, FLUSH_GATHER_SECONDS)
    assert loop.time() - began < FLUSH_GATHER_SECONDS
