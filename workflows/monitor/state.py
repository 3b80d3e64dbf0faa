"""What a host's monitor knows and what it decides; `HostMonitorWorkflow` (workflow.py) acts.

`MonitorState` is the monitor's one state object: its memory (`MonitorMemory`, the data shape in
contracts/models/monitor.py, which the next run's input carries whole) and its rules as methods:

- `observe`: one DPF state taken: each DPU's phase and since when, a fall from `Ready` to
  `Node Effect` (degraded), a recovery, a recreated DPU (its deadline starts again), and the
  resets at rest it shows (`reset_at_rest`);
- `pool_label`: the label the host needs now and why (none to write when this run wrote or
  confirmed it already), and what a write changed;
- `overdue`, `next_deadline`: the degraded DPUs past the reprovision deadline, and when the next
  one passes; what the owner answered;
- what is recorded of resets no operation explains, the status, and the hand-over to the next run.

Pure: no Temporal (not even `workflow.unsafe`), no clock (`now` is an argument), no I/O. What
is this run's only (the label confirmed once per run, the adoption of an earlier monitor's
label) is private to the object and not carried.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from pydantic import PrivateAttr

from contracts import names
from contracts.models.campaign import HostFinished
from contracts.models.control import OperatorRequest
from contracts.models.dpf import (
    PAST_NODE_EFFECT,
    PHASE_NODE_EFFECT,
    PHASE_READY,
    DPUProgress,
    DPUState,
    HostDPFState,
)
from contracts.models.monitor import (
    IN_POOL,
    OUT_OF_POOL,
    DegradedDPU,
    HoldBack,
    HostMonitorInput,
    HostMonitorStatus,
    MonitorMemory,
    OwnerOperationResult,
    OwnerReprovisionResult,
    OwnRequest,
    PoolChange,
    PoolStateResult,
    UnplannedReset,
)
from contracts.wording import iso_z
from workflows.parts import dpf_barrier

HISTORY_KEPT: Final = 20  # pool changes shown in the status and carried across runs
UNPLANNED_KEPT: Final = 20  # unplanned resets shown in the status and memo, carried across runs
WATCHING: Final = "watching"
OUT_OF_POOL_PHASE: Final = "host-out-of-pool"


def operator_said_no(outcome: str, monitor_id: str) -> bool:
    """Whether the end of the monitor's request (`HostFinished.outcome`, the entity's words) is
    an operator's no: aborted (`aborted by WHO: WHY`, or cancelled), terminated, or withdrawn by
    someone other than the monitor itself (the monitor withdraws its own once it is not needed).
    Completed, failed and expired are not: the monitor asks again one deadline later."""
    if outcome.startswith(("aborted", "terminated", "cancelled")):
        return True
    return outcome.startswith("withdrawn by ") and not outcome.startswith(f"withdrawn by {monitor_id}")


def reset_at_rest(before: tuple[str, str, str] | None, dpu: DPUState) -> str | None:
    """What changed on a DPU that was `Ready` (`before`: its uid, phase and agent start time as
    last seen) by a move DPF does not make itself (`dpf_barrier.unplanned_change`), or None: a new
    DPU object, or one not `Ready` before (metalflow or DPF is moving it), is not at rest."""
    if before is None or before[0] != dpu.uid or before[1] != PHASE_READY:
        return None
    found = dpf_barrier.unplanned_change(before, dpu)
    if found == "restarted":
        return f"restarted (agentStatus.lastStartupTime {before[2]} -> {dpu.agent_started_at}) in {dpu.phase}"
    return found


class MonitorState(MonitorMemory):
    """The monitor of one host: its memory, and its rules over it (see the module docstring)."""

    _request: HostMonitorInput = PrivateAttr()  # the run's input: the host and the policy
    _label_checked: bool = PrivateAttr(default=False)  # the label is confirmed once per run
    _adopting: bool = PrivateAttr(default=False)  # the first state may keep an earlier monitor's "out"

    @classmethod
    def of(cls, request: HostMonitorInput, now: datetime) -> MonitorState:
        """The state a run starts from: the previous run's memory, or a first run's."""
        memory = request.memory or MonitorMemory(started_at=now)
        state = cls.model_validate(memory.model_dump())
        state.started_at = state.started_at or now
        state._request = request
        return state

    @property
    def began(self) -> datetime:
        """When the first run started (what a DPU never seen in a phase change shows as since)."""
        assert self.started_at is not None, "set by `of`"
        return self.started_at

    # -- a DPF state taken -----------------------------------------------------------------------------
    def adopt(self, found: PoolStateResult) -> None:
        """A first run continues what an earlier monitor left: a host labelled out stays out while a
        DPU is still in Node Effect (the first state `observe`s decides)."""
        if found.state == OUT_OF_POOL:
            self.pool_state = OUT_OF_POOL
            self._adopting = True

    def observe(self, dpf: HostDPFState, now: datetime) -> tuple[list[UnplannedReset], datetime]:
        """Take one DPF state: the degraded DPUs and each DPU's phase as it shows them. Returns the
        resets at rest it shows, and since when (the state before) an operation would explain them."""
        self.events_seen += 1
        adopting, self._adopting = self._adopting, False
        since, self.looked_at = self.looked_at or self.began, now
        resets: list[UnplannedReset] = []
        for dpu in dpf.dpus:
            if dpu.dpu_id is None or dpu.deleting:
                continue
            dpu_id, previous = dpu.dpu_id, self.last_phases.get(dpu.dpu_id)
            found = self._reset_at_rest(dpu_id, dpu)
            if found is not None:
                resets.append(UnplannedReset(at=now, dpu_id=dpu_id, change=found))
            degraded = self._degraded(dpu_id)
            if self.last_uids.get(dpu_id) not in (None, dpu.uid):
                previous = None  # recreated: its history starts again
                if degraded is not None:  # being reprovisioned: its deadline starts again
                    self._keep(degraded.model_copy(update={"uid": dpu.uid, "since": now}))
            if previous != dpu.phase:
                self.since[dpu_id] = now
            fell = previous == PHASE_READY or (adopting and previous is None)
            if dpu.phase == PHASE_NODE_EFFECT and fell and degraded is None:
                self._keep(DegradedDPU(dpu_id=dpu_id, uid=dpu.uid, since=now))
            elif dpu.phase == PHASE_READY:
                self.degraded = [d for d in self.degraded if d.dpu_id != dpu_id]
            self.last_phases[dpu_id], self.last_uids[dpu_id] = dpu.phase, dpu.uid
        if dpf.node is None:
            self.degraded = []  # the DPUNode is gone (removed): nothing left to take out of the pool
        # A DPU DPF no longer shows (`host remove --dpus`, or a reprovision's delete before DPF
        # creates it again) is no longer watched: its phase goes from the status ("2 DPUs watched"
        # after the removal of one). Its uid and any degraded record stay: one created again is
        # told apart by its uid, and a degraded one keeps its deadline.
        shown = {dpu.dpu_id for dpu in dpf.dpus}
        for dpu_id in [d for d in self.last_phases if d not in shown]:
            del self.last_phases[dpu_id]
            self.since.pop(dpu_id, None)
        return resets, since

    def _reset_at_rest(self, dpu_id: str, dpu: DPUState) -> str | None:
        """`reset_at_rest` against this DPU as last seen; remembers its agent's start time."""
        before = None
        if dpu_id in self.last_uids:
            before = (
                self.last_uids[dpu_id],
                self.last_phases.get(dpu_id, ""),
                self.last_started.get(dpu_id, ""),
            )
        same = before is not None and before[0] == dpu.uid
        # A state without the agent's start time (before DPF v26) keeps the last known.
        self.last_started[dpu_id] = dpu.agent_started_at or (before[2] if before is not None and same else "")
        return reset_at_rest(before, dpu)

    def _degraded(self, dpu_id: str) -> DegradedDPU | None:
        return next((d for d in self.degraded if d.dpu_id == dpu_id), None)

    def _keep(self, dpu: DegradedDPU) -> None:
        """`dpu` as degraded: in its place when it was, else last."""
        at = next((i for i, d in enumerate(self.degraded) if d.dpu_id == dpu.dpu_id), None)
        if at is None:
            self.degraded.append(dpu)
        else:
            self.degraded[at] = dpu

    def record_unplanned(self, resets: list[UnplannedReset]) -> list[str]:
        """Resets no operation explains, recorded; the memo's lines (the newest `UNPLANNED_KEPT`)."""
        self.unplanned = [*self.unplanned, *resets][-UNPLANNED_KEPT:]
        self.unplanned_total += len(resets)
        return self.unplanned_lines()

    def unplanned_lines(self) -> list[str]:
        """The memo's `unplanned_resets` lines (the newest `UNPLANNED_KEPT`)."""
        return [r.line() for r in self.unplanned]

    def memo(self) -> dict[str, list[str]]:
        """The memo a next run starts with, so the UI keeps showing the resets recorded (empty:
        none recorded, as a first run starts)."""
        return {"unplanned_resets": self.unplanned_lines()} if self.unplanned else {}

    # -- the pool label --------------------------------------------------------------------------------
    def pool_label(self) -> tuple[str, str] | None:
        """The label the host needs and why (out while a DPU is degraded), or None: this run wrote
        or confirmed it already (no write per DPF change)."""
        wanted = OUT_OF_POOL if self.degraded else IN_POOL
        if wanted == self.pool_state and self._label_checked:
            return None
        self._label_checked = True
        if self.degraded:
            return wanted, "critical DPU services down on " + ", ".join(
                sorted(d.dpu_id for d in self.degraded)
            )
        return wanted, "every DPU's services are up"

    def label_unconfirmed(self) -> None:
        """A write an abort cut short: the final look writes the label the world needs."""
        self._label_checked = False

    def labelled(self, wanted: str, reason: str, written: PoolStateResult, now: datetime) -> bool:
        """The label as written; True when the host's pool state is shown anew (a change, or the
        label found otherwise than this monitor believed)."""
        if wanted == self.pool_state and not written.changed:
            return False
        if wanted != self.pool_state:
            self.history = [*self.history, PoolChange(at=now, state=wanted, reason=reason)][-HISTORY_KEPT:]
        self.pool_state = wanted
        return True

    # -- reprovisions past the deadline ----------------------------------------------------------------
    def due_at(self, dpu: DegradedDPU) -> datetime:
        wait = timedelta(seconds=self._request.policy.reprovision_after_seconds)
        return max(dpu.since, dpu.reprovision_asked_at or dpu.since) + wait

    def next_deadline(self) -> datetime | None:
        """When the next degraded DPU passes its deadline, not before a hold-back ends (None:
        none, or automatic reprovision off)."""
        if not self._request.policy.auto_reprovision:
            return None
        if not self.degraded:  # a hold-back still ends on time: the status says what is true now
            return None if self.hold_back is None else self.hold_back.until
        if self.asked is not None:  # its own request: told when it ends; a running one looked at
            if self.asked.awaiting_approval:
                return None
            return self._checked(self.asked) + timedelta(
                seconds=self._request.policy.reprovision_after_seconds
            )
        dues = [self.due_at(d) for d in self._still_down()]
        if not dues:  # each on its way back to Ready: DPF's next change wakes the monitor
            return None if self.hold_back is None else self.hold_back.until
        return min(dues) if self.hold_back is None else max(min(dues), self.hold_back.until)

    def _checked(self, asked: OwnRequest) -> datetime:
        return asked.checked_at or asked.asked_at or self.began

    def overdue(self, now: datetime) -> list[DegradedDPU]:
        """The degraded DPUs whose reprovision the owner is to be asked for now: none while the
        monitor holds back after an operator's no (a hold-back past its end is over)."""
        if not self._request.policy.auto_reprovision:
            return []
        if self.hold_back is not None:
            if now < self.hold_back.until:
                return []
            self._record(f"held back no more: the hold-back after {self.hold_back.why} ended")
            self.hold_back = None
        if self.asked is not None:  # its own request is held or runs: the entity tells its end
            return []
        return [d for d in self._still_down() if self.due_at(d) <= now]

    def _still_down(self) -> list[DegradedDPU]:
        """The degraded DPUs not on their way back to Ready (`PAST_NODE_EFFECT`: their services
        are back; a reprovision asked then was refused at its approval, and the monitor asked again)."""
        return [d for d in self.degraded if self.last_phases.get(d.dpu_id) not in PAST_NODE_EFFECT]

    def own_request_to_check(self, now: datetime) -> OwnRequest | None:
        """The monitor's own running request, one deadline after it was last seen running: the
        entity's record is read (`own_request_seen`) in case its end was not told (an entity
        ended by hand). None: nothing to read now."""
        asked, wait = self.asked, timedelta(seconds=self._request.policy.reprovision_after_seconds)
        if asked is None or asked.awaiting_approval or not self.degraded:
            return None
        return asked if self._checked(asked) + wait <= now else None

    def own_request_seen(self, found: OwnerOperationResult, now: datetime) -> str | None:
        """What the entity's record says of the monitor's own running request (`find_host_operation`
        since it was asked): still running (looked at again one deadline later; None), ended (as if
        told: `request_ended`), or unknown to the entity (no longer the monitor's: asked anew)."""
        asked = self.asked
        if asked is None:
            return None
        if found.workflow_id == asked.workflow_id and found.message == "running":
            self.asked = asked.model_copy(update={"checked_at": now})
            return None
        if found.workflow_id == asked.workflow_id and found.message.startswith("ended "):
            ended = found.message.removeprefix("ended ")
            finished = HostFinished(
                host_id=self._request.host_id, workflow_id=asked.workflow_id, outcome=ended
            )
            return self.request_ended(finished, now)
        words = f"{asked.workflow_id} is no longer known to the entity ({found.message})"
        self._request_over(words)
        self._record(words)
        return words

    # -- how its request ended; an operator's no --------------------------------------------------------
    def request_ended(self, finished: HostFinished, now: datetime) -> str:
        """How the monitor's request ended, as the entity tells it (`host_finished`), recorded. An
        operator's no (`operator_said_no`) holds the monitor back: no new request for the host for
        `policy.hold_back_seconds`; the hold-back and why are in its status. Returns the words."""
        own = self.asked is not None and self.asked.workflow_id == finished.workflow_id
        words = f"{finished.workflow_id} {finished.outcome}"
        if not own and words == self.last_ended:  # told twice (the record read, then the signal)
            return words
        if own:
            self._request_over(words)
        self.last_ended = words
        me = names.monitor_workflow_id(self._request.host_id)
        if not finished.outcome.startswith(f"withdrawn by {me}"):  # its own: the answer records it
            self._record(words)
        wait = self._request.policy.hold_back_seconds
        if operator_said_no(finished.outcome, me) and wait > 0:
            self.hold_back = HoldBack(since=now, until=now + timedelta(seconds=wait), why=words)
            return f"{words}; holding back until {iso_z(self.hold_back.until)}"
        return words

    def resume(self, request: OperatorRequest) -> str:
        """An operator ends the hold-back (`resume`); refused (ValueError) when there is none."""
        if self.hold_back is None:
            raise ValueError(f"the monitor of {self._request.host_id} is not holding back: nothing to resume")
        why = f": {request.reason}" if request.reason else ""
        words = f"resumed by {request.requested_by}{why} (held back after {self.hold_back.why})"
        self._record(words)
        self.hold_back = None
        return words

    def _request_over(self, words: str) -> None:
        """The monitor's own request is pending no more (ended, withdrawn, or unknown to the
        entity): no longer held as asked, and each DPU it named that is still degraded shows how
        it ended instead of the answer it was asked with (`host monitor --status` shows what is
        true now, never a request that no longer exists)."""
        asked, self.asked = self.asked, None
        if asked is None:
            return
        for dpu in self.degraded:
            if dpu.dpu_id in asked.dpu_ids and dpu.reprovision_asked_at is not None:
                self._keep(dpu.model_copy(update={"reprovision_outcome": words}))

    def _record(self, words: str) -> None:
        self.requests = [*self.requests, words][-HISTORY_KEPT:]

    def reprovision_answered(
        self, due: list[DegradedDPU], answer: OwnerReprovisionResult, now: datetime
    ) -> str:
        """The owner's answer, recorded on each DPU asked for (their next deadline counts from now);
        the answer in words."""
        outcome = f"{answer.outcome}: {answer.workflow_id or answer.message}"
        if answer.outcome == "maintenance":  # what it would have done, not done; not queued for later
            held = answer.message.split(" refused (to run it anyway", 1)[0].rsplit("; ", 1)[0]
            outcome = f"would have asked for a reprovision; not asked: {held}"
        if answer.outcome in ("accepted", "awaiting-approval"):
            self.reprovisions_requested += 1
        ids = ", ".join(sorted(d.dpu_id for d in due))
        if answer.outcome == "gone":  # DPF no longer has them: nothing to reprovision, ever
            gone = [d.dpu_id for d in due if not answer.gone or d.dpu_id in answer.gone]
            self._forget(gone)
            outcome += f"; {', '.join(gone)} not asked for again"
        self.requests = [*self.requests, f"{ids}: {outcome}"][-HISTORY_KEPT:]
        if answer.outcome == "gone":
            return outcome
        if answer.outcome in ("accepted", "awaiting-approval") and answer.workflow_id:
            self.last_ended = ""  # a new request: its end is news, even in the last one's words
            self.asked = OwnRequest(
                workflow_id=answer.workflow_id,
                dpu_ids=tuple(sorted(d.dpu_id for d in due)),
                awaiting_approval=answer.outcome == "awaiting-approval",
                asked_at=now,
            )
        for dpu in due:
            self._keep(dpu.model_copy(update={"reprovision_asked_at": now, "reprovision_outcome": outcome}))
        return outcome

    def _forget(self, dpu_ids: list[str]) -> None:
        """DPUs DPF no longer has (a removal took them out): no longer degraded, watched or shown;
        a DPU of that id created again later is a new one (its first sight is not a fall)."""
        self.degraded = [d for d in self.degraded if d.dpu_id not in dpu_ids]
        for dpu_id in dpu_ids:
            for seen in (self.last_phases, self.last_uids, self.since, self.last_started):
                seen.pop(dpu_id, None)

    def stale_request(self) -> tuple[str, str] | None:
        """The monitor's own request awaiting approval whose reason no longer holds (none of the
        DPUs it named is degraded now: Ready again, or gone), and why, for the entity's `withdraw`:
        an approval given later would reprovision a healthy host. None: nothing to withdraw."""
        asked = self.asked
        if asked is None or not asked.awaiting_approval:
            return None
        if any(self._degraded(dpu_id) is not None for dpu_id in asked.dpu_ids):
            return None
        ready = {d for d in asked.dpu_ids if self.last_phases.get(d) == PHASE_READY}
        why = ", ".join(
            f"{d} {'is Ready again' if d in ready else 'is no longer degraded'}" for d in asked.dpu_ids
        )
        return asked.workflow_id, f"{why}: the reprovision is no longer needed"

    def withdrawal_answered(self, dpu_ids: tuple[str, ...], answer: OwnerReprovisionResult) -> str:
        """The entity's answer to the monitor's `withdraw` of its request for `dpu_ids`, recorded;
        the request is no longer pending either way (withdrawn, or approved and started meanwhile:
        its end is told)."""
        ids = ", ".join(dpu_ids)
        outcome = f"{answer.outcome}: {answer.message}"
        if answer.outcome != "withdrawn":  # too late: not a refusal of anything still pending (40f)
            asked = self.asked.workflow_id if self.asked is not None else "its request"
            outcome = (
                f"not withdrawn: {asked} no longer awaited approval (approved, or ended, before the "
                "withdrawal reached it); its end is recorded as told"
            )
        self._request_over(outcome)
        self.requests = [*self.requests, f"{ids}: {outcome}"][-HISTORY_KEPT:]
        return outcome

    # -- what the monitor shows and hands over ---------------------------------------------------------
    def status(self) -> HostMonitorStatus:
        """Pool state, each DPU's phase and time in it, the degraded DPUs and what was asked."""
        dpus = tuple(
            DPUProgress(dpu_id=i, phase=p, since=self.since.get(i, self.began))
            for i, p in self.last_phases.items()
        )
        deadline = self.next_deadline()
        down = ", ".join(sorted(d.dpu_id for d in self.degraded))
        resume = f"(resume: metalflow host monitor {self._request.host_id} --resume)"
        if self.hold_back is not None and not self.degraded:
            waiting = (
                f"a Ready DPU falling to Node Effect; holding back until {iso_z(self.hold_back.until)} "
                f"after {self.hold_back.why} {resume}"
            )
        elif deadline is not None and self.hold_back is not None:
            waiting = (
                f"recovery of {down}; holding back until {iso_z(self.hold_back.until)} after "
                f"{self.hold_back.why} (resume: metalflow host monitor {self._request.host_id} --resume)"
            )
        elif deadline is not None:
            waiting = f"recovery of {down}, or the reprovision deadline {iso_z(deadline)}"
        elif self.degraded and self.asked is not None and self.asked.awaiting_approval:
            waiting = (  # its request waits: nothing more is asked (`next_deadline`)
                f"recovery of {down} (its {self.asked.workflow_id} is withdrawn then), or the approval "
                f"of it (metalflow approve {self._request.host_id}); nothing more is asked meanwhile"
            )
        elif self.degraded:
            waiting = f"recovery of {down} (automatic reprovision is off)"
        else:
            waiting = "a Ready DPU falling to Node Effect"
        return HostMonitorStatus(
            host_id=self._request.host_id,
            pool_state=self.pool_state,
            phase=OUT_OF_POOL_PHASE if self.degraded else WATCHING,
            waiting_for=waiting,
            dpus=dpus,
            degraded=tuple(self.degraded),
            history=tuple(self.history),
            events_seen=self.events_seen,
            runs=self.runs,
            reprovisions_requested=self.reprovisions_requested,
            requests=tuple(self.requests),
            started_at=self.began,
            unplanned_resets=tuple(self.unplanned),
            unplanned_total=self.unplanned_total,
            hold_back=self.hold_back,
            own_request=self.asked,
        )

    def handed_over(self, stop: OperatorRequest | None) -> MonitorState:
        """The memory the next run starts from: this one, the run counted, and an abort accepted
        while this run handed over (the next run then stops at once)."""
        self.runs += 1
        self.stop = stop
        return self
