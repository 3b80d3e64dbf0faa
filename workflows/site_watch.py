"""SiteDPFWatchWorkflow: the one DPF watch of a site, `dpf-watch/<namespace>` (see
`metalflow.names.dpf_watch_workflow_id`).

Started by the first workflow that waits on a host of the site (its `join_site_dpf_watch`
activity starts it with the USE_EXISTING conflict policy, so there is one however many join),
or by the worker at start. It runs one `watch_site_dpf` activity for ever: the activity
heartbeats its checkpoint (resourceVersions), so when its worker dies the retry resumes on
another worker from where it was; it is retried without limit. It keeps the watch's epoch (raised
by the activity, by signal, when the API server restarted) for the `epoch` query the join asks.

Cost per site: one activity slot; about 10 history events for the workflow's life plus 1 per
API server restart; none per change or per host.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from metalflow import activity_api, names
    from metalflow.models.dpf import SiteWatchInput
    from workflows import common

EPOCH_SIGNAL: Final = "dpf_watch_epoch"
EPOCH_QUERY: Final = "epoch"

SITE_WATCH: Final[workflow.ActivityConfig] = {
    "start_to_close_timeout": timedelta(days=30),
    # A dead worker's watch resumes elsewhere within this.
    "heartbeat_timeout": timedelta(seconds=10),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(milliseconds=200),
        maximum_interval=timedelta(seconds=10),
        non_retryable_error_types=[],  # a refused watch (RBAC) is retried too: it may be granted
    ),
}


@workflow.defn(name="SiteDPFWatchWorkflow")
class SiteDPFWatchWorkflow:
    """Keep the site's DPF watch running; see the module docstring."""

    @workflow.init
    def __init__(self, request: SiteWatchInput) -> None:
        self._epoch = 0

    @workflow.run
    async def run(self, request: SiteWatchInput) -> None:
        """Run the site watch until cancelled or terminated."""
        workflow.upsert_search_attributes(
            [names.OPERATION.value_set(names.DPF_WATCH), names.SITE.value_set(request.namespace)]
        )
        common.set_details("watching", f"the DPUs, DPUNodes and holds of namespace {request.namespace}")
        # The activity never ends on its own: a timeout is retried with its heartbeat details.
        await workflow.execute_activity(
            activity_api.watch_site_dpf,
            request,
            **common.options(SITE_WATCH, f"watch DPF objects of {request.namespace}"),
        )

    @workflow.signal(name=EPOCH_SIGNAL)
    def epoch_raised(self, epoch: int) -> None:
        """The activity saw the API server restart (resourceVersions went backwards)."""
        self._epoch = max(self._epoch, epoch)

    @workflow.query(name=EPOCH_QUERY)
    def epoch(self) -> int:
        """The watch's epoch: a read tagged with it is ordered against the watch's signals."""
        return self._epoch
