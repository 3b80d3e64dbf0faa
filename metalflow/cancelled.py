"""A host operation cancelled in Temporal (`temporal workflow cancel`), in words, for `--wait`
(`metalflow.hosts.follow_operation`): a cancel carries no words in Temporal, so they are the
run's own final Phase details (what it did and left: each DPU, the host's power), said to be no
operator's abort (task B3 of issue 40; before: `failed: CancelledError: Workflow cancelled`)."""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError

METADATA_QUERY: Final = "__temporal_workflow_metadata"  # built into every workflow: its current details
CANCELLED_WORDS: Final = (
    "cancelled in Temporal (`temporal workflow cancel` or its parent's close), not by an operator's abort"
)


async def final_details(client: Client, workflow_id: str, timeout: timedelta) -> str | None:
    """The closed run's current details (a worker replays it to answer); None: not read.
    Cost: one query."""
    try:
        metadata = await client.get_workflow_handle(workflow_id).query(
            METADATA_QUERY, result_type=WorkflowMetadata, rpc_timeout=timeout
        )
    except (RPCError, WorkflowQueryFailedError, WorkflowQueryRejectedError):
        return None
    return metadata.current_details or None


def cancelled_words(details: str | None) -> str:
    """`CANCELLED_WORDS`, then what the run's final details (`**cancelled**: cancelled (the
    workflow was cancelled). Done: ...`) say it did and left; or that they could not be read."""
    said = details.split("**: ", 1)[-1] if details else ""
    done = said.split(". ", 1)[1] if said.startswith("cancelled (") and ". " in said else said
    return CANCELLED_WORDS + (f". {done}" if done else ": what it did and left could not be read")
