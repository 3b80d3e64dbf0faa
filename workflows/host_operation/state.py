"""What a host operation knows, and what it decides from it: `HostOperationState`.

The runbook (`workflow.py`) asks the state, then acts: the state holds every fact the run has
gathered (the DPUs under the operation, what it deleted, its reboots and their counts, DPF's
pending request, the resets it did not make) and answers, as pure functions of those facts and
of DPF's newest state, what the runbook does next:

- **Error by reason** (`error_call`): reasons of a DPF configuration problem
  (`dpf_barrier.PARK_REASONS`) park the run for an operator (`retry` reads again, `abort`):
  deleting the DPU would recreate it into the same Error. Any other is reprovisioned within the
  per-DPU and per-host budgets (`max_dpu_error_reprovisions`, `max_host_error_reprovisions`),
  then `DPUFailed`: an Error that comes back is not cured by another delete.
- **The reset's method** (`reboot_method`, DOMAIN.md 2.5): the method DPF requires (the
  DPUNode's aggregate). `PowerCycle` (or none named, or `Unknown`) gets a cold power cycle; a
  lesser method (`SystemLevelReset`, `SystemReboot`, `FirmwareReset`, `DPUWarmReboot`) a warm
  `ForceRestart` where the BMC offers it and can prove it (`policy.warm_reset`), else a cold one.
  A re-issued reboot is always cold (`force_off`), and after `max_power_cycle_retries` re-issues
  an operator decides (`after_silence`).
- **The reboot-loop bound** (`reboot_loop`, `round_started`): a DPU that asks for more host
  reboots of one sequence than `policy.max_reboot_sequence_count` ends the run with `RebootLoop`
  naming it, before any reboot for that round (a loop costs a host power cycle each round). The
  host reboots are this run's rounds the DPU asked for since its sequence began, not the agent's
  `rebootSequenceCount`: that one also counts the DPU's own reboots (FirmwareReset,
  DPUWarmReboot) and stops at 5 by itself (DPF agent `reboot.go` `checkRebootSequenceCount`,
  simulators/dpf/BEHAVIOUR.md A1-A2).
- **DPF's deadline** (`deadline_at`, `wait_bound`): the reboot must be done within
  `policy.dpf_reboot_deadline_seconds` (2 h) of DPF asking, or the DPU's cluster-join secret
  expires (it stays in `DPU Cluster Config`). A wait still pending
  `policy.escalate_before_deadline_seconds` before the deadline asks an operator, naming it, once
  per request; the status query shows `reboot_deadline_at`.
- **The counts** (`reboot_started`, `rebooted`): attempts are attempts, the BMC's refusals
  included; the generation moves once per reboot that happened; a power cycle is counted only
  when the BMC reset the host for us.
- **Resets metalflow did not make** (`observe`, `unplanned_reset`): recorded in the status and
  the memo (one history event each): a DPU whose agent restarted (`agentStatus.lastStartupTime`) beyond
  the restarts our own reboots explain, a DPU moved back to an earlier phase by a move DPF does
  not make itself, a host the BMC shows reset after the barrier was reached (the reboot then
  takes that reset as done: `owed_since`, never a second reboot; a reset before the barrier may
  have come before a DPU's install, so it does not count). The runbook re-plans from the state
  it reads.
- **The status** (`status`): the query's answer, built from the run's own observations, so a
  query never does I/O.

No temporalio here, no clock (the time is an argument), no I/O, no randomness: tests ask the
same questions of hand-written states without a server (tests/fast/test_host_operation_state.py).

Why a dataclass and not a pydantic model: the state never leaves the run (no continue-as-new,
no payload), so it needs no contract, no validation on each change, and it is mutable by nature.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, Literal

from contracts.models.dpf import DPUState, HostDPFState, HostRef
from contracts.models.host import (
    DPUProgress,
    HostOperationInput,
    HostOperationKind,
    HostOperationResult,
    HostOperationStatus,
    HostRebootInput,
    OperationPolicy,
)
from contracts.models.inventory import HostInventory
from contracts.wording import plural
from workflows.host_operation.left_words import abort_leaves, reached_words, reprovision_left
from workflows.parts import dpf_barrier as barrier

UNPLANNED_KEPT: Final = 20  # unplanned resets kept in the status and memo

Silence = Literal["reissue", "barrier", "ask"]
"""What DPF's silence after a reboot calls for: the reboot again (the next generation), back to
the barrier (a DPU started installing meanwhile), or an operator."""


@dataclass(frozen=True)
class ErrorCall:
    """What one DPU in Error calls for, and the words that go with it.

    `park`: ask an operator (`words` is the question); `reprovision`: delete it so DPF recreates
    it (`words` is shown); `fail`: end the run with `DPUFailed` (`words` is its message).
    """

    kind: Literal["park", "reprovision", "fail"]
    dpu_id: str
    words: str


@dataclass
class HostOperationState:
    """Every fact a host operation's run knows; the decisions are its methods."""

    request: HostOperationInput
    started_at: datetime
    dpu_ids: tuple[str, ...] = ()  # the DPUs under the operation (all of the host's once resolved)
    host: HostRef | None = None
    replaced: dict[str, str] = field(default_factory=dict)  # DPU id -> uid this run deleted
    error_reprovisions: dict[str, int] = field(default_factory=dict)  # DPU id -> reprovisions for Error
    host_error_reprovisions: int = 0
    error_words: dict[str, str] = field(default_factory=dict)  # DPU id -> its last Error, in words
    hold_released: bool = False
    changes: list[str] = field(default_factory=list)  # what this run changed, in order
    reboots_requested: int = 0  # reboot rounds DPF asked for
    power_cycles: int = 0  # resets the BMC accepted (what its power log shows)
    reboots: int = 0  # reboots that happened: the BMC's, and those confirmed by hand
    reboot_attempts: int = 0  # reboots started, the BMC's refusals included
    generation: int = 0  # the host's boot generation: moves once per reboot that happened
    cycled_without_ack: bool = False  # a reboot happened that DPF was not told of yet
    cleaning_up: bool = False  # the run is ending early: its calls are neither aborted nor escalated
    acks: int = 0  # acknowledgements made (each its own token)
    asked_at: datetime | None = None  # when this run first saw DPF's pending reboot request
    escalated_for: datetime | None = None  # the request whose deadline was escalated
    unplanned: list[str] = field(default_factory=list)  # resets nobody of ours made, newest last
    memo_shown: int = 0  # unplanned resets written to the memo
    seen: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # DPU -> (uid, phase, agent start)
    restarts_owed: dict[str, int] = field(default_factory=dict)  # DPU -> agent restarts our reboots explain
    # DPU -> (uid, host reboots of ours it asked for in its reboot sequence, its count at the last)
    reboots_asked: dict[str, tuple[str, int, int]] = field(default_factory=dict)

    @classmethod
    def start(cls, request: HostOperationInput, now: datetime) -> HostOperationState:
        """The state of a run that starts now."""
        return cls(
            request=request, started_at=now, dpu_ids=request.dpu_ids or (), generation=request.boot_generation
        )

    @property
    def policy(self) -> OperationPolicy:
        return self.request.policy

    # -- the host -------------------------------------------------------------------------------
    def take_inventory(self, inventory: HostInventory) -> str | None:
        """The DPUs under the operation (all of the host's when none were named) and the host's
        DPF objects; a refusal's words when a named DPU is not the host's or it has none."""
        known = tuple(d.id for d in inventory.dpus)
        unknown = sorted(set(self.dpu_ids) - set(known))
        if unknown:
            return f"host {inventory.host_id} has no DPU {', '.join(unknown)} (it has {', '.join(known)})"
        self.dpu_ids = self.dpu_ids or known
        if not self.dpu_ids:
            return f"host {inventory.host_id} has no DPUs"
        self.host = HostRef.of(inventory)
        return None

    def deleted(self, dpu_id: str, uid: str, name: str, detail: str) -> None:
        """This run deleted DPU `dpu_id` (object `uid`) so DPF recreates it."""
        self.replaced[dpu_id] = uid
        more = "" if detail == "deleted" else f": {detail}"  # the delete's own word, said once
        self.changes.append(f"deleted DPU {name} (uid {uid}){more}")

    # -- DPF's state, as the operation means it -------------------------------------------------
    def current(self, dpf: HostDPFState, dpu_id: str) -> DPUState | None:
        """The DPU object the operation means now (not one it replaced, not one being deleted)."""
        return barrier.current_dpu(dpf, dpu_id, self.replaced.get(dpu_id))

    def held(self, dpf: HostDPFState) -> bool:
        return barrier.held_or_beyond(dpf, self.dpu_ids, self.replaced)

    def release_owed(self, dpf: HostDPFState, seen_since_release: bool) -> bool:
        return barrier.release_owed(dpf, self.dpu_ids, self.replaced, seen_since_release=seen_since_release)

    def at_reboot_barrier(self, dpf: HostDPFState) -> bool:
        return barrier.reboot_barrier_reached(dpf, self.dpu_ids, self.replaced)

    def all_ready(self, dpf: HostDPFState) -> bool:
        return barrier.all_ready(dpf, self.dpu_ids, self.replaced)

    def ready_or_at_barrier(self, dpf: HostDPFState) -> bool:
        return self.all_ready(dpf) or self.at_reboot_barrier(dpf)

    def marks(self, dpf: HostDPFState) -> object:
        """What changes when DPF moves a DPU on after a reboot (`dpf_barrier.progress_marks`)."""
        return barrier.progress_marks(dpf, self.dpu_ids)

    def asks_for_reboot(self, dpf: HostDPFState) -> bool:
        """DPF asks for a host reboot (the DPUNode's reboot-required annotation)."""
        return dpf.node is not None and dpf.node.waiting_for_reboot

    def hold_words(self, dpf: HostDPFState) -> str:
        """What the wait for the hold waits for, in words."""
        return f"every DPU held in Node Effect ({self._count(dpf, 'Node Effect')} of {len(self.dpu_ids)})"

    def barrier_words(self, dpf: HostDPFState) -> str:
        """What the wait for the reboot barrier waits for, and which DPUs are not there yet."""
        laggards = barrier.elsewhere(dpf, self.dpu_ids, self.replaced, ("Rebooting", "Ready"))
        return (
            f"every DPU to reach Rebooting ({self._count(dpf, 'Rebooting')} of {len(self.dpu_ids)}) "
            f"or Ready ({self._count(dpf, 'Ready')} of {len(self.dpu_ids)})"
            + (f"; not there yet: {', '.join(laggards)}" if laggards else "")
        )

    def _count(self, dpf: HostDPFState, phase: str) -> int:
        return barrier.count(dpf, self.dpu_ids, self.replaced, (phase,))

    # -- DPUs in Error --------------------------------------------------------------------------
    def failed(self, dpf: HostDPFState) -> list[DPUState]:
        """The DPUs under the operation in Error."""
        return barrier.failed(dpf, self.dpu_ids, self.replaced)

    def error_call(self, dpu: DPUState) -> ErrorCall:
        """What `dpu`, in Error, calls for (`ErrorCall`): park for a reason reprovisioning cannot
        fix; else reprovision while the DPU's and the host's budgets last; else fail."""
        dpu_id = dpu.dpu_id or dpu.name
        found = dpu.error_reason()
        if found is not None and found[1] in barrier.PARK_REASONS:
            return ErrorCall(
                "park",
                dpu_id,
                f"DPU {dpu.name} is in Error ({found[0]}: {found[1]}: {dpu.failure_message()}): a DPF "
                "configuration problem that reprovisioning cannot fix, and DPF never retries: fix it "
                "before a retry (DPF is read again)",
            )
        done = self.error_reprovisions.get(dpu_id, 0)
        why = f"{found[0]}: {found[1]}: " if found is not None else ""
        if done >= self.policy.max_dpu_error_reprovisions:
            return ErrorCall(
                "fail",
                dpu_id,
                f"DPU {dpu.name} in Error after {done} automatic reprovisions: {why}{dpu.failure_message()}",
            )
        if self.host_error_reprovisions >= self.policy.max_host_error_reprovisions:
            return ErrorCall(
                "fail",
                dpu_id,
                f"DPU {dpu.name} in Error ({why}{dpu.failure_message()}); the host's budget of "
                f"{self.policy.max_host_error_reprovisions} automatic reprovisions is spent",
            )
        words = f"DPU {dpu.name} is in Error ({why}{dpu.failure_message()}): reprovisioning it"
        return ErrorCall("reprovision", dpu_id, words)

    def spend_reprovision(self, dpu_id: str, words: str = "") -> None:
        """A reprovision for Error is spent from the budgets; its words kept (`last_error`)."""
        self.error_reprovisions[dpu_id] = self.error_reprovisions.get(dpu_id, 0) + 1
        if words:  # kept past its reprovision (done once the run goes on): said in the past
            self.error_words[dpu_id] = words.replace(" is in", " was in", 1).replace("oning it", "oned it")
        self.host_error_reprovisions += 1

    # -- the reboot DPF asks for ----------------------------------------------------------------
    def _asking(self, dpf: HostDPFState) -> list[tuple[str, DPUState, int]]:
        """The DPUs asking for a host reboot in their reboot sequence (v26: they report the
        agent's count; `Rebooting`), each with the number of this request: one more than the
        rounds of ours it asked for since the sequence began."""
        asking = []
        for dpu_id in self.dpu_ids:
            dpu = self.current(dpf, dpu_id)
            if dpu is None or dpu.phase != "Rebooting" or dpu.reboot_sequence_count is None:
                continue
            asking.append((dpu_id, dpu, self._reboots_asked(dpu_id, dpu) + 1))
        return asking

    def _reboots_asked(self, dpu_id: str, dpu: DPUState) -> int:
        """Host reboots of ours this DPU asked for in its current sequence: none for another
        object, or once its count went down (NoAction reset it: a new sequence)."""
        uid, rounds, count = self.reboots_asked.get(dpu_id, ("", 0, 0))
        current = dpu.reboot_sequence_count
        if uid != dpu.uid or current is None or current < count:
            return 0
        return rounds

    def reboot_loop(self, dpf: HostDPFState) -> str | None:
        """The refusal's words when a DPU asks for more host reboots of one sequence than the
        policy allows (`max_reboot_sequence_count`); None: the reboot may go ahead. The host
        reboots are ours (`round_started`), not the agent's `rebootSequenceCount`, which also
        counts the DPU's own FirmwareReset/DPUWarmReboot (DPF agent `reboot.go`
        `checkRebootSequenceCount`: every method but NoAction adds one, at 5 it refuses)."""
        bound = self.policy.max_reboot_sequence_count
        for _, dpu, asked in self._asking(dpf):
            if asked > bound:
                return (
                    f"DPU {dpu.name} asks for host reboot {asked} of one reboot sequence "
                    f"(rebootSequenceCount {dpu.reboot_sequence_count}, which also counts the DPU's own "
                    f"reboots; method {dpu.reboot_method or 'not named'}); the policy "
                    f"allows {bound} (max_reboot_sequence_count): a reboot loop, not rebooted again. "
                    "DPF's request stays on the DPUNode; reprovision the DPU once its cause is fixed"
                )
        return None

    def round_started(self, dpf: HostDPFState) -> None:
        """A reboot round of ours starts for DPF's request: each DPU asking for it has asked
        for one host reboot more in its sequence."""
        self.reboots_requested += 1
        for dpu_id, dpu, asked in self._asking(dpf):
            self.reboots_asked[dpu_id] = (dpu.uid, asked, dpu.reboot_sequence_count or 0)

    def reboot_method(self, dpf: HostDPFState, *, force_off: bool) -> tuple[str | None, bool]:
        """The method DPF asks for (None: none named) and whether the reset is warm: the policy
        allows it, the method is one a warm reset meets, and the reboot is not a forced one."""
        method = barrier.required_method(dpf, self.dpu_ids)
        warm = self.policy.warm_reset and not force_off and barrier.host_reset_for(method) == "warm"
        return method, warm

    def force_off(self, retry: int) -> bool:
        """Whether reboot `retry` of a round (0: the first) is ForceOff then On."""
        return retry >= self.policy.force_off_from_retry

    # -- the agents a reboot of ours must restart (v26; `dpf_barrier.not_restarted`) ------------
    def agents_silent_words(self, stale: list[str], starts: dict[str, tuple[str, str]], retries: int) -> str:
        """Why the run re-issues the reboot or asks an operator: the agents that did not restart."""
        which = ", ".join(f"{d} (agentStatus.lastStartupTime still {starts[d][1]})" for d in stale)
        return (
            f"the DPU agent of {which} did not start again within "
            f"{self.policy.agent_restart_wait_seconds:g} s of each of {plural(retries + 1, 'reboot')} "
            f"(last: generation {self.generation}): the reset did not reach the DPU, and DPF waits in "
            "DPU Config for a fresh agent start"
        )

    def after_silence(self, retries: int, *, installing: bool) -> Silence:
        """DPF did not move on within `reboot_wait_seconds` of a reboot that was re-issued
        `retries` times: again (while re-issues are left), back to the barrier (a DPU started
        installing meanwhile), or ask an operator."""
        if retries >= self.policy.max_power_cycle_retries:
            return "ask"
        return "barrier" if installing else "reissue"

    # -- DPF's deadline -------------------------------------------------------------------------
    def deadline_at(self, dpf: HostDPFState) -> datetime | None:
        """DPF's deadline for the reboot it asks for now: `dpf_reboot_deadline_seconds` from when
        it asked (its condition's time, or when this run first saw the request if that is earlier
        or unknown); None when no request is pending."""
        if self.asked_at is None or not self.asks_for_reboot(dpf):
            return None
        asked = self.asked_at
        assert dpf.node is not None
        stamped = _parse_time(dpf.node.reboot_requested_at)
        if stamped is not None and stamped < asked:
            asked = stamped
        return asked + timedelta(seconds=self.policy.dpf_reboot_deadline_seconds)

    def escalation_left(self, dpf: HostDPFState, now: datetime) -> float | None:
        """Seconds until the pending request is escalated (None: none pending, or escalated)."""
        deadline = self.deadline_at(dpf)
        if deadline is None or self.escalated_for == self.asked_at:
            return None
        escalate_at = deadline - timedelta(seconds=self.policy.escalate_before_deadline_seconds)
        return (escalate_at - now).total_seconds()

    def wait_bound(self, dpf: HostDPFState, now: datetime) -> tuple[float, bool]:
        """How long a wait on DPF lasts before an operator is asked, and whether it ends by the
        deadline's escalation (True) rather than by `phase_timeout_seconds` of silence."""
        timeout = self.policy.phase_timeout_seconds
        left = self.escalation_left(dpf, now)
        if left is not None and left < timeout:
            return max(left, 0.001), True
        return timeout, False

    def escalated(self) -> None:
        """The pending request's deadline was put to an operator: not again for this request."""
        self.escalated_for = self.asked_at

    def deadline_words(self, dpf: HostDPFState, waiting_for: str) -> str:
        """The escalation's question: the deadline, why it matters, what the run waits for."""
        deadline = self.deadline_at(dpf)
        when = deadline.isoformat() if deadline is not None else "unknown"
        hours = self.policy.dpf_reboot_deadline_seconds / 3600
        return (
            f"DPF asked for the host reboot and it must be done by {when} ({hours:g} h after DPF asked): "
            "past that the DPU's cluster-join secret expires and it stays in DPU Cluster Config "
            f"(docs/DOMAIN.md 2.5). Still waiting for {waiting_for}"
        )

    # -- reboots --------------------------------------------------------------------------------
    def reboot_started(self) -> None:
        """A reboot is started: one attempt more, and one agent restart per DPU it explains."""
        self.reboot_attempts += 1
        for dpu_id in self.dpu_ids:
            self.restarts_owed[dpu_id] = self.restarts_owed.get(dpu_id, 0) + 1

    def reboot_input(
        self, generation: int, *, force_off: bool, warm: bool, owed_since: datetime | None, operation_id: str
    ) -> HostRebootInput:
        """The reboot of the host to `generation` (its BMC failure escalated to this run's operator)."""
        request = self.request
        assert self.host is not None, "a reboot before the host is known"
        return HostRebootInput(
            host_id=self.host.host_id,
            boot_generation=generation,
            requested_by=request.requested_by,
            reason=request.reason or f"DPF asked for a reboot ({operation_id})",
            force_off=force_off,
            warm=warm,
            owed_since=owed_since,
            policy=self.policy,
            escalate_bmc_failure=True,
        )

    def rebooted(self, generation: int, *, power_cycle: bool) -> None:
        """A reboot happened (the BMC's; a person's, `power_cycle` False): the host reached
        `generation`, and DPF is to be told."""
        self.generation = generation
        self.reboots += 1
        self.power_cycles += int(power_cycle)
        self.cycled_without_ack = True

    def next_ack(self) -> int:
        """The number of the acknowledgement about to be made (its token's)."""
        self.acks += 1
        return self.acks

    def after_acknowledgement(self, dpf: HostDPFState) -> HostDPFState:
        """The state to read on from after our removal of the reboot-required annotation, when
        its answer gave no resourceVersion (else `DPFWatch.written`: the node as written).

        Why: DPF may set the annotation again at once (a BF4's second round) and, with fast
        phases, the watch can see removal and re-set as one unchanged state and signal nothing;
        a signal sent just before the removal would also still carry the annotation. A new read
        whose baseline is "annotation removed" sees any annotation set since.
        """
        if dpf.node is None:
            return dpf
        return dpf.model_copy(update={"node": dpf.node.model_copy(update={"reboot_required": None})})

    def acknowledged(self, *, changed: bool) -> None:
        """DPF was told the host rebooted: a request seen from now on is its next one."""
        if changed:
            self.changes.append(f"removed the reboot-required annotation (generation {self.generation})")
        self.asked_at = None

    # -- resets nobody of ours made -------------------------------------------------------------
    def observe(self, dpf: HostDPFState, now: datetime) -> list[str]:
        """Take a new state: note DPF's new request, and return the resets no reboot of ours
        explains (each also recorded with `now`): an agent restart beyond those owed, a move back
        DPF does not make by itself."""
        if self.asks_for_reboot(dpf) and self.asked_at is None:
            self.asked_at = now
        found_now: list[str] = []
        for dpu_id in self.dpu_ids:
            dpu = dpf.dpu(dpu_id)
            if dpu is None or dpu.deleting:
                continue
            if dpu.reboot_sequence_count == 0:
                self.reboots_asked.pop(dpu_id, None)  # NoAction ended its reboot sequence
            before = self.seen.get(dpu_id)
            found = barrier.unplanned_change(before, dpu)
            # A state without the agent's start time (a watch that does not carry it) keeps the last known.
            started = dpu.agent_started_at or (before[2] if before and before[0] == dpu.uid else "")
            self.seen[dpu_id] = (dpu.uid, dpu.phase, started)
            if found == "restarted" and self.restarts_owed.get(dpu_id, 0) > 0:
                self.restarts_owed[dpu_id] -= 1  # our reboot restarted it
            elif found == "restarted":
                started_at = dpu.agent_started_at
                found_now.append(
                    f"DPU {dpu_id} restarted (agentStatus.lastStartupTime {started_at}) in {dpu.phase}"
                )
            elif found is not None:
                found_now.append(f"DPU {dpu_id} {found}")
        for what in found_now:
            self.unplanned_reset(what, now)
        return found_now

    def unplanned_reset(self, what: str, now: datetime) -> None:
        """Record a reset nobody of ours made (the newest `UNPLANNED_KEPT`)."""
        self.unplanned.append(f"{now.isoformat(timespec='seconds')}: {what} (not by metalflow)")
        del self.unplanned[:-UNPLANNED_KEPT]

    def unplanned_to_show(self) -> list[str] | None:
        """The unplanned resets to write to the memo when they changed since the last write."""
        if len(self.unplanned) == self.memo_shown:
            return None
        self.memo_shown = len(self.unplanned)
        return list(self.unplanned)

    # -- what the run shows ---------------------------------------------------------------------
    def status(
        self,
        *,
        phase: str,
        waiting_for: str,
        dpf: HostDPFState,
        phases: Mapping[str, tuple[str, datetime]],
        rebooting_to: int | None,
        intervention: str | None,
    ) -> HostOperationStatus:
        """The `status` query's answer: per DPU its phase and since when (`phases`, as the DPF
        watch's clock saw them), the counts, the reboot in flight, DPF's deadline."""
        dpus = []
        for dpu_id in self.dpu_ids:
            dpu_phase, since = phases.get(dpu_id, ("", self.started_at))
            count = self.error_reprovisions.get(dpu_id, 0)
            dpus.append(
                DPUProgress(
                    dpu_id=dpu_id, phase=dpu_phase, since=since, error_reprovisions=count,
                    last_error=self.error_words.get(dpu_id, ""),
                )
            )  # fmt: skip
        return HostOperationStatus(
            host_id=self.request.host_id,
            operation=self.request.kind.value,
            phase=phase,
            waiting_for=waiting_for,
            dpus=tuple(dpus),
            reboots_requested=self.reboots_requested,
            power_cycles_issued=self.power_cycles,
            reboot_attempts=self.reboot_attempts,
            rebooting_to=rebooting_to,
            boot_generation=self.generation,
            manual_intervention_reason=intervention,
            started_at=self.started_at,
            reboot_deadline_at=self.deadline_at(dpf),
            unplanned_resets=tuple(self.unplanned),
        )

    def completed_words(self) -> str:
        return f"every DPU Ready after {plural(self.power_cycles, 'power cycle')}"

    def installing_refusal(self) -> str | None:
        """Why an abort that spares installing DPUs (`finish_installing`) is refused now: the hold
        was released, so the DPUs install and will ask for a host reboot only this run gives."""
        if not self.hold_released:
            return None
        return (
            "its DPUs install (their hold was released): they will ask for a host reboot that only "
            "this operation gives, so it finishes its reboot round"
        )

    def abort_leaves(self) -> str:
        """What an abort accepted now leaves the host in (`left_words.abort_leaves`)."""
        return abort_leaves(self.replaced)

    def left_behind(self) -> str:
        """An early end's words: generation (`reached_words`), changes, a reprovision's DPUs and host."""
        said = reached_words(self.generation, self.request.boot_generation, self.changes)
        if self.request.kind != HostOperationKind.REPROVISION or not self.dpu_ids:
            return said
        return f"{said}. {reprovision_left(self.dpu_ids, self.replaced, self.seen, self.power_cycles)}"

    def result(self, now: datetime) -> HostOperationResult:
        return HostOperationResult(
            host_id=self.request.host_id,
            operation=self.request.kind.value,
            dpu_ids=self.dpu_ids,
            reboots=self.reboots,
            boot_generation=self.generation,
            started_at=self.started_at,
            finished_at=now,
        )


def _parse_time(value: str) -> datetime | None:
    """An RFC 3339 time as DPF writes it, or None."""
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
