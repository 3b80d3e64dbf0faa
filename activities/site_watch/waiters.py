"""Who waits on which host, as one attempt of the watch knows it, and signalling them.

The registry itself is the site watch workflow's state (`workflows.site_watch.workflow`); an
attempt learns it through its poll (`SiteWatchActivities._poll`) into `Waiters`: the whole
registry first, then each new entry, whose host becomes dirty so that the next flush sends the
new waiter its welcome (see `activities.site_watch`, "Ordering"). A flush signals each dirty
host's state to the workflow ids registered for it, by id (the run now current). A signal that
answers NotFound (the workflow has closed) removes the entry here and in the workflow (signal
`dpf_waiter` with `gone`), so the registry does not grow for ever.
"""

from __future__ import annotations

import asyncio
import logging

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.site_watch.mirror import SiteCache
from activities.site_watch.start import SiteWatchHandle
from contracts import workflow_api
from contracts.models.dpf import DPF_STATE_CHANGED_SIGNAL, DPFWaiter, HostDPFState, WaiterNews

log = logging.getLogger("activities.site_watch")

SIGNALS_IN_FLIGHT = 64  # concurrent signal RPCs of one flush
SIGNAL_ATTEMPTS = 4


class Waiters:
    """The registry as this attempt knows it: host -> {workflow id: run id}, and the registry's
    sequence number it has applied (`seq`; `synced` once the whole registry was fetched)."""

    def __init__(self, known: int = 0) -> None:
        self.by_host: dict[str, dict[str, str]] = {}
        self.seq = known  # entries up to this have had their welcome (the checkpoint's waiters_seq)
        self.synced = False

    def after(self) -> int:
        """What to poll for: everything (-1) until the registry was fetched, then the news."""
        return self.seq if self.synced else -1

    def apply(self, news: WaiterNews, cache: SiteCache) -> None:
        """Take a poll's answer; the hosts of new entries become dirty (their welcome signal)."""
        if news.full:
            self.by_host = {}
        for waiter in news.waiters:
            entries = self.by_host.setdefault(waiter.host_id, {})
            entries[waiter.workflow_id] = waiter.run_id
            if not news.full or waiter.seq > self.seq:
                cache.dirty.add(waiter.host_id)
        self.seq = max(self.seq, news.seq) if not news.full else news.seq
        self.synced = True

    def routes(self, hosts: set[str]) -> list[tuple[str, str, str]]:
        """`(host, workflow id, run id)` for each waiter of `hosts`."""
        return [(h, wid, run) for h in sorted(hosts) for wid, run in self.by_host.get(h, {}).items()]

    def forget(self, waiter: DPFWaiter) -> None:
        """Drop an entry whose workflow has closed (unless a newer run replaced it meanwhile)."""
        entries = self.by_host.get(waiter.host_id, {})
        if entries.get(waiter.workflow_id) == waiter.run_id:
            del entries[waiter.workflow_id]
            if not entries:
                del self.by_host[waiter.host_id]


async def signal_waiters(
    temporal: Client,
    own: SiteWatchHandle,
    waiters: Waiters,
    routes: list[tuple[str, str, str, HostDPFState]],
) -> None:
    """Signal each state to its waiter; a waiter that answers NotFound is removed (here, and from
    the registry of `own`, this run of the site watch workflow).

    Raises:
        RPCError: a signal still failed after `SIGNAL_ATTEMPTS` (the attempt fails; the next
            resumes from the checkpoint).
    """
    limit = asyncio.Semaphore(SIGNALS_IN_FLIGHT)
    gone: list[DPFWaiter] = []

    async def one(host: str, workflow_id: str, run_id: str, state: HostDPFState) -> None:
        async with limit:
            for attempt in range(SIGNAL_ATTEMPTS):
                try:
                    await temporal.get_workflow_handle(workflow_id).signal(DPF_STATE_CHANGED_SIGNAL, state)
                    return
                except RPCError as err:
                    if err.status == RPCStatusCode.NOT_FOUND:  # the workflow has closed
                        gone.append(
                            DPFWaiter(host_id=host, workflow_id=workflow_id, run_id=run_id, gone=True)
                        )
                        return
                    if attempt + 1 == SIGNAL_ATTEMPTS:
                        raise  # the attempt fails; the next resumes from the checkpoint
                    await asyncio.sleep(0.2 * 2**attempt)

    await asyncio.gather(*(one(*route) for route in routes))
    for waiter in gone:
        waiters.forget(waiter)
        try:
            await own.signal(workflow_api.SiteDPFWatchWorkflow.dpf_waiter, waiter)
        except RPCError as err:  # this run has closed: the next run's registry drops it at its NotFound
            log.info(
                "could not remove the closed waiter %s of %s: %s", waiter.workflow_id, waiter.host_id, err
            )
