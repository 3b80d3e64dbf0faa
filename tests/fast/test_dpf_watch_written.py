"""The host operation's own acknowledgement stands for a read (issue 37): after the write that
removes the reboot-required annotation, the watch holds the DPUNode as the write's answer gave it
at its resourceVersion (`workflows.parts.dpf_watch.as_written`), and orders the site watch's
signals against it (`merge`): one sent before the write (an older DPUNode version, still showing
the annotation) cannot pass for DPF's next request; one after it (DPF asking again) is taken.
Before, the operation read the host's DPF objects again (`DPFWatch.restart`: 3 lists, 1
activity)."""

from __future__ import annotations

from contracts.models.dpf import DPFVersion, DPUNodeState, HostDPFState
from workflows.parts.dpf_watch import as_written, merge, ordered_read

ASKED = "2026-11-29T15:00:00Z"


def node(reboot_required: str | None, token: str | None = None) -> DPUNodeState:
    return DPUNodeState(
        name="node-host-001", uid="u1", reboot_required=reboot_required, reboot_acknowledged=token
    )


def state(
    reboot_required: str | None, *, node_version: int, epoch: int = 0, token: str | None = None
) -> HostDPFState:
    version = DPFVersion(epoch=epoch, dpus=10, node=node_version, hold=10)
    return HostDPFState(host_id="host-001", node=node(reboot_required, token), as_of=version)


def test_a_signal_from_before_the_write_cannot_pass_for_a_new_request() -> None:
    held = state(ASKED, node_version=20)  # what the watch showed: DPF asks
    written = as_written(held, node(None, "op#1"), 25)  # our removal, answered at 25
    assert written is not None and written.node is not None
    assert written.node.reboot_required is None and written.as_of == DPFVersion(dpus=10, node=25, hold=10)
    stale = state(ASKED, node_version=22)  # sent before the watch applied the write
    after, news = merge(written, stale)
    assert not news and after.node is not None and after.node.reboot_required is None


def test_dpf_asking_again_after_the_write_is_taken() -> None:
    written = as_written(state(ASKED, node_version=20), node(None, "op#1"), 25)
    again = state("2026-11-29T15:01:00Z", node_version=31, token="op#1")  # a BF4's second round
    after, news = merge(written, again)
    assert news and after.node is not None and after.node.reboot_required == "2026-11-29T15:01:00Z"
    # The removal and the re-set flushed together: the same content as the stale state above,
    # newer than the write, so taken.
    after, news = merge(written, state(ASKED, node_version=26, token="op#1"))
    assert news and after.node is not None and after.node.reboot_required == ASKED


def test_a_watch_already_past_the_write_keeps_what_it_showed() -> None:
    held = state("2026-11-29T15:01:00Z", node_version=40, token="op#1")  # the watch showed more
    assert as_written(held, node(None, "op#1"), 25) is held


def test_unordered_answers_read_again() -> None:
    """No version in the answer (a node gone, a payload from before the field) or no ordered
    state held: None, and the operation reads afresh (`DPFWatch.restart`)."""
    assert as_written(state(ASKED, node_version=20), node(None), 0) is None
    assert as_written(None, node(None), 25) is None
    unordered = HostDPFState(host_id="host-001", node=node(ASKED))
    assert as_written(unordered, node(None), 25) is None


def test_a_new_epoch_wins_whole_over_the_write() -> None:
    """The API server restarted on another store: the watch lists again and its state is taken
    whole, whatever the write's version (the join's own argument, `activities.site_watch`)."""
    written = as_written(state(ASKED, node_version=20), node(None, "op#1"), 25)
    relisted = state(ASKED, node_version=3, epoch=1)
    after, news = merge(written, relisted)
    assert news and after == relisted


def test_the_barrier_read_is_ordered_in_the_epoch_held() -> None:
    """The read before a reboot (`read_host_dpf_state`) carries its own versions, no epoch: held
    in the epoch of the watch's state, each kind at least as new as held, so the acknowledgement
    after it can be ordered (before, the read was held unordered and the operation read again)."""
    held = state(ASKED, node_version=20, epoch=2)
    read = HostDPFState(host_id="host-001", node=node(ASKED), as_of=DPFVersion(dpus=15, node=18, hold=0))
    ordered = ordered_read(held, read)
    assert ordered.as_of == DPFVersion(epoch=2, dpus=15, node=20, hold=10)
    assert as_written(ordered, node(None, "op#1"), 25) is not None
    assert ordered_read(held, read.model_copy(update={"as_of": None})).as_of is None  # a recorded payload
    assert ordered_read(None, read).as_of is None
