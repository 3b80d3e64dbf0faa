"""The host entity's versions reads (`workflows/host/workflow.py`): whenever a read is due, one
`read_host_versions_brief` of its scope, merged into what the entity knows and shown in the memo
entry `versions` and the `BfbVersion` search attribute (`workflows/host/versions.py`). A mixin of
the runbook: its own file so the runbook stays within the house's line limit."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api
    from contracts.models.inventory import HostVersionsBrief, ReadVersionsInput, VersionsScope
    from workflows import kernel
    from workflows.host import versions as host_versions
    from workflows.host.state import HostEntityState


class VersionsShown(kernel.Runbook):
    """The entity's versions task (`_show_versions`, started by the runbook for its whole run)."""

    state: HostEntityState
    _reading_versions: bool
    _reading_power: bool

    async def _show_versions(self) -> None:
        """For the whole run: whenever a read is due, read the host's versions once and show them
        (one read at a time; one due meanwhile is read after it)."""
        while True:
            await workflow.wait_condition(lambda: self.state.versions_due is not None)
            after, scope = self.state.take_versions_due()
            self._reading_versions = True
            try:
                await self._read_versions(after, scope)
            finally:
                self._reading_versions = self._reading_power = False

    async def _read_versions(self, after: str, scope: VersionsScope) -> None:
        """One `read_host_versions_brief` of `scope`, merged into what the entity knows and shown
        in the memo and `BfbVersion`; a failed read shows `unknown (why)` and is not raised."""
        host = self.state.host_id
        brief: HostVersionsBrief | None = None
        try:
            read = await self.call(
                activity_api.read_host_versions_brief,
                ReadVersionsInput(host_id=host, scope=scope),
                kernel.options(host_versions.VERSIONS_READ, f"read the versions of {host} (after {after})"),
                abortable=False,  # the entity has no abort; a read for show is never cut short
            )
            brief = self.state.brief_known(read, scope, workflow.now())
            memo = host_versions.memo_of(brief, after, workflow.now())
        except ActivityError as err:
            workflow.logger.warning("versions of %s not read: %s", host, kernel.describe_failure(err))
            memo = host_versions.unknown_memo(kernel.describe_failure(err), after, workflow.now())
            self.state.read_failed()
        workflow.upsert_memo({host_versions.MEMO_KEY: memo})
        kernel.upsert_changed([host_versions.bfb_attribute(brief)])
