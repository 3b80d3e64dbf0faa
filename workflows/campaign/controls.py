"""What each operator update does to a campaign, as a part of its state object (`CampaignState`,
state.py, derives from `OperatorControls` here): `pause`, `resume`, `abort`, `retry_failed`,
`skip_host` and `set_limits`, each with the refusal its validator raises (None: accepted). The
runbook's handlers only call these and wake the runbook, which acts at its next step.

- `resume` after a halt counts the failure budget from now and accepts the hosts waiting for an
  operator; a failed canary of the first N hosts is taken as it is. A failed deployment canary is
  not: resuming would point the fleet's deployment without a passed canary (`resume_refusal`).
- `abort` starts no new host; with `cancel_running` the running operations are asked to abort
  (`to_abort`) with `finish_installing`: one whose DPUs already install refuses and finishes its
  reboot round (`abort_answered` records which, and what each aborted one is left in).
- `retry_failed` puts every failed host back first, each under a new request id; the budget
  counts from now.
- `skip_host` leaves a waiting host out; refused for a host in flight, and for one whose
  DPUDeployment the campaign has not pointed yet (`skip_blocked`).
- `site_blocked` (sent by `metalflow site check`, not by a person) holds a newer check to the
  admission's rule: each host the check blocks that has not started is skipped with the check's
  reason, as `skip_host` would (a failed one too: `retry_failed` would start it); one already
  running is named and left running (a check cannot stop it); one `skip_blocked` keeps is named.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts.models.campaign import AbortAnswer, AbortRequest, HostGroup, InFlight, Limits
from contracts.models.control import OperatorRequest
from contracts.wording import plural
from workflows.campaign import plan
from workflows.campaign.canary import CanaryLedger
from workflows.campaign.ledger import S


class OperatorControls(CanaryLedger):
    """The operator's updates (module docstring)."""

    def pause(self, request: OperatorRequest) -> str:
        self.paused_by = request
        flying = len(self.in_flight)
        return f"paused: no new host starts; {plural(flying, 'host')} in flight " + (
            "finishes" if flying == 1 else "finish"
        )

    def resume_refusal(self) -> str | None:
        """Why `resume` is refused now (its other conditions are the kernel's)."""
        if self.halted_reason is not None and self.deployment_canary and self.canary_verdict() == "failed":
            return (
                f"{self.halted_reason}: `resume` would point the fleet's DPUDeployment without a "
                "passed canary; `retry-failed` runs the canary again, `abort` ends the campaign"
            )
        return None

    def resume(self) -> str:
        """Go on after a pause or a halt; a halt's resume counts the budget from now, accepts the
        hosts waiting for an operator now, and takes a failed canary whose hosts ended as it is."""
        message = "resumed"
        if self.halted_reason is not None:
            message = f"resumed after the halt ({self.halted_reason}); the failure budget counts from now"
            self.halted_reason = None
            self.budget_failures_base = self.failures_total
            self.operator_accepted.extend(h for h in self.needs_operator if h not in self.operator_accepted)
            if not self.canary_passed and not self.canary_pool and self.canary_verdict() == "failed":
                self.canary_passed = True
        self.paused_by = None
        return message

    def abort_escalates(self, request: AbortRequest) -> bool:
        """An abort after an abort is taken only to also abort the running hosts."""
        return request.cancel_running and not self.cancel_running

    def take_abort(self, request: AbortRequest) -> None:
        """Start no new host; abort the running ones too (`cancel_running`); keep the changes
        outside the hosts (`keep_changes`, never undone by a later abort)."""
        self.keep_changes = self.keep_changes or request.keep_changes
        self.cancel_running = request.cancel_running

    def abort_promise(self, *, keep_changes: bool) -> str:
        fate = (
            "aborting them (one whose DPUs install finishes its reboot round)"
            if self.cancel_running
            else ("letting them finish")
        )
        promise = f"aborting: no new host starts; {len(self.in_flight)} in flight, {fate}"
        pointed = [self.changes[i] for i in self.pointed(("canary", "fleet"))]
        if pointed:
            verb = "keeping" if self.keep_changes or keep_changes else "then restoring"
            promise += f"; {verb} " + ", ".join(f"{c.deployment} {c.field}={c.previous}" for c in pointed)
        return promise

    def to_abort(self) -> tuple[list[InFlight], list[InFlight]]:
        """`abort` with `cancel_running`, once: the running operations to abort and the requests
        awaiting approval to withdraw; each stays in flight until its entity says how it ended,
        and counts as aborted (or skipped, withdrawn unstarted), never as a failure."""
        self.cancel_running = False
        running = [
            f
            for f in self.in_flight.values()
            if not f.awaiting_approval and f.host.host_id not in self.finishing
        ]
        waiting = [f for f in self.in_flight.values() if f.awaiting_approval]
        self.abort_sent.extend(
            f.workflow_id for f in (*running, *waiting) if f.workflow_id not in self.abort_sent
        )
        return running, waiting

    def abort_answered(self, answers: tuple[AbortAnswer, ...]) -> None:
        """How each operation took the abort: one that refused (its DPUs install) finishes its
        reboot round and counts as it ends; one aborted is left in what it said."""
        for answer in answers:
            flight = self.in_flight.get(answer.host_id)
            if flight is None or flight.workflow_id != answer.workflow_id:
                continue
            if answer.answer == "finishing":
                self.finishing[answer.host_id] = answer.words
                if answer.workflow_id in self.abort_sent:
                    self.abort_sent.remove(answer.workflow_id)  # not aborted: it counts as it ends
            elif answer.answer == "aborted" and answer.words:
                self.abort_left[answer.host_id] = answer.words

    def retry_refusal(self) -> str | None:
        if self.abort_request is not None:
            return f"the campaign is aborting (asked by {self.abort_request.requested_by})"
        if self.stopped_reason is not None:
            return f"the campaign is stopping: {self.stopped_reason}"
        return None if self.failed else "no host has failed"

    def retry_failed(self) -> str:
        """Put every failed host back at the front of the queue (a failed canary as the canary),
        each with a new request id; the budget counts from now and a halt is cleared."""
        hosts = [self.roster.ids[i] for i, state in enumerate(self.states) if state == S.FAILED]
        for host_id in hosts:
            self._set(host_id, S.REQUEUED)
            self.retried[host_id] = self.retried.get(host_id, 0) + 1
        self.failed = 0
        self.budget_failures_base = self.failures_total
        if not self.canary_passed:
            self.batch_left += len(hosts)
            self.canary_failed = 0
        self.halted_reason = None
        return f"retrying {len(hosts)} failed hosts"

    def skip_refusal(self, host_id: str, *, whole_deployment: Sequence[str] = ()) -> str | None:
        if (flight := self.in_flight.get(host_id)) is not None:
            return f"host {host_id} is in flight ({flight.workflow_id}); abort that operation instead"
        if not self.waiting(host_id):
            return f"host {host_id} is not waiting in this campaign (done, skipped or unknown)"
        return self.skip_blocked(host_id, whole_deployment)

    def skip_host(self, host_id: str, by: OperatorRequest) -> str:
        reason = f"skipped by {by.requested_by}" + (f": {by.reason}" if by.reason else "")
        reason += self.outdated_note(host_id)
        self.skip(host_id, reason)
        return f"{host_id} {reason}"

    def site_blocked(self, groups: Sequence[HostGroup], *, whole_deployment: Sequence[str] = ()) -> str:
        """A newer site check's blocked hosts (`groups`, each with its reason): those not started
        are skipped with it; the answer names, per host, what was done (none: nothing applied).

        A waiting host that may not be skipped (a DPUDeployment the campaign has not pointed yet
        selects it, or it is a canary host: `skip_blocked`) is not started either: skipped, it
        would turn Outdated once its deployment is pointed, and the deployment's selector cannot
        leave it out (no re-pointing without it). So the campaign halts, naming it and the finding:
        nothing more is pointed or started until `resume` (after the site is fixed: it runs the
        hosts as planned) or `abort` (the deployments pointed are put back)."""
        said: list[str] = []
        held: list[str] = []
        for group in groups:
            for host_id in group.host_ids:
                if (flight := self.in_flight.get(host_id)) is not None:
                    said.append(f"{host_id} already running ({flight.workflow_id}); a check cannot stop it")
                elif not self.waiting(host_id):
                    continue  # done, skipped, at the target, or not in this campaign
                elif (kept := self.skip_blocked(host_id, whole_deployment)) is not None:
                    held.append(f"{host_id} ({group.reason})")
                    said.append(f"{host_id} not started, and the campaign halts: {kept}")
                else:
                    self.skip(host_id, group.reason)
                    said.append(f"{host_id} skipped: {group.reason}")
        if held and self.halted_reason is None:
            self.halted_reason = (
                f"the site check blocks {'; '.join(held)}, which the campaign may not skip (its "
                "DPUDeployment is not pointed yet, or a canary host): nothing more is pointed or started; "
                "fix the site, run `metalflow site check` and `resume` (the hosts run as planned), or `abort`"
            )
        return "; ".join(said) if said else "no host of this campaign waits that the check blocks"

    def set_limits(self, limits: Limits) -> str:
        old, self.limits = self.limits, limits
        return f"limits {plan.describe_limits(old)} -> {plan.describe_limits(limits)}"
