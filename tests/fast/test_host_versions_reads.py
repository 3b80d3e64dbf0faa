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
    # A provision or reprovision: DPF only; every DPU's firmware (or the named ones') marked unread.
    dpf_only = VersionsScope(dpf=True, dpu_bmcs=(), host_bmc=False, firmware_unread=None)
    assert versions_scope_after(names.REPROVISION, None) == dpf_only
    assert versions_scope_after(names.PROVISION, ()) == dpf_only
    assert versions_scope_after(names.REPROVISION, (DPUS[0],)) == VersionsScope(
        dpu_bmcs=(), host_bmc=False, firmware_unread=(DPUS[0],)
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
    reprovision = names.host_operation_workflow_id(names.REPROVISION, HOST)
    assert scope == VersionsScope(
        dpf=True, dpu_bmcs=(), host_bmc=False, firmware_unread=None, firmware_unread_by=reprovision
    )
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
    scope = state.take_versions_due()[1]
    assert (scope.dpf, scope.dpu_bmcs, scope.host_bmc) == (True, None, True)  # everything is read


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


# -- after a provision or reprovision: DPF only, the firmware read before it marked so --------------

_T1 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
_T2 = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)


def _dpf_read(bfb: str) -> HostVersions:
    """What a read of DPF alone answers: BFB and flavor, no firmware."""
    return HostVersions(host_id=HOST, dpus=tuple(DPUVersions(dpu_id=d, bfb=bfb, flavor="fl") for d in DPUS))


def test_a_reprovision_reads_no_dpu_bmc_and_keeps_the_firmware_read_before_it_marked_so() -> None:
    state = entity()
    state.learned(known(), EVERYTHING, _T1)  # the entity's first read: everything, at _T1
    assert [(d.firmware_read_at, d.firmware_read_before) for d in state.versions.dpus] == [(_T1, None)] * 2
    ended(state, REPROVISION, ALICE)
    after, scope = state.take_versions_due()
    assert scope.dpu_bmcs == () and not scope.host_bmc and scope.dpf  # no BMC session at all
    merged = state.learned(_dpf_read("bfb-2"), scope, _T2)
    reprovision = names.host_operation_workflow_id(names.REPROVISION, HOST)
    for dpu in merged.dpus:
        assert (dpu.bfb, dpu.dpu_firmware, dpu.dpu_bmc_firmware) == ("bfb-2", "fw-1", "dbmc")
        assert (dpu.firmware_read_at, dpu.firmware_read_before) == (_T1, reprovision)  # not current
    assert merged.host_bmc_firmware == "bmc-1"


def test_a_reprovision_of_one_dpu_marks_only_its_firmware_and_the_first_operation_s_mark_stays() -> None:
    state = entity()
    state.learned(known(), EVERYTHING, _T1)
    ended(state, REPROVISION, OperationRequest(requested_by="a", dpu_ids=(DPUS[0],)))
    first = state.learned(_dpf_read("bfb-2"), state.take_versions_due()[1], _T2)
    reprovision = names.host_operation_workflow_id(names.REPROVISION, HOST)
    assert [d.firmware_read_before for d in first.dpus] == [reprovision, None]
    ended(state, PROVISION, ALICE)  # a later one: what was read before the first is older still
    later = state.learned(_dpf_read("bfb-3"), state.take_versions_due()[1], _T2)
    provision = names.host_operation_workflow_id(names.PROVISION, HOST)
    assert [d.firmware_read_before for d in later.dpus] == [reprovision, provision]


def test_a_firmware_operation_or_a_refresh_reads_the_marked_firmware_and_clears_the_mark() -> None:
    state = entity()
    state.learned(known(), EVERYTHING, _T1)
    ended(state, REPROVISION, ALICE)
    state.learned(_dpf_read("bfb-2"), state.take_versions_due()[1], _T2)
    ended(state, FIRMWARE, FIRMWARE_ONE)  # reads DPUS[1]'s BMC
    scope = state.take_versions_due()[1]
    second = DPUVersions(dpu_id=DPUS[1], dpu_firmware="fw-2", dpu_bmc_firmware="dbmc")
    read = HostVersions(host_id=HOST, dpus=(DPUVersions(dpu_id=DPUS[0]), second))
    merged = state.learned(read, scope, _T2)
    assert [(d.dpu_firmware, d.firmware_read_at, d.firmware_read_before is None) for d in merged.dpus] == [
        ("fw-1", _T1, False),
        ("fw-2", _T2, True),
    ]
    refreshed = state.refreshed(known(bfb="bfb-2", firmware="fw-3"), _T2)
    assert [(d.dpu_firmware, d.firmware_read_at, d.firmware_read_before) for d in refreshed.dpus] == [
        ("fw-3", _T2, None)
    ] * 2


def test_the_memo_shows_firmware_read_before_a_reprovision_as_such_never_as_current() -> None:
    from contracts.models.inventory import HostVersionsBrief, VersionTargets
    from workflows.host import versions as host_versions

    state = entity()
    state.learned(known(firmware="32.47.1088"), EVERYTHING, _T1)
    ended(state, REPROVISION, ALICE)
    merged = state.learned(_dpf_read("bfb-2"), state.take_versions_due()[1], _T2)
    brief = HostVersionsBrief(versions=merged, targets=VersionTargets(dpu_firmware="32.47.1088", bfb="bfb-2"))
    memo = host_versions.memo_of(brief, "reprovision/host-001 completed", _T2)
    shown = memo["dpus"][DPUS[0]]
    assert shown["dpu_firmware"] == (
        "32.47.1088 (read 2026-11-29T10:00:00Z, before reprovision/host-001; "
        "a BFB can carry NIC firmware: --refresh reads it)"
    )
    assert shown["dpu_bmc_firmware"].startswith(
        "dbmc (read 2026-11-29T10:00:00Z, before reprovision/host-001;"
    )
    assert shown["bfb"] == "bfb-2 (at target)"  # DPF's, read now
    # Equal to its target when read, but not known to be now.
    assert memo["at_target"] == f"unknown: dpu_firmware on {DPUS[0]}, dpu_firmware on {DPUS[1]}"
