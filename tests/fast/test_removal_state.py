"""The removal's decisions (`workflows/removal/state.py`), without a server: what test_removal shows
end to end (gone when DPF let go, what a timeout names as left, what the result and an early end
list, no abort once a delete is sent), one decision at a time."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.models.dpf import DPUNodeState, DPUState, HostDPFState, HostRef, ObjectOutcome, ObjectsResult
from contracts.models.removal import HostRemovalInput
from workflows.removal.state import RemovalState

T0 = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
HOST = HostRef(host_id="h1")


def removal(dpu_ids: tuple[str, ...] | None = None) -> RemovalState:
    return RemovalState(
        request=HostRemovalInput(host_id="h1", dpu_ids=dpu_ids, requested_by="op"), started_at=T0
    )


def dpf(*dpus: str, node: bool = True) -> HostDPFState:
    return HostDPFState(
        host_id="h1",
        node=DPUNodeState(name="node-h1", uid="n") if node else None,
        dpus=tuple(DPUState(name=f"node-h1-device-{d}", uid=d, dpu_id=d, phase="Deleting") for d in dpus),
    )


def test_a_node_is_gone_with_its_dpus_a_dpu_list_when_each_named_one_is() -> None:
    node = removal()
    assert not node.gone(dpf()) and not node.gone(dpf("d0", node=False))
    assert node.gone(dpf(node=False))
    dpus = removal(("d0",))
    assert not dpus.gone(dpf("d0", "d1")) and dpus.gone(dpf("d1"))  # its sibling stays
    both = removal(("d0", "d1"))
    assert not both.gone(dpf("d1")) and both.gone(dpf("d2", node=False))  # every named one


def test_what_is_left_is_named() -> None:
    assert removal().left(None) == "no DPF state seen"
    assert removal().left(dpf("d0")) == "DPUNode node-h1, DPU node-h1-device-d0 (Deleting)"
    assert removal(("d1",)).left(dpf("d0", "d1")) == "DPU node-h1-device-d1 (Deleting)"
    assert removal(("d1",)).left(dpf("d0")) == "nothing"
    assert removal(("d0", "d1")).what() == "DPUs d0, d1" and removal().what() == "the DPUNode"


def test_the_result_lists_the_changes_and_what_is_gone() -> None:
    state = removal()
    assert state.changed() == "nothing"
    state.record(
        ObjectsResult(
            objects=(
                ObjectOutcome(kind="DPUNode", name="node-h1", outcome="deleted"),
                ObjectOutcome(kind="DPU", name="node-h1-device-d0", outcome="gone"),
                ObjectOutcome(kind="DPU", name="node-h1-device-d1", outcome="finalizers removed"),
            )
        )
    )
    assert [a.name for a in state.changes()] == ["node-h1", "node-h1-device-d1"]  # "gone": nothing changed
    assert state.changed() == "DPUNode node-h1 deleted; DPU node-h1-device-d1 finalizers removed"
    assert state.removed(HOST) == ("DPUNode/node-h1", "DPU/node-h1-device-d0", "DPU/node-h1-device-d1")
    assert removal(("d0",)).removed(HOST) == ("DPUDevice/device-d0", "DPU/node-h1-device-d0")


def test_an_abort_says_what_it_leaves_before_and_after_the_first_delete() -> None:
    # Taken in every phase (issue 40; tests/fast/test_abort_every_phase.py): after a delete the run
    # stops waiting, and says the deletes sent go on.
    state = removal(("d0",))
    assert state.abort_leaves() == "nothing deleted"
    state.deleting = True
    assert state.abort_leaves() == (
        "the deletes sent cannot be taken back: DPF finishes them; the run stopped waiting for DPUs "
        "d0 to be gone"
    )
