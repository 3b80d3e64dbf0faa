"""Each operation request is declared once (`contracts.host_requests`) and everything else follows
from its row: the entity's handler and validator (registered by Temporal under the row's update,
decoding the row's model), the typed reference callers use, the client's map, the child it
starts, and its `metalflow host` command. A row without its one-line handler, declaration or
command options fails here, before any server runs."""

from __future__ import annotations

import typing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from temporalio import workflow

from contracts import workflow_api
from contracts.host_requests import ENTITY_REQUESTS, EntityRequest, of_operation
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    MAINTENANCE_UPDATE,
    RELEASE_AUTOMATION_UPDATE,
    RELEASE_INSTANCE_UPDATE,
    WITHDRAW_UPDATE,
    EntityRequestBody,
    FirmwareRequest,
    HostWorkflowInput,
    OperationAccepted,
    OperationRequest,
    ResetRequest,
    ResetTarget,
)
from metalflow.cli import build_parser
from metalflow.cli.host_requests import COMMANDS
from metalflow.hosts import ENTITY_UPDATES, HostRequestError
from workflows.host.state import HostEntityState
from workflows.host.workflow import HostWorkflow

NOW = datetime(2026, 11, 27, tzinfo=UTC)
ROWS = pytest.mark.parametrize("kind", ENTITY_REQUESTS, ids=lambda kind: kind.update)
REQUIRED = {"firmware": ["--version", "1.2", "--image", "https://x/f.bfb"], "reset": ["--host"]}
"""The options a command requires (the others have defaults)."""
OTHER_UPDATES = {
    APPROVE_UPDATE, WITHDRAW_UPDATE, ASSIGN_INSTANCE_UPDATE, RELEASE_INSTANCE_UPDATE, MAINTENANCE_UPDATE,
    RELEASE_AUTOMATION_UPDATE,
}  # fmt: skip
EXAMPLES: dict[type, Any] = {  # a request of each payload model the rows name
    OperationRequest: OperationRequest(requested_by="a"),
    FirmwareRequest: FirmwareRequest(requested_by="a", target_version="1", image_uri="https://x/f"),
    ResetRequest: ResetRequest(requested_by="a", target=ResetTarget.HOST),
}


def test_rows_are_one_per_update_operation_and_command() -> None:
    for field in ("update", "operation", "command"):
        values = [getattr(kind, field) for kind in ENTITY_REQUESTS]
        assert len(set(values)) == len(values), field
    assert all(of_operation(kind.operation) is kind for kind in ENTITY_REQUESTS)
    assert {kind.request for kind in ENTITY_REQUESTS} <= set(typing.get_args(EntityRequestBody))


@ROWS
def test_the_entity_has_the_rows_handler_and_validator(kind: EntityRequest[Any]) -> None:
    update = workflow._Definition.must_from_class(HostWorkflow).updates[kind.update]
    assert update.arg_types == [kind.request] and update.ret_type is OperationAccepted
    assert update.validator is not None
    assert getattr(HostWorkflow, kind.update)._defn is update  # the attribute callers may name


@ROWS
def test_the_typed_reference_declares_the_row(kind: EntityRequest[Any]) -> None:
    declared = getattr(workflow_api.HostWorkflow, kind.update)._defn
    assert (declared.name, declared.arg_types, declared.ret_type) == (
        kind.update,
        [kind.request],
        OperationAccepted,
    )
    assert ENTITY_UPDATES[kind.update] is getattr(workflow_api.HostWorkflow, kind.update)


def test_the_entity_answers_no_request_the_table_does_not_declare() -> None:
    updates = set(workflow._Definition.must_from_class(HostWorkflow).updates)
    assert updates == {kind.update for kind in ENTITY_REQUESTS} | OTHER_UPDATES
    assert set(ENTITY_UPDATES) == updates


