"""`host list` marks an idle host its last run left OFF, from the entity's memo entry `left_off`
in the same visibility listing (no BMC read, no query per host): the row, its JSON, the decoding."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from temporalio.api.common.v1 import Payload
from temporalio.api.workflow.v1 import WorkflowExecutionInfo

from contracts import names
from metalflow.cli.host_list import HostRow, _Closed, _closed, _entity, left_off_without_entity, render
from metalflow.cli.host_phases import NO_ENTITY

NOW = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)


def _listed(memo: dict[str, bytes]) -> WorkflowExecutionInfo:
    info = WorkflowExecutionInfo()
    info.execution.workflow_id = "host/h-1"
    for key, data in memo.items():
        info.memo.fields[key].CopyFrom(Payload(metadata={"encoding": b"json/plain"}, data=data))
    return info


def test_the_memo_entry_names_the_run_that_left_the_host_off() -> None:
    _, row = _entity(_listed({names.LEFT_OFF_MEMO: json.dumps("reboot/h-1/generation-2").encode()}))
    assert row.left_off == "reboot/h-1/generation-2"
    assert row.as_json()["left_off_by"] == "reboot/h-1/generation-2"
    assert _entity(_listed({}))[1].left_off is None
    assert _entity(_listed({names.LEFT_OFF_MEMO: b"not json"}))[1].left_off is None


def test_a_host_awaiting_approval_names_the_operation_it_would_run() -> None:
    """Issue 38: OPERATION read `-` for a host awaiting approval; it names the awaited operation,
    from the entity's memo entry `awaiting` in the same listing, and `--json` says it too."""
    _, row = _entity(_listed({names.AWAITING_MEMO: json.dumps("reprovision").encode()}))
    assert row.awaiting == "reprovision" and row.as_json()["awaiting_approval"] == "reprovision"
    assert row.as_json()["operation"] is None  # nothing in flight yet
    assert _entity(_listed({}))[1].awaiting is None
    rows = [
        HostRow(host="h-1", site="s", phase="awaiting-approval", awaiting="reprovision"),
        HostRow(host="h-2", site="s", phase="idle"),
    ]
    lines = render(rows, NOW).splitlines()
    assert lines[1].split("  ")[0] == "h-1" and lines[1].endswith("reprovision (awaiting approval)  -"), lines
    assert lines[2].split()[-2:] == ["-", "-"], lines


def test_the_phase_cell_of_a_host_left_off_says_so() -> None:
    rows = [
        HostRow(host="h-1", site="s", phase="idle", left_off="reboot/h-1/generation-2"),
        HostRow(host="h-2", site="s", phase="idle"),
    ]
    lines = render(rows, NOW).splitlines()
    assert lines[1].startswith("h-1") and "  idle (host OFF)  " in lines[1], lines
    assert "OFF" not in lines[2]


def test_phase_takes_finishing_as_wait_prints_it_and_the_column_says_it_too() -> None:
    """Issue 38 item 2: `--wait` printed `finishing` for a reset whose run had not closed, and
    `host list --phase finishing` exited 2; every phase a status prints is taken (derived from
    `metalflow.hosts.as_running`, the status's own rule), and the column prints the same word."""
    from metalflow.cli.host_list import _phase
    from metalflow.cli.host_phases import OPERATION_PHASES, shown_as
    from metalflow.seen import as_running

    printed = {as_running({"phase": phase})["phase"] for phase in OPERATION_PHASES}
    assert "finishing" in printed
    for phase in printed:
        assert _phase(phase) == phase
    assert {"completed", "failed", "aborted"} <= shown_as("finishing")
    assert "finishing" not in shown_as("rebooting-host")
    row = HostRow(
        host="h-1", site="s", phase="running reset", workflow_id="reset/h-1", operation_phase="completed"
    )
    assert render([row], NOW).splitlines()[1].endswith("reset/h-1  finishing"), render([row], NOW)
    assert row.as_json()["operation"]["phase"] == "finishing"


def test_a_host_whose_entity_was_terminated_while_its_operation_runs_is_listed() -> None:
    """Issue 40: `host list` omitted a host whose entity was terminated while its reset ran; now
    a row says `no entity` with the operation (until a request starts an entity that adopts it)."""
    from metalflow.cli.host_list import NO_ENTITY, _join, _Operation

    running = HostRow(host="h-2", site="s", phase="running reboot")

    def op(parent: str, workflow_id: str) -> _Operation:
        return _Operation(parent=parent, workflow_id=workflow_id, operation="x", phase=None, started_at=NOW)

    operations = [
        op("host/h-1", "reset/h-1"),
        op("host/h-2", "reboot/h-2/generation-1"),
        op("reset/h-3", "reboot/h-3/generation-1"),  # a reset's reboot: its reset is the host's operation
    ]
    rows = _join([("host/h-2", running)], operations)
    assert [(r.host, r.phase, r.workflow_id) for r in rows] == [
        ("h-1", NO_ENTITY, "reset/h-1"),
        ("h-2", "running reboot", "reboot/h-2/generation-1"),
    ]


