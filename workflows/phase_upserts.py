"""Search-attribute upserts of a run's phases: only what changed, once per activation.

`upsert_changed` writes, in one command, only the values that differ from the run's own.
`DeferredUpserts` (each `kernel.Runbook` holds one) keeps what `Runbook.enter` shows and writes
it when the activation has nothing left to run: a phase entered and left within one activation
(e.g. the operation's `waiting-for-reboot-request` then `completed`) costs no upsert, and the
values the activation ends with are the ones written, in one upsert. How: a task waits on a
`wait_condition` that always holds; the SDK checks conditions only once every other callback of
the activation has run (`_WorkflowInstanceImpl._run_once`), so the task runs after the runbook
and every handler have reached their next wait. A run that may close in the same activation
(a final phase, a continue-as-new) settles at once instead: a command after the run's last one
would be lost.

Why: an upsert is one history event, one billable Action on Temporal Cloud and 3-6 ms of server
CPU whatever it carries; what the UI lists and filters on is the value an activation ends with
(a search attribute is visible only once the workflow task completes), so an intermediate value
buys nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate


def upsert_changed(updates: Sequence[SearchAttributeUpdate[Any]]) -> bool:
    """Upsert, in one command, the search attributes of `updates` whose value differs from the
    run's own (`workflow.info().typed_search_attributes`: set at start, then by every upsert);
    none when nothing differs. True when it wrote.

    Why: rewriting a value the run already has (given at the child's start, or shown by the
    previous phase) changes nothing anyone sees. Deterministic: it reads only the run's own state."""
    current = workflow.info().typed_search_attributes
    changed = [u for u in updates if current.get(u.key) != u.value]
    if changed:
        workflow.upsert_search_attributes(changed)
    return bool(changed)


class DeferredUpserts:
    """Search attributes to write at the end of the activation, the newest value of each."""

    def __init__(self) -> None:
        self._waiting: dict[str, SearchAttributeUpdate[Any]] = {}
        self._settling: asyncio.Task[None] | None = None

    def defer(self, updates: Sequence[SearchAttributeUpdate[Any]], *, now: bool = False) -> None:
        """Keep `updates` (replacing older values of the same attributes) for the activation's
        end; `now`: write everything kept at once (the run may close in this activation)."""
        for update in updates:
            self._waiting[update.key.name] = update
        if now:
            self.settle()
        elif self._settling is None:
            self._settling = asyncio.create_task(self._when_idle())

    async def _when_idle(self) -> None:
        await workflow.wait_condition(lambda: True)  # checked once nothing else is ready to run
        self.settle()

    def settle(self) -> None:
        """Write what is kept, only what changed (`upsert_changed`); nothing when nothing is."""
        self._settling = None
        updates, self._waiting = list(self._waiting.values()), {}
        if updates:
            upsert_changed(updates)
