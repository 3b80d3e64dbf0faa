"""What one flush of the site watch sends (issue 37 item 2), without a server: the changes of a
host's DPUs that arrive between two flushes are ONE signal per waiter of that host, carrying the
host's whole state (both DPUs as they are now), whatever the number of watch events. The routing
and the cache are `activities/site_watch` (`SiteCache`, `Waiters.routes`); the flush itself,
end to end, is tests/test_site_watch.py."""

from __future__ import annotations

from typing import Any

from activities.site_watch.mirror import SiteCache
from activities.site_watch.waiters import Waiters
from contracts.models.dpf import DPFWaiter, WaiterNews


def dpu(host: str, index: int, phase: str, rv: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{host}-dpu-{index}", "uid": f"uid-{host}-{index}", "resourceVersion": str(rv)},
        "spec": {"dpuNodeName": f"node-{host}", "dpuDeviceName": f"{host}-dpu-{index}"},
        "status": {"phase": phase},
    }


def test_both_dpus_of_a_host_moving_between_two_flushes_are_one_signal_per_waiter() -> None:
    cache = SiteCache()
    dpus = cache.streams["dpus"]
    cache.replace(dpus, [dpu(h, i, "Ready", 1) for h in ("host-1", "host-2") for i in (0, 1)])
    waiters = Waiters()
    registered = (
        DPFWaiter(host_id="host-1", workflow_id="reprovision/host-1", run_id="r1", seq=1),
        DPFWaiter(host_id="host-2", workflow_id="reprovision/host-2", run_id="r2", seq=2),
    )
    waiters.apply(WaiterNews(seq=2, full=True, waiters=registered), cache)
    cache.dirty = set()  # the first flush (the welcome signals) went out
    cache.fresh = False

    # Four watch events before the next flush: both DPUs of host-1 move, then move again.
    for rv, phase in ((2, "Pending"), (4, "OS Installing")):
        cache.apply(dpus, "MODIFIED", dpu("host-1", 0, phase, rv))
        cache.apply(dpus, "MODIFIED", dpu("host-1", 1, phase, rv + 1))

    routes = waiters.routes(cache.dirty)
    assert routes == [("host-1", "reprovision/host-1", "r1")]  # one signal; none for host-2
    state = cache.state("host-1")
    assert [(d.name, d.phase) for d in state.dpus] == [
        ("host-1-dpu-0", "OS Installing"),
        ("host-1-dpu-1", "OS Installing"),
    ]


def test_a_host_whose_dpus_move_and_move_back_between_flushes_is_still_signalled() -> None:
    cache = SiteCache()
    dpus = cache.streams["dpus"]
    cache.replace(dpus, [dpu("host-1", i, "Ready", 1) for i in (0, 1)])
    cache.dirty, cache.fresh = set(), False
    cache.apply(dpus, "MODIFIED", dpu("host-1", 0, "Rebooting", 2))
    cache.apply(dpus, "MODIFIED", dpu("host-1", 0, "Ready", 3))
    assert cache.dirty == {"host-1"}  # a workflow that read in between learns it
