"""A phase entered and left within one activation costs no upsert (issue 37 Deliver 2,
`workflows/phase_upserts.py`): `Runbook.enter` writes its search attributes when the activation
has nothing left to run, and a final phase at once; the values the UI filters on are those each
activation ends with.

Real: the kernel's `Runbook` on the session's dev server, through a worker of this test's own
small runbook (its phases are the test's, so the rule is seen apart from any operation's)."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid

from takeover_support import sticky_timeout
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from temporalio.client import Client
    from temporalio.worker import Worker

    from contracts import names
    from workflows import kernel


@workflow.defn(name="PhaseUpsertsProbe", sandboxed=False)
class PhaseUpsertsProbe(kernel.Runbook):
    """First activation: `a`, then `b` (a's upsert is not written); it waits for `go`. Second
    activation: `c` then `completed` (c's is not written). `continue` shows the Phase a run
    waiting in a phase carries."""

    def __init__(self) -> None:
        super().__init__()
        self._go = False

    @workflow.run
    async def run(self) -> str:
        self.enter("probe-a", "first", also=[names.SITE.value_set("site-a")])
        self.enter("probe-b", "second")
        await workflow.wait_condition(lambda: self._go)
        self.enter("probe-c", "third", also=[names.SITE.value_set("site-c")])
        await self.finish("completed", "done")
        return self.phase

    @workflow.signal(name="go")
    def go(self) -> None:
        self._go = True


def _upserts(history: dict[str, object]) -> list[dict[str, object]]:
    """Each upsert's values, decoded, in history order."""
    found = []
    for event in history["events"]:  # type: ignore[attr-defined]
        attributes = event.get("upsertWorkflowSearchAttributesEventAttributes")
        if attributes:
            fields = attributes["searchAttributes"]["indexedFields"]
            found.append({key: json.loads(base64.b64decode(value["data"])) for key, value in fields.items()})
    return found


async def test_only_the_phase_an_activation_ends_in_is_upserted(client: Client) -> None:
    queue = f"phase-upserts-{uuid.uuid4().hex[:8]}"
    async with Worker(
        client,
        task_queue=queue,
        workflows=[PhaseUpsertsProbe],
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        run_id = f"probe-{uuid.uuid4().hex[:8]}"
        handle = await client.start_workflow(PhaseUpsertsProbe.run, id=run_id, task_queue=queue)
        # The first activation has ended once the run waits: its Phase is the one it ended in.
        for _ in range(200):
            described = await handle.describe()
            if described.typed_search_attributes.get(names.PHASE) is not None:
                break
            await asyncio.sleep(0.05)
        assert described.typed_search_attributes.get(names.PHASE) == "probe-b"
        assert described.typed_search_attributes.get(names.SITE) == "site-a"
        await handle.signal(PhaseUpsertsProbe.go)
        assert await handle.result() == "completed"
        history = json.loads((await handle.fetch_history()).to_json())
    # Before: one upsert per `enter` (a, b, c, completed). Now: one per activation, its end's values.
    assert _upserts(history) == [
        {"Phase": "probe-b", "Site": "site-a"},
        {"Phase": "completed", "Site": "site-c"},
    ]
    final = (await handle.describe()).typed_search_attributes
    assert final.get(names.PHASE) == "completed" and final.get(names.SITE) == "site-c"
