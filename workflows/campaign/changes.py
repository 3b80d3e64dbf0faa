"""What a BFB or flavor campaign changes outside its hosts: its DPUDeployments, as a part of the
campaign's state object (`CampaignState`, state.py, derives from `DeploymentLedger` here).

The rules, each a pure function of the state:

- **When each is pointed** (`due_points`): the canary's deployment first, the fleet's only once the
  canary passed (`canary_passed`: a canary host done at the target and none failed), each inside
  a window, never while halted or paused (the runbook asks only then); one put back since (a
  failed canary, then `retry_failed`) is pointed again.
- **Which hosts they select**: the admission allowed a deployment only if every host it selects
  is one the campaign runs (or the whole deployment was asked for); until it is pointed, an
  operator's `skip` of such a host is refused (`skip_blocked`), since the deployment would turn
  it Outdated once pointed. A host skipped after its deployment was pointed (its entity refused
  it: an instance assigned since) reads Outdated: its reason says so (`outdated_note`).
- **What every ending puts back** (`restores_at_end`): a completed campaign keeps its own changes
  (they are its target); an aborted, stopped, failed or cancelled one puts back each it pointed,
  unless asked to keep them; changes a campaign that no longer runs left (`leftover`) are put
  back before any host starts, whatever this one is asked.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts.models.campaign import DeploymentChange
from workflows.campaign.ledger import HostLedger

OWN: tuple[str, ...] = ("canary", "fleet")
EVERY: tuple[str, ...] = ("leftover", "canary", "fleet")


class DeploymentLedger(HostLedger):
    """The campaign's DPUDeployment changes and their rules (module docstring)."""

    def due_points(self) -> list[int]:
        """The changes to point now (the runbook asks inside a window, not halted or paused): the
        canary deployment while the canary runs, the fleet's once it passed; each not pointed
        yet, or restored since."""
        return [
            index
            for index, change in enumerate(self.changes)
            if change.role in OWN
            and (change.role == "canary" or self.canary_passed)
            and (change.pointed_at is None or change.restored_at is not None)
        ]

    def pointed(self, roles: Sequence[str]) -> list[int]:
        """The changes of `roles` pointed and not put back (kept ones included)."""
        return [
            index
            for index, change in enumerate(self.changes)
            if change.role in roles and change.pointed_at is not None and change.restored_at is None
        ]

    def keep(self, index: int) -> str:
        """A pointed change kept as it is (`keep_changes`); what was done, in words."""
        change = self.changes[index]
        self.changes[index] = change.model_copy(update={"note": "kept as pointed (keep_changes)"})
        return f"kept {change.deployment} {change.field}={change.value}"

    def leftovers(self) -> list[int]:
        """Changes left by a campaign that no longer runs, not put back yet."""
        return self.pointed(("leftover",))

    def restores_at_end(self, outcome: str, *, keep: bool) -> list[int]:
        """The changes to put back as the campaign ends with `outcome` (module docstring); with
        `keep`, its own pointed changes are kept, and say so."""
        if outcome == "completed":
            return self.leftovers()
        if keep:
            for index in self.pointed(OWN):
                if not self.changes[index].note:
                    self.keep(index)
            return self.leftovers()
        return self.leftovers() + self.pointed(OWN)

    def covering(self, host_id: str) -> DeploymentChange | None:
        """The change whose deployment selects the host (the canary's for its pool, else the
        fleet's: the admission made every host it runs one of the two's)."""
        role = "canary" if host_id in self.canary_pool else "fleet"
        return next((c for c in self.changes if c.role == role), None)

    def skip_blocked(self, host_id: str, whole_deployment: Sequence[str]) -> str | None:
        """Why an operator may not skip this host now: it is a host of the deployment canary
        while it runs (its verdict counts it: a failed one skipped would let the fleet's
        deployment be pointed after a failed canary), or its deployment is not pointed yet."""
        if host_id in self.canary_pool and not self.canary_passed:
            return (
                f"host {host_id} is a canary host (DPUDeployment canary pool): the canary's verdict counts "
                "it; `retry-failed` runs a failed one again, `abort` ends the campaign"
            )
        change = self.covering(host_id)
        if (
            change is None
            or change.deployment in whole_deployment
            or (change.pointed_at and not change.restored_at)
        ):
            return None
        return (
            f"host {host_id} is selected by DPUDeployment {change.deployment}, which the campaign has "
            f"not pointed yet: skipped, it would turn Outdated once {change.deployment} is pointed "
            f"at {change.field} {change.value}; abort the campaign instead"
        )

    def point_refusal(self, index: int) -> str | None:
        """A point is compare-and-set too (`DeploymentChange.pointed_over`): one that found a value
        someone else set since halts the campaign, naming the deployment, what it holds and what
        the operator can do (no host starts on it meanwhile). None: it was pointed."""
        change = self.changes[index]
        if not change.point_refused:
            return None
        if self.halted_reason is None:
            self.halted_reason = (
                f"DPUDeployment {change.deployment} {change.field} {change.note}, not the "
                f"{change.previous or '-'} the campaign found: it is not pointed over it; set it back to "
                f"{change.previous or '-'} and `resume`, or `abort` (it is left as it is)"
            )
        return self.halted_reason

    def repoint_blocked(self, index: int) -> str | None:
        """Why a change put back may not be pointed again: its deployment selects a host skipped
        since it was first pointed (its entity refused it: an instance assigned since), which
        pointing it again would turn Outdated. Only the canary's is ever pointed again (after a
        failed canary, `retry_failed`)."""
        change = self.changes[index]
        if change.role != "canary" or change.restored_at is None:
            return None
        skipped = [h for h in self.canary_pool if self.state(h) == "s"]
        if not skipped:
            return None
        return (
            f"the canary cannot run again: DPUDeployment {change.deployment} selects "
            f"{', '.join(skipped[:10])}, skipped since it was first pointed; pointing it again would "
            "turn them Outdated; abort, or start again without them"
        )

    def outdated_note(self, host_id: str) -> str:
        """Words for a host skipped while its deployment is pointed ("" when it is not)."""
        change = self.covering(host_id)
        if change is None or not change.pointed_at or change.restored_at:
            return ""
        return (
            f"; DPUDeployment {change.deployment} is pointed at {change.field} {change.value}: "
            "the host reads Outdated until it is reprovisioned"
        )
