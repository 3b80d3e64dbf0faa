"""What a campaign holds and changes outside its hosts: the base of `CampaignWorkflow`
(`workflow.py`), split from its runbook by role, and the tool both use (`_show_phase`).

Outside its hosts, a campaign:

1. reads what its admission decides on, before the first host (`_admit`): the selection
   (`_select`), the claims on its hosts and DPUDeployments (`_claim`: one campaign per host and
   per deployment), the deployments (`_read_deployments`); then admits (`admission.py`, the same
   decision `metalflow campaign plan` and `start` make) and records the changes it will make
   before the first is made; changes a campaign that no longer runs left are put back first;
2. points a DPUDeployment, or puts it back (`_point`, one change of `CampaignState.changes`), as
   the runbook's steps say, and at its end (`_restore`: what was done, in words);
3. releases its claims however it ends (`_release`), and a host's as it ends here
   (`_release_ended`: done or skipped, another campaign may take it).

Why a base class: the runbook (`workflow.py`) stays a few hundred lines that read top to bottom
(the loop over the hosts), and what the campaign holds and changes outside them reads on its
own; both share one state object, as the host operation's reboot round
(`host_operation/reboot_round.py`). Every call here is `abortable=False`: an abort only stops new
starts, and a change half made is put back or kept, whatever it says.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.errors import InvalidInput
    from contracts.events import CAMPAIGN_STARTED
    from contracts.models.campaign import (
        CampaignInput,
        ClaimInput,
        ClaimResult,
        DeploymentsInput,
        DeploymentsRead,
        PointInput,
        RecordInput,
        ReleaseInput,
        SelectHostsInput,
        SelectHostsResult,
    )
    from contracts.wording import plural
    from workflows import kernel
    from workflows.campaign import admission
    from workflows.campaign.state import POINTING, SELECTING, CampaignState


class Footprint(kernel.Runbook):
    """What a campaign holds and changes outside its hosts, and the tool its runbook shares
    (module docstring).

    The workflow sets `state` and `_input` in its `__init__`.
    """

    state: CampaignState
    _input: CampaignInput

    # -- before the first host: read, then admit -------------------------------------------------
    async def _admit(self) -> None:
        """Read what the admission decides on (the selection, the claims, the deployments), then
        admit (admission.py): a refusal fails the campaign, naming why, before anything changed
        (changes a campaign that no longer runs left are still put back as it ends)."""
        start = self._input
        selected = await self._select()
        claims = await self._claim(admission.to_claim(start, selected), admission.deployments(start))
        read = await self._read_deployments(selected) if start.target.points_deployment else None
        decided = admission.admit(start, selected, claims, read, workflow.now())
        self.state.admitted(decided, start.canary)
        if decided.refusal is not None:
            raise InvalidInput(decided.refusal)
        if records := decided.records():
            await self.call(
                activity_api.record_campaign_changes,
                RecordInput(campaign_workflow_id=workflow.info().workflow_id, changes=records),
                kernel.options(kernel.KUBE_WRITE, f"record {plural(len(records), 'deployment change')}"),
                abortable=False,
            )
        for index in self.state.leftovers():
            await self._point(index, restore=True)

    async def _select(self) -> SelectHostsResult:
        selection = self._input.selection
        self._show_phase(SELECTING, selection.describe())
        # The campaign's start, once (its first run selects, a continued run does not): told to
        # the worker's Events (`CampaignStarted`) with no phase change and no history event.
        start = self._input
        kernel.report(
            CAMPAIGN_STARTED,
            f"{start.target.describe()} of {selection.describe()} requested by {start.requested_by}",
            warning=False,
        )
        selected: SelectHostsResult = await self.call(
            activity_api.select_campaign_hosts,
            SelectHostsInput(
                selection=selection,
                target=self._input.target,
                skip_assigned=self._input.policy.assigned == "skip",
            ),
            # The inventory and one DPUNode list: retried while the API server answers 5xx, 10
            # minutes at most (a failure then changed nothing).
            kernel.options(kernel.bounded(kernel.KUBE_READ, 600), f"select {selection.describe()}"),
            abortable=False,
        )
        return selected

    async def _claim(self, ids: tuple[str, ...], deployments: tuple[str, ...]) -> ClaimResult:
        """One campaign per host and per deployment: claim them; what another running campaign
        holds is answered by holder, what a campaign that no longer runs left is taken over."""
        if not ids and not deployments:
            return ClaimResult()
        self._show_phase(SELECTING, f"claiming {plural(len(ids), 'host')}")
        self.state.claimed = True  # before the call: a claim made by an attempt is released whatever follows
        claimed: ClaimResult = await self.call(
            activity_api.claim_campaign_hosts,
            ClaimInput(
                campaign_workflow_id=workflow.info().workflow_id, host_ids=ids, deployments=deployments
            ),
            kernel.options(kernel.KUBE_WRITE, f"claim {plural(len(ids), 'host')}"),
            abortable=False,
        )
        return claimed

    async def _read_deployments(self, selected: SelectHostsResult) -> DeploymentsRead:
        target = self._input.target
        self._show_phase(SELECTING, f"checking DPUDeployment {target.deployment}")
        read: DeploymentsRead = await self.call(
            activity_api.read_campaign_deployments,
            DeploymentsInput(target=target, host_ids=selected.roster.ids),
            kernel.options(kernel.KUBE_READ, f"read the DPUDeployments of {target.describe()}"),
            abortable=False,
        )
        return read

    # -- what it changed outside its hosts ------------------------------------------------------------
    async def _point(self, index: int, *, restore: bool) -> None:
        change = self.state.changes[index]
        verb = "restore" if restore else "point"
        value = change.previous if restore else change.value
        self._show_phase(POINTING, f"DPUDeployment {change.deployment}: {change.field} -> {value}")
        self.state.changes[index] = await self.call(
            activity_api.point_campaign_deployment,
            PointInput(change=change, restore=restore),
            kernel.options(kernel.KUBE_WRITE, f"{verb} {change.deployment} {change.field}={value}"),
            abortable=False,  # a change half made is put back or kept, whatever an abort says
        )

    async def _restore(self, indexes: list[int]) -> list[str]:
        """Put back these changes; what was done, in words (kept ones are said so)."""
        done = []
        for index in indexes:
            await self._point(index, restore=True)
            change = self.state.changes[index]
            if change.left_as_found:
                done.append(f"{change.deployment} {change.field} {change.note}")
            else:
                done.append(f"restored {change.deployment} {change.field}={change.previous}")
        kept = [c for c in self.state.changes if c.note.startswith("kept") and c.restored_at is None]
        done += [f"kept {c.deployment} {c.field}={c.value}" for c in kept]
        return done

    async def _release(self) -> None:
        if not self.state.claimed:
            return
        await self.call(
            activity_api.release_campaign_hosts,
            ReleaseInput(campaign_workflow_id=workflow.info().workflow_id),
            kernel.options(kernel.KUBE_WRITE, "release the campaign's hosts"),
            abortable=False,
        )
        self.state.claimed = False

    async def _release_ended(self) -> None:
        """Give up the claims of the hosts that ended here (done, skipped, ...) while the campaign
        runs on, so another campaign may take them (`CampaignState.to_release`: not a campaign that
        points a DPUDeployment). One update of the registry for every host that ended since the
        last."""
        hosts = self.state.to_release(points_deployment=self._input.target.points_deployment)
        if not hosts:
            return
        await self.call(
            activity_api.release_campaign_hosts,
            ReleaseInput(campaign_workflow_id=workflow.info().workflow_id, host_ids=hosts),
            kernel.options(kernel.KUBE_WRITE, f"release {plural(len(hosts), 'host')} that ended here"),
            abortable=False,
        )
        self.state.marked_released(hosts)

    # -- visibility ------------------------------------------------------------------------------------
    def _show_phase(self, phase: str, details: str) -> None:
        """The runbook shows its phase at every step: a new phase is entered (one `Phase` upsert
        and one log line), the same one only gets new details."""
        if phase != self.phase:
            self.enter(phase, details)
        else:
            self.show(details)
