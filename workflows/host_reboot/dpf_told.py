"""An operator's reboot that is the reboot DPF waits for: the base of `HostRebootWorkflow`
(`workflow.py`), split from its runbook by role.

An operation aborted before its power cycle (a provision, a reprovision) leaves the host's DPUs
in DPF's `Rebooting`, waiting for an external reboot nobody will make, and `host status` warns,
naming `host reboot HOST`. DPF's contract is the reboot, then the removal of its
reboot-required annotation (DOMAIN.md 2.5, DPF `processExternalReboot`: removal means
"rebooted"): so a `host reboot` (one the host's entity started, or one started alone; never a
round of another operation, which tells DPF itself) reads DPF before its cycle (`_dpf_waits`)
and, when DPF waited (`dpf_barrier.awaits_external_reboot`: the annotation, a `Rebooting` DPU,
each stamped), removes the annotation once the cycle is done (`_tell_dpf`), as the reprovision
would have. A request DPF makes after the read is not served by the cycle and is left alone.

Both calls are bounded and never aborted midway (the cycle goes on, or has happened): a
Kubernetes outage costs the reboot at most `DPF_READ_SECONDS` and `DPF_WRITE_SECONDS`, never the
reboot itself, and the result's `dpf_told` says what was done or why DPF was not told. Cost: one
Kubernetes read per `host reboot` of a host with DPUs, one write when DPF waited.

The workflow sets every attribute declared here in its `__init__`.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import cause_in_words
    from contracts.models.dpf import ChangeResult, HostDPFState, HostRef, MarkRebootedInput
    from contracts.models.inventory import HostInventory
    from workflows import kernel
    from workflows.parts import dpf_barrier as barrier

DPF_READ_SECONDS = 30.0
DPF_WRITE_SECONDS = 60.0


class TellsDPF(kernel.Abortable):
    """Tell DPF of a reboot it waited for (module docstring)."""

    _dpf_waiting: HostRef | None
    _dpf_told: str

    async def _dpf_waits(self, inventory: HostInventory) -> None:
        """An operator's reboot (`host reboot`, not a round of another operation, which tells DPF
        itself) of a host whose DPUs wait in DPF's `Rebooting` for an external reboot (an aborted
        provision or reprovision left them so: `barrier.awaits_external_reboot`) IS the reboot
        DPF waits for: DPF's contract is the reboot, then the annotation's removal (DOMAIN.md 2.5,
        DPF `processExternalReboot`), which `_tell_dpf` makes after the cycle, as the reprovision
        would have. Read before the cycle: a request DPF makes after it is not served by it.
        Bounded, never aborted midway (the caller gives the lease's slot back on an abort); a
        read that fails leaves DPF untold, and the reboot goes on."""
        if self.operation_kind != names.REBOOT or not inventory.dpus:
            return
        host = HostRef.of(inventory)
        try:
            state: HostDPFState = await self.call(
                activity_api.read_host_dpf_state,
                host,
                kernel.options(
                    kernel.bounded(kernel.KUBE_READ, DPF_READ_SECONDS),
                    f"does DPF wait for a reboot of {host.host_id}?",
                ),
                abortable=False,
            )
        except ActivityError as err:
            workflow.logger.warning("DPF not read, so not told of this reboot: %s", cause_in_words(err))
            self._dpf_told = f"DPF could not be read ({cause_in_words(err)}): not told"
            return
        if barrier.awaits_external_reboot(state):
            self._dpf_waiting = host

    async def _tell_dpf(self) -> None:
        """Remove the reboot-required annotation DPF set before this run's cycle (`_dpf_waits`),
        once (the token: this run). Bounded and not aborted midway: the cycle happened."""
        host, self._dpf_waiting = self._dpf_waiting, None
        if host is None:
            return
        info = workflow.info()
        marked = MarkRebootedInput(
            host_id=host.host_id, namespace=host.namespace, token=f"{info.workflow_id}@{info.run_id}"
        )
        try:
            told: ChangeResult = await self.call(
                activity_api.mark_dpu_node_rebooted,
                marked,
                kernel.options(
                    kernel.bounded(kernel.KUBE_WRITE, DPF_WRITE_SECONDS),
                    f"tell DPF {host.node_name()} was rebooted",
                ),
                abortable=False,
            )
        except ActivityError as err:
            self._dpf_told = f"DPF NOT told {host.node_name()} was rebooted ({cause_in_words(err)})"
            return
        self._dpf_told = f"DPF told {host.node_name()} was rebooted ({told.detail})"
