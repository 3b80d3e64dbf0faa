"""The words of a command whose workflow does not answer (exit 3), one wording for every command
(issue 38: the same situation read "Temporal refused the request", "did not answer within 10 s"
or hung, depending on the command).

- `unanswered_words`: a query nobody answered: no worker polls the workflow's task queue, or none
  answered in time. Nothing was asked, so nothing changed.
- `not_taken_words`: a request (an update) no worker took in time. Temporal holds an update no
  worker has taken with its workflow (admitted, not yet in its history) and hands it to the
  workflow's next task, so it may still run once a worker comes back; nothing can withdraw it. The
  words say so, and how to see whether it ran and stop it, never "nothing was changed".

Pure: no I/O.
"""

from __future__ import annotations

from contracts.host_requests import ENTITY_REQUESTS
from contracts.models.control import ABORT_UPDATE, RETRY_UPDATE
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    HOST_REBOOTED_UPDATE,
    MAINTENANCE_UPDATE,
    MARK_REBOOTED_UPDATE,
    RELEASE_AUTOMATION_UPDATE,
    RELEASE_INSTANCE_UPDATE,
    WITHDRAW_UPDATE,
)

REQUEST_WORDS: dict[str, str] = {
    **{kind.update: f"host {kind.command}" for kind in ENTITY_REQUESTS},
    APPROVE_UPDATE: "approve",
    WITHDRAW_UPDATE: "host abort (a withdrawal)",
    ASSIGN_INSTANCE_UPDATE: "host assign",
    RELEASE_INSTANCE_UPDATE: "host release",
    MAINTENANCE_UPDATE: "host maintenance",
    RELEASE_AUTOMATION_UPDATE: "host retry",
    RETRY_UPDATE: "host retry",
    ABORT_UPDATE: "host abort",
    MARK_REBOOTED_UPDATE: "host mark-rebooted",
    HOST_REBOOTED_UPDATE: "host-rebooted",
}
"""Each update a host command sends, as the command's words (never the update's own name)."""


def not_taken_words(host: str, workflow_id: str, update: str, task_queue: str, seconds: float) -> str:
    """A host command's request no worker took within `seconds` (see the module docstring)."""
    return (
        f"no worker answered `metalflow {REQUEST_WORDS.get(update, update)} {host}` ({workflow_id}) "
        f"within {seconds:g} s: the workers of task queue {task_queue!r} are stopped, stuck or gone. "
        "The request waits in Temporal and may still run when a worker comes back (Temporal hands a "
        "request no worker has taken to the workflow's next task; nothing can withdraw it): once a "
        f"worker runs, `metalflow host status {host}` shows whether it did (`metalflow host abort "
        f"{host}` stops an operation it started); do not send it again before"
    )


def unanswered_words(workflow_id: str, task_queue: str, seconds: float, *, polled: bool) -> str:
    """A workflow that did not answer a query: no worker polled its task queue lately (`polled`
    False: Temporal's "no poller seen"), or none answered within `seconds`."""
    if not polled:
        return f"{workflow_id} does not answer: no worker serves its task queue {task_queue!r}"
    return (
        f"{workflow_id} did not answer within {seconds:g} s: the workers of task queue {task_queue!r} "
        "are busy, stuck or gone (a worker killed moments ago still counts as polling for a few minutes)"
    )
