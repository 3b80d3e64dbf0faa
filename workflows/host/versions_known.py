"""What the host entity knows of a host's versions, and what it reads again (issue 37): the rule
of which sources an ended operation can have changed (`versions_scope_after`, stated there with
its sources), the merge of a read into what was known (`merge_versions`), and the state's part
that decides when a read is due (`KnownVersions`). Everything once when the entity starts or
knows nothing, a DPU's firmware after a firmware operation on it (after a provision or a
reprovision only DPF: the firmware read before it stays, marked so), and on `metalflow host
versions HOST --refresh` (the command's read, handed over:
`KnownVersions.refreshed`); never a BMC session for a value already known. Pure: no Temporal,
no I/O. The entity's state (`state.py`) inherits `KnownVersions`; `versions.py` shows it."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from contracts import names
from contracts.models.host import PendingOperation
from contracts.models.inventory import (
    EVERYTHING,
    NOTHING,
    DPUVersions,
    HostVersions,
    HostVersionsBrief,
    VersionsScope,
)


def versions_scope_after(operation: str, dpu_ids: tuple[str, ...] | None) -> VersionsScope:
    """What an ended operation (completed or not: a failed one may have changed as much) can have
    changed of what the host runs, so what the entity reads after it; nothing else is asked again.

    - provision, reprovision: BFB and flavor from DPF only (one DPU list, no BMC request). The
      firmware of the DPUs it installed is not read: a BF-Bundle BFB can carry the BlueField
      firmware with its Arm OS (NVIDIA BlueField BSP, "Deploying BlueField Software from Host":
      "BF-Bundle: Includes the BlueField firmware, BlueField Arm OS, and DOCA"; BlueField BMC
      v24.10, "Deploying BlueField Software Using BFB from BMC": a BFB "includes ATF, UEFI, Arm
      OS, NIC firmware, and initramfs"), and DPF does not say what the DPU runs after it: its DPU
      object's `status.firmware{bmc,nic,uefi}` is declared but never written
      (simulators/dpf/BEHAVIOUR.md O5). So what the entity read of those DPUs' NIC firmware and
      DPU BMC firmware stays, marked read before this operation (`firmware_unread`, shown so
      by `versions.memo_of`, never as current); `metalflow host versions HOST --refresh` reads
      them (issue 37: "DPU and BMC firmware after a firmware operation, once when an entity
      starts, and on --refresh; never a BMC session for a value already known"). Never the host
      BMC's firmware: no BFB carries it.
    - firmware: the firmware of the DPUs it targeted (their BMCs); not DPF, not the host BMC.
    - removal: DPF only (the DPU objects it took away); no BMC.
    - reboot, reset: nothing. A firmware someone else staged and a reboot activated shows after
      `metalflow host versions HOST --refresh` (`refreshed`).
    """
    if operation in (names.PROVISION, names.REPROVISION):
        return VersionsScope(dpf=True, dpu_bmcs=(), host_bmc=False, firmware_unread=dpu_ids or None)
    if operation == names.FIRMWARE:
        return VersionsScope(dpf=False, dpu_bmcs=dpu_ids or None, host_bmc=False)
    if operation == names.REMOVE:
        return VersionsScope(dpf=True, dpu_bmcs=(), host_bmc=False)
    return NOTHING


def _is_bmc_error(error: str) -> bool:
    return "BMC" in error  # `BMC: ...`, `no BMC in the inventory` (as the memo tells them apart)


def merge_versions(
    known: HostVersions | None, read: HostVersions, scope: VersionsScope, at: datetime | None = None
) -> HostVersions:
    """What the entity knows after a read of `scope` made `at`: each source the read asked from
    `read` (values and errors), every other one as known before (None when never read). The DPUs
    are the read's (the inventory's), in its order. A DPU whose BMC was read has its firmware
    read `at`, no longer marked; one whose BMC was not read keeps its firmware, its read time and
    its mark, and is marked read before `scope.firmware_unread_by` when the scope says an
    operation can have changed it (the first such operation's mark stays)."""
    before = {d.dpu_id: d for d in known.dpus} if known is not None else {}
    dpus = []
    for dpu in read.dpus:
        old = before.get(dpu.dpu_id, DPUVersions(dpu_id=dpu.dpu_id))
        dpf_from = dpu if scope.dpf else old
        read_bmc = scope.reads_dpu_bmc(dpu.dpu_id)
        bmc_from = dpu if read_bmc else old
        if read_bmc:
            read_at, read_before = at, None
        else:
            read_at, read_before = old.firmware_read_at, old.firmware_read_before
            if read_before is None and scope.marks_firmware_unread(dpu.dpu_id):
                read_before = scope.firmware_unread_by
        errors = [e for e in dpf_from.errors if not _is_bmc_error(e)]
        errors += [e for e in bmc_from.errors if _is_bmc_error(e)]
        dpus.append(
            dpu.model_copy(
                update={
                    "bfb": dpf_from.bfb,
                    "flavor": dpf_from.flavor,
                    "outdated": dpf_from.outdated,
                    "phase": dpf_from.phase,
                    "dpu_firmware": bmc_from.dpu_firmware,
                    "dpu_bmc_firmware": bmc_from.dpu_bmc_firmware,
                    "firmware_read_at": read_at,
                    "firmware_read_before": read_before,
                    "errors": tuple(errors),
                }
            )
        )
    old_host = known or HostVersions(host_id=read.host_id)
    host_from = read if scope.host_bmc else old_host
    dpf_host_from = read if scope.dpf else old_host
    errors = [e for e in dpf_host_from.errors if not e.startswith("host BMC")]
    errors += [e for e in host_from.errors if e.startswith("host BMC")]
    return HostVersions(
        host_id=read.host_id,
        host_bmc_firmware=host_from.host_bmc_firmware,
        dpus=tuple(dpus),
        errors=tuple(errors),
    )


class KnownVersions:
    """The versions part of the entity's state (`HostEntityState` inherits it): what a read due
    asks, and what the entity knows after it. Its data are `HostEntityMemory`'s fields
    `versions_due`, `versions_scope` and `versions`."""

    if TYPE_CHECKING:
        versions_due: str | None
        versions_scope: VersionsScope | None
        versions: HostVersions | None

    def versions_wanted(self, after: str, scope: VersionsScope) -> None:
        """A versions read is due after `after`, of `scope`: none when it reads nothing and the
        entity knows the versions already (knowing none, e.g. a new entity whose first request
        started an operation, it reads everything once: `take_versions_due`). With a read
        already due, one read of both."""
        if scope.reads_nothing() and self.versions is not None:
            return
        if self.versions_due is not None:
            scope = (self.versions_scope or EVERYTHING).union(scope)
        self.versions_due, self.versions_scope = after, scope

    def versions_after(self, current: PendingOperation, outcome: str) -> None:
        """The read an ended operation calls for (`versions_scope_after`)."""
        operation = current.record.operation
        scope = versions_scope_after(operation, getattr(current.request, "dpu_ids", None))
        if scope.firmware_unread != ():
            scope = scope.model_copy(update={"firmware_unread_by": current.record.workflow_id})
        self.versions_wanted(f"{current.record.workflow_id} {outcome}", scope)

    def take_versions_due(self) -> tuple[str, VersionsScope]:
        """The read due now, no longer due: after what, and of what (everything while the entity
        knows nothing yet, e.g. after a read that failed as a whole)."""
        after, scope = self.versions_due or "", self.versions_scope or EVERYTHING
        self.versions_due, self.versions_scope = None, None
        return after, (scope if self.versions is not None else EVERYTHING)

    def read_failed(self) -> None:
        """A read failed as a whole: the memo shows every version `unknown`, so the entity knows
        none, and its next read (after any operation, a reboot too) reads everything."""
        self.versions = None

    def refreshed(self, read: HostVersions, at: datetime | None = None) -> HostVersions:
        """Everything read anew by someone else (`host versions --refresh`), `at`: what the entity
        knows now; a read due is no longer needed (one running merges what it read when it ends)."""
        self.versions_due, self.versions_scope = None, None
        return self.learned(read, EVERYTHING, at)

    def brief_known(
        self, read: HostVersionsBrief, scope: VersionsScope, at: datetime, *, refresh: bool = False
    ) -> HostVersionsBrief:
        """`read` with what the entity knows after it (`learned`; `refresh`: `refreshed`)."""
        known = self.refreshed(read.versions, at) if refresh else self.learned(read.versions, scope, at)
        return read.model_copy(update={"versions": known})

    def learned(self, read: HostVersions, scope: VersionsScope, at: datetime | None = None) -> HostVersions:
        """What a read of `scope` made `at` told, merged into what the entity knew (`merge_versions`)."""
        self.versions = merge_versions(self.versions, read, scope, at)
        return self.versions
