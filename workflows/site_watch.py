"""SiteDPFWatchWorkflow: the one DPF watch of a site, `dpf-watch/<namespace>` (see
`contracts.names.dpf_watch_workflow_id`).

Started by the first workflow that waits on a host of the site (its `join_site_dpf_watch`
activity starts it with the USE_EXISTING conflict policy, so there is one however many join),
or by the worker at start. It runs one `watch_site_dpf` activity for ever: the activity
heartbeats its checkpoint (resourceVersions), so when its worker dies the retry resumes on
another worker from where it was; it is retried without limit. It keeps the watch's epoch (raised
by the activity, by signal, when the API server restarted) in its memo `epoch`, which the join
reads with a describe (served by the server alone), and for the `epoch` query (runs started
before `EPOCH_MEMO_PATCH` have no memo: the join asks them by query). The query needed a
workflow task on this one workflow for every host operation that joined: 200 at once timed out
on a busy worker (75 "Timeout expired" in one 200-host benchmark run, bench/README.md).

Cost per site: one activity slot; about 10 history events for the workflow's life plus 1 per
API server restart (2 with the memo); none per change or per host.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.models.dpf import SiteWatchInput
    from workflows import common

EPOCH_SIGNAL: Final = "dpf_watch_epoch"
EPOCH_QUERY: Final = "epoch"
EPOCH_MEMO: Final = "epoch"
EPOCH_MEMO_PATCH: Final = "dpf-watch-epoch-memo"

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
        self._memo = False  # the epoch is kept in the memo (EPOCH_MEMO_PATCH)

    @workflow.run
    async def run(self, request: SiteWatchInput) -> None:
        """Run the site watch until cancelled or terminated."""
        workflow.upsert_search_attributes(
            [names.OPERATION.value_set(names.DPF_WATCH), names.SITE.value_set(request.namespace)]
        )
        common.set_details("watching", f"the DPUs, DPUNodes and holds of namespace {request.namespace}")
        if workflow.patched(EPOCH_MEMO_PATCH):
            self._memo = True
            workflow.upsert_memo({EPOCH_MEMO: self._epoch})
        # The activity never ends on its own: a timeout is retried with its heartbeat details.
        await workflow.execute_activity(
            activity_api.watch_site_dpf,
            request,
            **common.options(SITE_WATCH, f"watch DPF objects of {request.namespace}"),
        )

    @workflow.signal(name=EPOCH_SIGNAL)
    def epoch_raised(self, epoch: int) -> None:
        """The activity saw the API server restart (resourceVersions went backwards)."""
        raised = epoch > self._epoch
        self._epoch = max(self._epoch, epoch)
        if raised and self._memo:
            workflow.upsert_memo({EPOCH_MEMO: self._epoch})

    @workflow.query(name=EPOCH_QUERY)
    def epoch(self) -> int:
        """The watch's epoch: a read tagged with it is ordered against the watch's signals."""
        return self._epoch