@ROWS
def test_the_child_is_a_declared_workflow_taking_the_input_the_entity_builds(
    kind: EntityRequest[Any],
) -> None:
    declared = {
        workflow._Definition.must_from_class(cls).name: cls
        for cls in vars(workflow_api).values()
        if isinstance(cls, type) and workflow._Definition.from_class(cls) is not None
    }
    run = workflow._Definition.must_from_class(declared[kind.child]).run_fn
    state = HostEntityState.of(HostWorkflowInput(host_id="h1"))
    assert kind.request in EXAMPLES, f"add an example {kind.request.__name__} to EXAMPLES"
    current = state.record_request(kind, EXAMPLES[kind.request], NOW)
    assert type(state.child_input(current)) is typing.get_type_hints(run)["request"]


@ROWS
def test_the_command_sends_the_rows_update(kind: EntityRequest[Any]) -> None:
    assert kind.operation in COMMANDS
    args = build_parser("host").parse_args(["host", kind.command, "h1", *REQUIRED.get(kind.command, [])])
    assert (args.update, args.operation, args.check_inventory) == (kind.update, kind.operation, True)
    assert isinstance(COMMANDS[kind.operation].request(args), kind.request)


@ROWS
def test_every_operation_takes_a_reason_recorded_with_it_and_handed_to_its_run(
    kind: EntityRequest[Any],
) -> None:
    """Issue 40, an attack's finding: `host firmware` had no `--reason` while every other host
    operation had it. Each command takes it, the entity records it with the operation (`host
    status`, a successor's takeover reads it from the run's input) and its run gets it."""
    asked = ["host", kind.command, "h1", *REQUIRED.get(kind.command, []), "--reason", "ticket 42"]
    request = COMMANDS[kind.operation].request(build_parser("host").parse_args(asked))
    state = HostEntityState.of(HostWorkflowInput(host_id="h1"))
    current = state.record_request(kind, request, NOW)
    assert current.record.reason == "ticket 42"
    assert getattr(state.child_input(current), "reason", None) == "ticket 42"


def test_a_host_reset_takes_the_reboots_power_down_wait_and_only_the_host_target() -> None:
    """`host reset --host` is a reboot: on a BMC without PowerCycle it waited the host policy's
    120 s between Off and On with no way to say otherwise (a `--host` reset after `--all-dpus`
    ran out a 120 s test timeout). The DPU targets keep the host off until their DPUs are up."""
    parse = build_parser("host").parse_args
    asked = COMMANDS["reset"].request(parse(["host", "reset", "h1", "--host", "--power-down-wait", "0"]))
    assert isinstance(asked, ResetRequest) and asked.policy is not None
    assert asked.policy.power_down_wait_seconds == 0
    assert COMMANDS["reset"].request(parse(["host", "reset", "h1", "--host"])).policy is None
    with pytest.raises(HostRequestError, match="--power-down-wait applies to --host"):
        COMMANDS["reset"].request(parse(["host", "reset", "h1", "--all-dpus", "--power-down-wait", "5"]))


def test_the_cli_starts_a_host_entity_with_the_site_files_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36 (low findings item 4): `host status` said `(site default)` and `host list`
    `default` for a host of a site file that names its site: the CLI started the entity without
    it. Now the site file in use gives its name; cluster inventory or no readable file: default."""
    import argparse

    from metalflow.cli.host_requests import _entity

    site = tmp_path / "site.yaml"
    site.write_text("name: dc1-hall2\nhosts: []\n")
    monkeypatch.setenv("METALFLOW_SITE_FILE", str(site))
    monkeypatch.delenv("METALFLOW_INVENTORY", raising=False)
    assert _entity(argparse.Namespace(host="gpu-0042")).site == "dc1-hall2"
    monkeypatch.setenv("METALFLOW_INVENTORY", "cluster")
    assert _entity(argparse.Namespace(host="gpu-0042")).site == "default"
    monkeypatch.delenv("METALFLOW_INVENTORY")
    site.write_text("name: [not, a, name]\n")
    assert _entity(argparse.Namespace(host="gpu-0042")).site == "default"  # the worker says what is wrong
