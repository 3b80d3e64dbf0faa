"""What a closed run of a host operation said last, read from Temporal (issue 40: a host is never
found off after a run ends unless its status says so in words).

A cancel carries no words in Temporal (no result, no failure): what a cancelled run did and left
is its own final Phase details (`**cancelled**: cancelled (the workflow was cancelled). Done:
...; the host is on`), read with the query every workflow answers (`METADATA_QUERY`: a worker
replays the closed run to answer). `--wait` reads them (`metalflow.cancelled`), and so does the
host's entity (activity `describe_reboot_run`), whose record of the run then says the same
(`contracts.wording.cancel_left`: the words after the phase).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Final

from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowQueryFailedError, WorkflowQueryRejectedError
from temporalio.service import RPCError

METADATA_QUERY: Final = "__temporal_workflow_metadata"  # built into every workflow: its current details


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
