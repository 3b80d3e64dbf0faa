"""The reboot round of a host operation: the base of `HostOperationWorkflow` (`workflow.py`), split
from its runbook by role, and the tools both use (manual intervention, bounded Kubernetes calls,
DPF's newest state).

A round starts once DPF asks for the host's reboot and the barrier holds (`workflow.py`,
`_reboot_rounds`). Then, in order:

1. Exactly one reboot (`_reboot_host`): a `HostRebootWorkflow` child of the next boot generation
   through the reboot-rounds part (`workflows/parts/reboot_rounds.py`), with the method DPF
   requires (`HostOperationState.reboot_method`). A BMC that cannot reboot the host
   (`BMCRebootFailed`) asks an operator at once: `retry` asks the BMC again for the same
   generation (it was not reached), `mark_rebooted` takes the host as rebooted by hand.
2. DPF is told (`_acknowledge`: the reboot-required annotation removed, once per token), and the
   watch takes the node as the write's answer gives it, at its resourceVersion
   (`DPFWatch.written`; without one it reads afresh), so DPF's next request is never mistaken
   for the old one: a signal from before the write is older than the write, and dropped.
3. The agent of each DPU of the round whose agent ran (v26) must start again (a new
   `agentStatus.lastStartupTime`) within `agent_restart_wait_seconds`: DPF leaves `Rebooting` at
   the removal whether or not the reset reached the DPU, and then waits in `DPU Config` for a
   fresh agent start, so without this a reset that did nothing showed only at the phase timeout
   (issue 36 point 4). Then DPF must move a DPU on within `reboot_wait_seconds`. If either does
   not happen, the reboot is re-issued (ForceOff then On from retry `force_off_from_retry`: a
   cold one) up to `max_power_cycle_retries` times, then an operator decides
   (`HostOperationState.after_silence`). A DPU that started installing meanwhile sends the run
   back to the barrier (a DPU waiting in `DPU Config` for its agent does not count).

Why a base class: the runbook (`workflow.py`) stays a few hundred lines that read top to bottom,
and the round, the intricate part, reads on its own; both share one state object and one set of
tools. The operation declares its own `abort` (its request may spare installing DPUs:
`OperationAbortRequest`), over the kernel's validator and acceptance, as the campaign does.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import TypeVar

from temporalio import workflow
from temporalio.exceptions import ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.errors import RebootFailed
    from contracts.models.control import OperatorRequest
    from contracts.models.dpf import HostDPFState, HostRef, MarkRebootedInput
    from contracts.models.dpf_answers import RebootAcknowledged
    from contracts.models.host import MANUAL_INTERVENTION_REQUIRED, OperationPolicy
    from contracts.wording import answers_in_words, duration, plural
    from workflows import kernel
    from workflows.host_operation.dpf_owed import DPF_STEP_OVERDUE, OwedWait
    from workflows.host_operation.kube_calls import bounded_call
    from workflows.host_operation.state import HostOperationState
    from workflows.parts import dpf_barrier as barrier
    from workflows.parts.dpf_watch import DPFWatch
    from workflows.parts.host_power import HOST_IS_OFF, PowerCustody
    from workflows.parts.reboot_rounds import HearsItsReboot, RebootOutcome, RebootRounds, bmc_refusal

ArgT = TypeVar("ArgT")
ResultT = TypeVar("ResultT")

REBOOTING_HOST = "rebooting-host"
WAITING_FOR_DPF_AFTER_REBOOT = "waiting-for-dpf-after-reboot"
WAITING_FOR_AGENTS = "waiting-for-dpu-agents-after-reboot"
OPERATOR_ANSWERS = ("retry", "mark_rebooted")


class RebootRound(HearsItsReboot, kernel.Runbook):
    """A host operation's reboot round and the tools its runbook shares (module docstring).

    The workflow sets `state`, `reboots` and `_watch` in its `__init__`.
    """

    state: HostOperationState
    reboots: RebootRounds
    _watch: DPFWatch
    owed: OwedWait  # a step only DPF takes, which the reboot barrier waits on (`dpf_owed.py`)
    # The words of a reboot that ended with the host OFF, until a reboot of this run completes:
    # every early end says them (`HostOperationWorkflow._clean_up`), so the entity marks the host.
    left_off: str = ""
    # The custody rule every host operation shares (workflows/parts/host_power.py): a reboot of
    # this run that left the host OFF (`off_generation`, the generation it did not reach, sent
    # ForceOff first or not: `off_force_off`) is run again, once, on a cancel (`_on_again_after_cancel`).
    power: PowerCustody
    off_generation: int | None = None
    off_force_off: bool = False

    # -- the round ---------------------------------------------------------------------------------
    async def _reboot_and_confirm(self, marks_at_barrier: object) -> None:
        """One reboot for the round DPF asked for, re-issued while the DPUs' agents do not start
        again or DPF does not move on."""
        retries = 0
        # Each agent's start time before the reboot: v26 DPF leaves Rebooting at the removal
        # whether or not the reset reached the DPU, so the agent's own start is the proof.
        starts = barrier.agent_starts(self.dpf, self.state.dpu_ids)
        # Owed from now: every DPU is Rebooting and stamped, so a reset from here on (someone
        # else's, before ours) serves this round; one before it may have come before a DPU's install.
        await self._reboot_host(force_off=self.state.force_off(retries), owed_since=workflow.now())
        await self._acknowledge()
        while True:
            stale = await self._agents_restarted(starts)
            if stale:
                why = self.state.agents_silent_words(stale, starts, retries)
            else:
                self.enter(
                    WAITING_FOR_DPF_AFTER_REBOOT,
                    f"DPF to move the DPUs on after the reboot to generation {self.state.generation}",
                )
                seconds = self.policy.reboot_wait_seconds
                if await self.wait(
                    self._moved_on_since(marks_at_barrier),
                    timeout=seconds,
                    timeout_summary=(
                        f"{self.phase}: up to {duration(seconds)} for DPF to move on after a reboot"
                    ),
                ):
                    return
                why = (
                    f"DPF did not move on within {seconds:g} s of each of "
                    f"{plural(retries + 1, 'power cycle')} (last: generation {self.state.generation})"
                )
            silence = self.state.after_silence(
                retries, installing=barrier.installing_besides(self.dpf, stale)
            )
            if silence == "barrier":
                return  # a DPU started installing meanwhile: back to the barrier
            if silence == "reissue":
                retries += 1
                # A warm reset that did not reach a DPU is not sent again: the next one is cold.
                workflow.logger.warning("%s: %s; rebooting again", self.host.host_id, why)
                await self._reboot_host(force_off=self.state.force_off(retries), cold=bool(stale))
                await self._acknowledge()
                continue
            decision, _ = await self._intervene(why)
            if decision == "retry":
                retries = 0
            elif decision == "mark_rebooted":
                await self._acknowledge()

    async def _agents_restarted(self, starts: dict[str, tuple[str, str]]) -> list[str]:
        """Wait up to `agent_restart_wait_seconds` for the agent of each DPU in `starts` to start
        again; the DPUs whose agent did not (issue 36 point 4: minutes, not the phase timeout)."""
        if not starts or not barrier.not_restarted(self.dpf, starts):
            return []
        seconds = self.policy.agent_restart_wait_seconds
        self.enter(
            WAITING_FOR_AGENTS,
            f"the DPU agents to start again after the reboot to generation {self.state.generation} "
            f"({', '.join(barrier.not_restarted(self.dpf, starts))})",
        )
        await self.wait(
            lambda: not barrier.not_restarted(self.dpf, starts),
            timeout=seconds,
            timeout_summary=f"{self.phase}: up to {duration(seconds)} for the DPU agents to start again",
        )
        return barrier.not_restarted(self.dpf, starts)

    def _moved_on_since(self, marks: object) -> Callable[[], bool]:
        """DPF moved a DPU on since `marks`, or asks again: the state after our removal of the
        annotation has none, so one that appears is a new request."""
        return lambda: self.state.marks(self.dpf) != marks or self.state.asks_for_reboot(self.dpf)

    async def _reboot_host(
        self, *, force_off: bool, owed_since: datetime | None = None, cold: bool = False
    ) -> None:
        """One reboot that happens: the BMC's, or, where the BMC cannot, a person's, as an operator
        decides (`retry` asks the BMC again for the generation it refused). `cold`: never a warm
        reset (the last one did not reach a DPU)."""
        refused: int | None = None  # the generation whose reboot the BMC refused: no reset happened
        first = True  # the round's first reboot: a reset since `owed_since` serves it
        while True:
            method, warm = self.state.reboot_method(self.dpf, force_off=force_off or cold)
            self.state.reboot_started()
            generation = await self.reboots.start(
                self.state.reboot_input(
                    refused or self.state.generation + 1,
                    force_off=force_off,
                    warm=warm,
                    owed_since=owed_since if first and not force_off else None,
                    operation_id=workflow.info().workflow_id,
                ),
                summary=f"reboot {self.host.host_id} to generation {{generation}}",
                parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
                # The generation the BMC refused was not reached: the retry reboots to it again.
                retry_refused=refused is not None,
            )
            first = False
            how = "ForceOff then On" if force_off else "warm reset" if warm else "power cycle"
            asked = f", DPF asks for {method}" if method else ""
            self.enter(
                REBOOTING_HOST,
                f"{how} of {self.host.host_id} to generation {generation} "
                f"({self.policy.reboot_method.value}{asked})",
            )
            try:
                outcome = await self.reboots.wait()
            except ChildWorkflowError as err:
                why = bmc_refusal(err)
                if why is None:
                    raise RebootFailed(
                        f"the reboot of {self.host.host_id} to generation {generation} failed: {err.cause}"
                    ) from err
            else:
                workflow.logger.info("host %s rebooted by %s", outcome.result.host_id, outcome.result.method)
                self._took_reboot(outcome)
                return
            refused = generation
            # The BMC could not reboot it: a person decides, told why (no reboot happened by us).
            # A host the reboot left OFF is no rebooted host: `retry` (the reboot again, which
            # powers it on) is the only answer, so a `mark_rebooted` cannot end the run with the
            # host off (issue 40: never a host found off after the run says it is done).
            if HOST_IS_OFF in why:
                off = f"the host {self.host.host_id} {HOST_IS_OFF}"
                self.left_off = why[why.index(off) :] if off in why else why
                self.off_generation, self.off_force_off = generation, force_off or cold
                cause = why.split(f"; {off}")[0]
                self.power.left_off_by(f"the ForceOff of its reboot to generation {generation}", cause)
                decision, _ = await self._intervene(
                    why, ("retry",), when={"retry": "once the BMC is fixed (reboots it: powers it on)"}
                )
                continue
            decision, _ = await self._intervene(
                why,
                when={
                    "retry": "once the BMC is fixed",
                    "mark_rebooted": f"once {self.host.host_id} was rebooted by hand",
                },
            )
            if decision == "mark_rebooted":  # rebooted by hand: the generation the BMC refused
                self.state.rebooted(generation, power_cycle=False)
                return

    def _took_reboot(self, outcome: RebootOutcome) -> None:
        """A reboot that happened is counted (a reset someone else made is noted, not ours)."""
        self.left_off = ""  # the host booted: it is on
        self.off_generation = None
        self.power.seen_on()
        self.state.rebooted(outcome.generation, power_cycle=outcome.power_cycle)
        if outcome.already_done:
            what = f"host {outcome.result.host_id} was reset after DPF asked; taken as the reboot, none sent"
            self.state.unplanned_reset(what, workflow.now())
            workflow.logger.warning("unplanned reset on %s: %s", self.state.request.host_id, what)

    async def _on_again_after_cancel(self) -> None:
        """A cancel asks nobody (`PowerCustody.cancelled`, the reset's rule): a reboot of this run
        that left the host OFF is run again, once, not abortable, for the generation it did not
        reach; it powers the host on (and counts), or the run's end still says the host is OFF."""
        generation = self.off_generation
        if generation is None or not self.power.cancelled():
            return
        _, warm = self.state.reboot_method(self.dpf, force_off=self.off_force_off)
        self.state.reboot_started()
        await self.reboots.start(
            self.state.reboot_input(
                generation, force_off=self.off_force_off, warm=warm, owed_since=None,
                operation_id=workflow.info().workflow_id,
            ),
            summary=f"reboot {self.host.host_id} to generation {{generation}} (after a cancel, the host OFF)",
            parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
            retry_refused=True,
        )  # fmt: skip
        try:
            outcome = await self.reboots.wait(abortable=False)
        except ChildWorkflowError as err:
            workflow.logger.warning("the reboot after the cancel failed: %s", err.cause)
            return
        self._took_reboot(outcome)

    async def _acknowledge(self) -> None:
        await self._mark_node_rebooted()
        self.state.cycled_without_ack = False

    async def _mark_node_rebooted(self) -> None:
        """Remove the reboot-required annotation (only after a power cycle or an operator's word)."""
        info = workflow.info()
        token = f"{info.workflow_id}@{info.run_id}#{self.state.next_ack()}"
        node = self.dpf.node  # as seen when DPF asked: the write tests it instead of reading
        seen = {"asked": node.reboot_required, "token_before": node.reboot_acknowledged} if node else {}
        result: RebootAcknowledged = await self._call_kube(
            activity_api.mark_dpu_node_rebooted,
            MarkRebootedInput(host_id=self.host.host_id, namespace=self.host.namespace, token=token, **seen),
            kernel.KUBE_WRITE,
            f"tell DPF {self.host.node_name()} was rebooted",
        )
        self.state.acknowledged(changed=result.changed)
        # DPF's next word is newer than the write; what the watch sent before it is older (no read).
        if not self._watch.written(result.node, result.node_version):
            self._watch.restart(self.state.after_acknowledgement(self.dpf))  # read afresh

    # -- the tools the runbook shares --------------------------------------------------------------
    async def _intervene(
        self, reason: str, answers: tuple[str, ...] = OPERATOR_ANSWERS, *, when: dict[str, str] | None = None
    ) -> tuple[str, OperatorRequest]:
        """Manual intervention: wait for `retry` or `mark_rebooted` (or `abort`, which raises);
        the details say once how, with the CLI's commands (`metalflow host retry HOST`)."""
        how = answers_in_words(answers, when or {}, self.state.request.host_id)
        return await self.await_decision(MANUAL_INTERVENTION_REQUIRED, reason, answers, how)

    async def _call_kube(
        self,
        call: Callable[[ArgT], Awaitable[ResultT]],
        arg: ArgT,
        preset: workflow.ActivityConfig,
        summary: str,
    ) -> ResultT:
        """One Kubernetes call, bounded by the policy (`kube_calls.bounded_call`): past the bound an
        operator decides; in cleanup it is neither aborted nor escalated."""
        ask = None if self.state.cleaning_up else self._intervene
        seconds = self.policy.kube_call_timeout_seconds
        return await bounded_call(self, call, arg, preset, summary, seconds=seconds, ask=ask)

    @property
    def policy(self) -> OperationPolicy:
        return self.state.policy

    @property
    def host(self) -> HostRef:
        assert self.state.host is not None, "the host is known once the inventory is resolved"
        return self.state.host

    @property
    def dpf(self) -> HostDPFState:
        """DPF's newest state of the host, as the watch took it (empty before the first read)."""
        return self._watch.state or HostDPFState(host_id=self.state.request.host_id)

    def _observe(self, state: HostDPFState) -> None:
        """Each state taken: the state notes DPF's new request and resets no reboot of ours explains."""
        for what in self.state.observe(state, workflow.now()):
            workflow.logger.warning("unplanned reset on %s: %s", self.state.request.host_id, what)

    def _changed_since(self, seen: int) -> Callable[[], bool]:
        return lambda: self._watch.changes != seen

    def _show_unplanned(self) -> None:
        """Write new unplanned resets to the memo (one history event); the runbook re-plans anyway."""
        shown = self.state.unplanned_to_show()
        if shown is not None:
            workflow.upsert_memo({"unplanned_resets": shown})

    def _owed_first(self, timeout: float) -> float | None:
        """The reboot barrier's wait bound when a step DPF owes falls due before `timeout`
        (`dpf_owed.py`), else None (the wait's own bound stands)."""
        left = self.owed.due_in(workflow.now(), self.policy.dpf_step_seconds)
        return max(left, 0.001) if left is not None and left < timeout else None

    def _say_owed(self, waiting_for: str) -> None:
        """The step DPF owes is overdue: said once, in the details (the status "now" line, kept
        while it stays owed) and a `DPFStepOverdue` Warning Event; the wait goes on."""
        words = self.owed.overdue(workflow.now(), self.policy.dpf_step_seconds)
        if words is not None:
            kernel.report(DPF_STEP_OVERDUE, words)
            self.show(waiting_for + self.owed.shown())
