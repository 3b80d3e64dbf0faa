"""What the host entity reads of a host's versions, and when (issue 37 item 1;
`workflows/host/versions_known.py`: `versions_scope_after`, `merge_versions`, `KnownVersions`),
without a server. End to end, with the requests each BMC saw: tests/test_host_versions_memo.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from contracts import names
from contracts.host_requests import FIRMWARE, PROVISION, REBOOT, REMOVAL, REPROVISION, RESET
from contracts.models.host import (
    FirmwareRequest,
    HostWorkflowInput,
    OperationRequest,
    ResetRequest,
    ResetTarget,
)
from contracts.models.inventory import (
    EVERYTHING,
    NOTHING,
    DPUVersions,
    HostVersions,
    ReadVersionsInput,
    VersionsScope,
)
from workflows.host.state import HostEntityState
from workflows.host.versions_known import merge_versions, versions_scope_after

HOST = "host-001"
DPUS = (f"{HOST}-dpu-0", f"{HOST}-dpu-1")


def entity() -> HostEntityState:
    return HostEntityState.of(HostWorkflowInput(host_id=HOST))


def ended(state: HostEntityState, kind: Any, request: Any, outcome: str = "completed") -> None:
    """What the entity does when an operation's child ends: record it, then ask for its read."""
    current = state.record_request(kind, request, _T0)
    state.approve_at_once(current)
    state.started(current, _T0)
    state.finish(current, outcome, _T0)
    state.versions_after(current, outcome)


def known(bfb: str = "bfb-1", firmware: str = "fw-1", host_bmc: str = "bmc-1") -> HostVersions:
    dpus = tuple(
        DPUVersions(dpu_id=d, bfb=bfb, flavor="fl", dpu_firmware=firmware, dpu_bmc_firmware="dbmc")
        for d in DPUS
    )
    return HostVersions(host_id=HOST, host_bmc_firmware=host_bmc, dpus=dpus)


_T0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
ALICE = OperationRequest(requested_by="alice")
RESET_HOST = ResetRequest(requested_by="alice", target=ResetTarget("host"))
FIRMWARE_ONE = FirmwareRequest(
    requested_by="alice", target_version="2", image_uri="http://x/i", dpu_ids=(DPUS[1],)
)


def test_what_each_operation_can_change_is_what_is_read_after_it() -> None:
    dpf_and_dpu_firmware = VersionsScope(dpf=True, dpu_bmcs=None, host_bmc=False)
    assert versions_scope_after(names.REPROVISION, None) == dpf_and_dpu_firmware
    assert versions_scope_after(names.PROVISION, ()) == dpf_and_dpu_firmware
    assert versions_scope_after(names.REPROVISION, (DPUS[0],)) == VersionsScope(
        dpu_bmcs=(DPUS[0],), host_bmc=False
    )
    assert versions_scope_after(names.FIRMWARE, (DPUS[1],)) == VersionsScope(
        dpf=False, dpu_bmcs=(DPUS[1],), host_bmc=False
    )
    assert versions_scope_after(names.REMOVE, None) == VersionsScope(dpf=True, dpu_bmcs=(), host_bmc=False)
    for never in (names.REBOOT, "reset"):
        assert versions_scope_after(never, None) == NOTHING and NOTHING.reads_nothing()
    for scope in (
        versions_scope_after(op, None) for op in (names.REPROVISION, names.PROVISION, names.FIRMWARE)
    ):
        assert not scope.host_bmc  # never the host BMC's firmware after an operation


def test_a_reboot_or_a_reset_of_a_host_whose_versions_are_known_reads_nothing() -> None:
    state = entity()
    state.versions = known()
    for kind, request in ((REBOOT, ALICE), (RESET, RESET_HOST)):
        ended(state, kind, request)
        assert state.versions_due is None and state.versions_scope is None
    ended(state, REBOOT, ALICE, "failed: DPUFailed: x")  # a failed one neither
    assert state.versions_due is None


def test_knowing_nothing_yet_the_first_read_reads_everything_once() -> None:
    state = entity()  # a new entity whose first request was a reboot: nothing known
    ended(state, REBOOT, ALICE)
    assert state.take_versions_due() == (f"{names.host_reboot_workflow_id(HOST, 1)} completed", EVERYTHING)
    state.learned(known(), EVERYTHING)
    ended(state, REPROVISION, ALICE)  # from now on only what can have changed
    after, scope = state.take_versions_due()
    assert scope == VersionsScope(dpf=True, dpu_bmcs=None, host_bmc=False)
    assert state.versions_due is None and state.versions_scope is None


