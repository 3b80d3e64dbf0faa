"""The demo's last step: a coherent rollout of the simulated site's `default/inference`.

Started exactly as `metalflow rollout start default/inference --set ...` does, then followed
through its `status` query, one line per change. Cost: one workflow and one watcher activity
for about a second per PodGang (the demo timings), plus a query every half second.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.exceptions import WorkflowAlreadyStartedError

from contracts import names, workflow_api
from contracts.models.grove import PCSRef, RolloutInput, RolloutResult
from contracts.wording import plural
from metalflow.devstack.stack import DevStackConfig
from metalflow.hosts import default_operator
from metalflow.rollouts import render, root_cause

DEMO_PCS = PCSRef(namespace="default", name="inference")
# The scaling group's cliques: rolled with no replica outage (each replica's router, in its anchor
# PodGang, is untouched; worker replicas 1 and 2, in tail PodGangs, serve while the anchor rolls).
DEMO_IMAGES = {c: f"registry.local/{c}:1.1" for c in ("prefill", "decode")}


async def run_rollout_demo(
    client: Client, config: DevStackConfig, say: Callable[[str], None], task_queue: str = names.TASK_QUEUE
) -> bool:
    """Roll `default/inference` to the demo images; True when the rollout completed."""
    workflow_id = names.rollout_workflow_id(DEMO_PCS.namespace, DEMO_PCS.name)
    say(f"demo: rolling {DEMO_PCS}'s workers to 1.1 coherently: {config.workflow_url(workflow_id)}")
    say("demo:   (its `status` query, current details, Phase; `metalflow rollout status default/inference`)")
    try:
        handle = await client.start_workflow(
            workflow_api.RolloutWorkflow.run,
            RolloutInput(
                pcs=DEMO_PCS, images=DEMO_IMAGES, requested_by=default_operator(), reason="metalflow dev demo"
            ),
            id=workflow_id,
            task_queue=task_queue,
            static_summary=f"demo: roll {DEMO_PCS} to the 1.1 images",
            search_attributes=TypedSearchAttributes([SearchAttributePair(names.OPERATION, names.ROLLOUT)]),
        )
    except WorkflowAlreadyStartedError:
        say(f"demo: a rollout of {DEMO_PCS} is already in flight; following it")
        handle = client.get_workflow_handle(workflow_id, result_type=RolloutResult)
    last = ""
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        line = render(await handle.query(workflow_api.RolloutWorkflow.status))
        if line != last:
            say(f"demo:   {line}")
            last = line
        await asyncio.sleep(0.5)
    try:
        result: RolloutResult = await handle.result()
    except WorkflowFailureError as err:
        say(f"demo: rollout FAILED: {root_cause(err)}")
        return False
    timings = ", ".join(f"{s.seconds:.1f}s" for s in result.steps if s.seconds is not None)
    steps = plural(result.steps_done, "step")
    say(f"demo: rollout {result.outcome}: {steps} ({timings}); at {result.target_hash}")
    return result.outcome == "completed"
