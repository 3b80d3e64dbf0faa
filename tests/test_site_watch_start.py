"""A new site watch signals only the hosts that changed since it was asked for (issue 11).

A fresh listing used to signal every host of the site to its 5 waiter ids, most of them workflows
that do not exist (~50,000 signal RPCs at 10,000 hosts). `ensure_site_watch` reads the API
server's resourceVersions before it creates the watch, and the watch resumes from them: every
workflow's own read is newer, so nothing it needs is lost, and unchanged hosts get no signal.
The signals are counted as the watch's Temporal client sends them (a client interceptor).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from sim_support import running_sim
from temporalio.client import Client, Interceptor, OutboundInterceptor, SignalWorkflowInput
from test_firmware_support import eventually, settings_for, site_file_with_prefix, site_worker

from activities.site_watch import SITE_WATCH_WORKFLOW, ensure_site_watch
from contracts import names
from contracts.models.dpf import DPF_NAMESPACE, DPF_STATE_CHANGED_SIGNAL, SiteWatchInput
from drivers.kube import load_configuration

HOSTS = [f"ss-{i:03d}" for i in range(1, 13)]
HOST_OF = {wid: host for host in HOSTS for wid in names.dpf_waiter_workflow_ids(host)}


class CountSignals(Interceptor):
    """Records the workflow id of every DPF state signal the client sends."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        sent = self.sent

        class Outbound(OutboundInterceptor):
            async def signal_workflow(self, input: SignalWorkflowInput) -> None:
                if input.signal == DPF_STATE_CHANGED_SIGNAL:
                    sent.append(input.id)
                await super().signal_workflow(input)

        return Outbound(next)


def hosts_signalled(sent: list[str]) -> Counter[str]:
    return Counter(HOST_OF[wid] for wid in sent)


async def test_a_new_watch_signals_only_hosts_changed_since_it_was_asked_for(
    client: Client, task_queue: str, tmp_path: Path
) -> None:
    site = site_file_with_prefix(tmp_path / "in", "ss", hosts=len(HOSTS), dpus_per_host=1)
    with running_sim(tmp_path / "sim", site_file=site, timings="zero", initialised=True) as sim:
        counter = CountSignals()
        counting = Client(**{**client.config(), "interceptors": [counter]})
        watch_id = names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue)
        configuration = load_configuration(settings_for(sim))

        async def signalled() -> Counter[str]:
            return hosts_signalled(counter.sent)

        async with site_worker(counting, task_queue, sim):
            # Before: a watch started without resourceVersions signals every host's 5 ids.
            before = await counting.start_workflow(
                SITE_WATCH_WORKFLOW,
                SiteWatchInput(namespace=DPF_NAMESPACE),
                id=watch_id,
                task_queue=task_queue,
            )
            every: dict[str, Any] = dict.fromkeys(HOSTS, 5)
            await eventually(signalled, lambda c: c == every)
            await before.terminate("the old way, counted")
            assert len(counter.sent) == 5 * len(HOSTS)
            counter.sent.clear()

            # After: started as the worker and the joins start it; nothing changed but one host.
            epoch = await ensure_site_watch(counting, configuration, DPF_NAMESPACE, task_queue)
            assert epoch == 0
            sim.inject("dpus/node-ss-003-device-ss-003-dpu-0/node-effect")
            await eventually(signalled, lambda c: c["ss-003"] >= 5)
            # A later change of another host is flushed after anything the first listing found.
            sim.inject("dpus/node-ss-007-device-ss-007-dpu-0/node-effect")
            await eventually(signalled, lambda c: c["ss-007"] >= 5)
            assert set(hosts_signalled(counter.sent)) == {"ss-003", "ss-007"}, counter.sent
            # A second ask finds the watch running and starts nothing.
            first_run = (await counting.get_workflow_handle(watch_id).describe()).run_id
            assert await ensure_site_watch(counting, configuration, DPF_NAMESPACE, task_queue) == 0
            assert (await counting.get_workflow_handle(watch_id).describe()).run_id == first_run
            await counting.get_workflow_handle(watch_id).terminate("test over")
        assert sim.violations() == []