def test_phase_takes_no_entity_as_the_phase_column_prints_it() -> None:
    """Issue 38: `host list` printed `no entity` rows but `--phase "no entity"` was refused (exit 2);
    it is taken, quoted or not, and the refusal of an unknown word names it among the phases."""
    import argparse

    from metalflow.cli.host_list import _phase
    from metalflow.cli.host_phases import NO_ENTITY, unknown_phase_message

    assert _phase("no entity") == NO_ENTITY
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers()
    from metalflow.cli import host_list

    host_list.register(commands, lambda action: lambda args: 0)
    assert parser.parse_args(["list", "--phase", "no", "entity"]).phase == NO_ENTITY
    assert "no entity" in unknown_phase_message("nope")


def _run(entity: str, minute: int, left_off: str | None) -> _Closed:
    return _Closed(entity=entity, closed_at=NOW.replace(minute=minute), left_off=left_off, site="s1")


def test_a_host_whose_terminated_entity_held_the_off_mark_is_listed_with_no_entity() -> None:
    """Issue 40: a host OFF-marked dropped out of `host list` once its idle entity was
    terminated. Its last closed entity run holding `LeftOffBy` lists it `no entity (host may be
    OFF)`, naming the run; a running entity, or a later closed run without the mark, does not."""
    closed = [
        _run("host/h-1", 1, "reset/h-1"),
        _run("host/h-2", 1, "reboot/h-2/generation-3"),
        _run("host/h-2", 2, None),  # a new entity cleared the mark, then ended
        _run("host/h-3", 1, "reset/h-3"),
    ]
    rows = left_off_without_entity(closed, running={"host/h-3"})
    assert [(entity, row.host) for entity, row in rows] == [("host/h-1", "h-1")]
    row = rows[0][1]
    assert row.phase == NO_ENTITY and row.shown_phase == "no entity (host may be OFF)", row
    assert row.as_json()["left_off_by"] == "reset/h-1" and row.site == "s1"
    assert row.since == NOW.replace(minute=1)
    assert "no entity (host may be OFF)" in render([row], NOW)
    assert left_off_without_entity([], set()) == []


def test_the_closed_run_listing_reads_the_mark_and_its_close() -> None:
    info = WorkflowExecutionInfo()
    info.execution.workflow_id = "host/h-1"
    info.close_time.FromDatetime(NOW)
    info.search_attributes.indexed_fields[names.LEFT_OFF_BY.name].CopyFrom(
        Payload(metadata={"encoding": b"json/plain"}, data=b'"reset/h-1"')
    )
    run = _closed(info)
    assert run.left_off == "reset/h-1" and run.closed_at == NOW and run.site is None


def test_the_rebooting_dpu_warning_advises_what_works_while_a_reboot_waits_for_a_person() -> None:
    """Issue 40 (last stop, item 3): the idle-DPU WARNING advised `host reboot`/`reprovision`
    while a reboot run waiting for a person held the next generation (both refused behind it).
    With that run named (`held`), it advises ending it first, in the refusal's words."""
    from metalflow.cli.inventory_check import rebooting_words

    plain = rebooting_words("h-1-dpu-0", "h-1")
    assert "(`metalflow host reboot h-1` reboots it and tells DPF" in plain, plain
    held = "reboot/h-1/generation-1 still runs and waits for a person (...): end it first"
    advised = rebooting_words("h-1-dpu-0", "h-1", held)
    assert f"`metalflow host reboot h-1` and `reprovision` are refused while {held}" in advised, advised
    assert "reboots it and tells DPF" not in advised


def test_an_idle_host_whose_last_end_left_its_power_unread_says_it_may_be_off() -> None:
    """Issue 40: an end whose power read was not answered ("may be OFF") was said only in the
    entity's `recent`; `host list` printed `idle`. Now PHASE `idle (host may be OFF)` and
    `maybe_off_after` in `--json`, from the entity's memo entry `maybe_off` in the same listing."""
    run = "reboot/h-1/generation-2"
    _, row = _entity(_listed({names.MAYBE_OFF_MEMO: json.dumps(run).encode()}))
    assert row.maybe_off == run and row.as_json()["maybe_off_after"] == run
    assert row.as_json()["left_off_by"] is None
    assert _entity(_listed({}))[1].as_json()["maybe_off_after"] is None
    rows = [
        HostRow(host="h-1", site="s", phase="idle", maybe_off=run),
        HostRow(host="h-2", site="s", phase="idle", maybe_off=run, left_off=run),  # the mark says more
        HostRow(host="h-3", site="s", phase="idle"),
    ]
    lines = render(rows, NOW).splitlines()
    assert "  idle (host may be OFF)  " in lines[1], lines
    assert "  idle (host OFF)  " in lines[2], lines
    assert "OFF" not in lines[3]
