"""The guard of a paused rollout, a part of `RolloutWorkflow` (composition, one asyncio task).

Why: while PodGangs of two versions coexist, a pod Grove replaces (an eviction, a crash) comes
back at the template's version, into whatever PodGang it belongs to, paused or not. So while
the rollout waits for an operator, the guard heals each PodGang Grove mixed: it replaces the
PodGang's other stale pods, so the PodGang is whole again at the template's version (the only
version Grove's replacements come back at), one PodGang per replica at a time. Only where that
version is one the rollout made (a clique holding someone else's edit is left as Grove made it:
healing would roll the edit onto its pods), and only where it keeps every minAvailable unless an
outage is allowed. Paused, the world is guarded, not frozen. A heal that deletes nothing (the
template moved meanwhile) waits for the next change.

What to heal, and when a heal is over, are the state's decisions (`RolloutState.to_heal`,
`healed`); the guard acts. Its waits are not the runbook's: an abort does not cut them (it ends
the runbook's decision wait), and the runbook waits for a heal in progress (`quiet`) before it
acts on the decision. The run stops the guard with the watcher.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.models.grove import PCSRef, RollGangInput
    from workflows import kernel
    from workflows.rollout.state import RolloutState


class PausedGuard:
    """Heals the PodGangs Grove mixed while `on` (the rollout is paused); see the module docstring.

    Args:
        runbook: The rollout, whose `call` and `show` the guard uses.
        state: The rollout's state: what to heal, and the repairs counted.
        deadline: How long a heal may take (a step's deadline).
        allow_outage: Heal where it breaks a minAvailable (the policy's `allow_replica_outage`).
    """

    def __init__(
        self,
        runbook: kernel.Runbook,
        state: RolloutState,
        pcs: PCSRef,
        deadline: Callable[[], float],
        *,
        allow_outage: bool = False,
    ) -> None:
        self.on = False
        self._runbook, self._state, self._pcs, self._deadline = runbook, state, pcs, deadline
        self._allow_outage = allow_outage
        self._healing = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._heal_while_on())

    async def quiet(self) -> None:
        """Until no heal is in progress."""
        await workflow.wait_condition(lambda: not self._healing)

    def stop(self) -> None:
        self.on = False
        if self._task is not None:
            self._task.cancel()

    async def _heal_while_on(self) -> None:
        state = self._state
        while True:
            await workflow.wait_condition(lambda: self.on and bool(state.to_heal(self._allow_outage)))
            seen = state.watched
            assert seen is not None
            gangs, template = state.to_heal(self._allow_outage), state.heal_targets()
            self._healing = True
            try:
                self._runbook.show(f"paused; healing mixed PodGang {', '.join(g.name for g in gangs)}")
                deleted = 0
                for g in gangs:
                    rolled = await self._runbook.call(
                        activity_api.roll_podgang,
                        RollGangInput(
                            pcs=self._pcs,
                            podgang=g.name,
                            targets=template,
                            generation=seen.summary.generation,
                        ),
                        kernel.options(kernel.KUBE_WRITE, f"heal {g.name}"),
                        abortable=False,
                    )
                    deleted += len(rolled.deleted)
                    state.repairs += bool(rolled.deleted)
                healed = functools.partial(state.healed, {g.name for g in gangs}, deleted, state.watched)
                await workflow.wait_condition(healed, timeout=self._deadline())
            except TimeoutError:
                pass
            finally:
                self._healing = False