def test_reads_due_together_are_one_read_of_both() -> None:
    state = entity()
    state.versions = known()
    ended(state, FIRMWARE, FIRMWARE_ONE)
    ended(state, REMOVAL, ALICE)
    after, scope = state.take_versions_due()
    assert after == f"{names.host_operation_workflow_id(names.REMOVE, HOST)} completed"
    assert scope == VersionsScope(dpf=True, dpu_bmcs=(DPUS[1],), host_bmc=False)
    state.versions_wanted("refresh", EVERYTHING)
    ended(state, PROVISION, OperationRequest(requested_by="a", dpu_ids=(DPUS[0],)))
    assert state.take_versions_due()[1] == EVERYTHING


def test_a_read_changes_only_what_it_read_and_the_rest_stays_as_known() -> None:
    before = known()
    read = HostVersions(
        host_id=HOST,
        dpus=(
            DPUVersions(
                dpu_id=DPUS[0], bfb="bfb-2", flavor="fl2", dpu_firmware="fw-2", dpu_bmc_firmware="d2"
            ),
            DPUVersions(dpu_id=DPUS[1], bfb="bfb-2", flavor="fl2"),  # its BMC not asked
        ),
    )
    merged = merge_versions(before, read, VersionsScope(dpf=True, dpu_bmcs=(DPUS[0],), host_bmc=False))
    assert merged.host_bmc_firmware == "bmc-1"  # not asked: as known
    assert [(d.bfb, d.flavor, d.dpu_firmware, d.dpu_bmc_firmware) for d in merged.dpus] == [
        ("bfb-2", "fl2", "fw-2", "d2"),
        ("bfb-2", "fl2", "fw-1", "dbmc"),
    ]


def test_errors_follow_their_source_a_new_read_clears_an_old_one_others_keep_theirs() -> None:
    broken = HostVersions(
        host_id=HOST,
        errors=("DPF: down", "host BMC firmware: cannot reach"),
        dpus=(DPUVersions(dpu_id=DPUS[0], errors=("DPF has no DPU object", "BMC: cannot reach")),),
    )
    healed = HostVersions(host_id=HOST, dpus=(DPUVersions(dpu_id=DPUS[0], bfb="b", dpu_firmware="f"),))
    merged = merge_versions(broken, healed, VersionsScope(dpf=True, dpu_bmcs=(), host_bmc=False))
    assert merged.errors == ("host BMC firmware: cannot reach",)
    assert merged.dpus[0].errors == ("BMC: cannot reach",) and merged.dpus[0].bfb == "b"
    assert merged.dpus[0].dpu_firmware is None  # its BMC not read: as known (not known)
    assert merge_versions(None, healed, EVERYTHING) == healed


@pytest.mark.parametrize("scope", [EVERYTHING, NOTHING, VersionsScope(dpu_bmcs=(DPUS[0],))])
def test_a_scope_round_trips_as_json_and_an_input_without_one_reads_everything(
    scope: VersionsScope,
) -> None:
    assert ReadVersionsInput.model_validate({"host_id": HOST}).scope == EVERYTHING
    assert (
        ReadVersionsInput.model_validate_json(
            ReadVersionsInput(host_id=HOST, scope=scope).model_dump_json()
        ).scope
        == scope
    )


def test_a_refresh_is_everything_known_and_no_read_is_due_after_it() -> None:
    state = entity()
    state.versions = known()
    ended(state, REPROVISION, ALICE)  # a read due...
    fresh = known(bfb="bfb-9", firmware="fw-9", host_bmc="bmc-9")
    assert state.refreshed(fresh) == fresh  # ...made moot by `host versions --refresh`
    assert state.versions_due is None and state.versions_scope is None


def test_after_a_read_that_failed_as_a_whole_the_next_operation_reads_everything() -> None:
    state = entity()
    state.versions = known()
    state.read_failed()  # the memo shows every version unknown
    ended(state, REBOOT, ALICE)  # even a reboot: the entity knows nothing to keep
    assert state.take_versions_due()[1] == EVERYTHING
