"""The host entity's operation requests, declared once: one row each (`ENTITY_REQUESTS`).

A row says everything the callers of an operation request share: the entity's update and its
payload model, the operation it starts (the `Operation` search attribute, the child's id prefix)
and the child workflow that runs it, whether an assigned host waits for `approve`, the words
of its `metalflow host` command, the phases the child shows and the action word of its
Kubernetes Events. Read by:

- the entity (`workflows/host/workflow.py`): one line per row, `request_x = requested(X)`, makes
  the update handler and its validator, both applying the entity's rules (`workflows/host/state.py`);
- the typed reference (`contracts/workflow_api.py`): one line per row, `request_x = declared(X)`,
  so a caller's `execute_update` is checked against the row's model and answers `OperationAccepted`;
- the client (`metalflow/hosts.py`), the CLI (`metalflow/cli/host_requests.py`) and the demo,
  which loop over the rows;
- `metalflow host list --phase` (`metalflow/cli/host_phases.py`: the entity's `running
  <operation>` and the child's phases) and the worker's Kubernetes Events
  (`metalflow/runtime/events.py`: the operation's start and ending, and its host read from the
  workflow id).

Why the two one-line handlers are not generated from the table too: Temporal registers an update
only as an attribute of the workflow class, and mypy types only the attributes a class body names.
`tests/fast/test_host_requests.py` fails until both lines exist for every row;
`tests/test_host_phases.py` until a row's `phases` are what its child's code enters (and its
recorded histories show), and `tests/fast/test_entity_operations_everywhere.py` until the phase
filter and the Events take the row.

Adding a request (say a DPU-only reset): its payload model (contracts/models/host.py, into
`EntityRequestBody`), the child workflow, a row here, the two lines above, the child's input in
`HostEntityState.child_input`, and its command's options and request in
`metalflow/cli/host_requests.py` (`COMMANDS`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from temporalio import workflow

from contracts import names
from contracts.models.host import (
    REQUEST_FIRMWARE_UPDATE,
    REQUEST_PROVISION_UPDATE,
    REQUEST_REBOOT_UPDATE,
    REQUEST_REMOVAL_UPDATE,
    REQUEST_REPROVISION_UPDATE,
    REQUEST_RESET_UPDATE,
    RESET_OPERATION,
    EntityRequestBody,
    FirmwareRequest,
    OperationAccepted,
    OperationRequest,
    ResetRequest,
)

HOST_OPERATION_PHASES: Final = (
    "resolving-inventory",
    "registering-dpus",  # provision
    "deleting-dpus",  # reprovision
    "waiting-for-hold",
    "waiting-for-reboot-request",
    "rebooting-host",
    "waiting-for-dpu-agents-after-reboot",  # v26: the reset must restart each DPU's agent
    "waiting-for-dpf-after-reboot",
    "manual-intervention-required",
)
"""The phases of `HostOperationWorkflow`, which runs both a provision and a reprovision."""

RequestT = TypeVar("RequestT", bound=EntityRequestBody)  # a new payload model joins that union
FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])


@dataclass(frozen=True)
class EntityRequest(Generic[RequestT]):
    """One operation request of the host entity."""

    update: str  # the entity's update, also the attribute that declares it on both classes
    request: type[RequestT]  # the update's payload
    operation: str  # `Operation` of the child and its id prefix (`<operation>/<host>`)
    child: str  # the workflow type that runs the operation
    approval: bool  # on a host with an instance, it waits for `approve` (it disrupts the instance)
    command: str  # `metalflow host <command>`
    help: str  # the command's line in `metalflow host --help`
    description: str  # `metalflow host <command> --help`
    action: str  # the `action` of its Kubernetes Events (`OperationStarted`, `OperationFailed`, ...)
    phases: tuple[str, ...]  # the phases the child shows while it runs (`host list --phase`)
    ended: str = "completed"  # the child's planned final phase (the kernel's early ones are apart)

    @property
    def first_phase(self) -> str:
        """The phase the child's runbook enters first, which the entity gives it at its start
        (a search attribute given at a start is free; an upsert is a history event and a billable
        Action). Every child but a reboot's resolves the host's inventory first; a reboot starts
        by asking its BMC's lease, with no phase shown, and is started apart (`start_next_reboot`)."""
        return self.phases[0]

    def typed(self, function: FunctionT, returns: type | None) -> FunctionT:
        """`function` (self, request) as an update handler or validator of this row: named after
        the update, and annotated with the row's payload model, which Temporal reads to decode
        the payload (a type variable would not tell it)."""
        function.__annotations__ = {"request": self.request, "return": returns}
        function.__name__ = function.__qualname__ = self.update
        return function


PROVISION: Final = EntityRequest(
    update=REQUEST_PROVISION_UPDATE,
    request=OperationRequest,
    operation=names.PROVISION,
    child="HostOperationWorkflow",
    approval=True,
    command="provision",
    help="register the host's DPUs with DPF and provision them",
    description="Register the host's DPUs with DPF and provision them.",
    action="Provision",
    phases=HOST_OPERATION_PHASES,
)
REPROVISION: Final = EntityRequest(
    update=REQUEST_REPROVISION_UPDATE,
    request=OperationRequest,
    operation=names.REPROVISION,
    child="HostOperationWorkflow",
    approval=True,
    command="reprovision",
    help="reprovision the host's DPUs (delete, DPF recreates)",
    description="Reprovision the host's DPUs (delete, DPF recreates).",
    action="Reprovision",
    phases=HOST_OPERATION_PHASES,
)
REBOOT: Final = EntityRequest(
    update=REQUEST_REBOOT_UPDATE,
    request=OperationRequest,
    operation=names.REBOOT,
    child="HostRebootWorkflow",  # keyed by the next boot generation: `reboot/<host>/generation-<n>`
    approval=True,
    command="reboot",
    help="reboot the host once (its next boot generation)",
    description="Reboot the host once (its next boot generation).",
    action="Reboot",
    phases=("powering", "waiting-for-manual-reboot", "manual-intervention-required"),
    ended="rebooted",
)
FIRMWARE: Final = EntityRequest(
    update=REQUEST_FIRMWARE_UPDATE,
    request=FirmwareRequest,
    operation=names.FIRMWARE,
    child="FirmwareWorkflow",
    approval=True,
    command="firmware",
    help="stage and activate DPU firmware (one power cycle)",
    description=(
        "Stage DPU firmware VERSION (the image at URI) on the host's DPUs through their BMCs, then "
        "activate it with one host power cycle and verify every DPU runs it (workflow "
        "firmware/<id>). DPUs that already run or hold VERSION are not staged again; when every "
        "DPU runs it nothing is rebooted. A host with an instance waits for `metalflow approve`."
    ),
    action="Firmware",
    phases=(
        "resolving-inventory",
        "reading-versions",
        "staging",
        "waiting-for-dpf-idle",
        "power-cycling",
        "waiting-for-host",
        "waiting-for-dpus",
        "verifying",
    ),
    ended="done",
)
REMOVAL: Final = EntityRequest(
    update=REQUEST_REMOVAL_UPDATE,
    request=OperationRequest,
    operation=names.REMOVE,
    child="HostRemovalWorkflow",
    approval=True,
    command="remove",
    help="remove DPUs, or the whole DPU node, from DPF",
    description=(
        "Remove the host's DPUs from DPF (workflow remove/<id>). Without --dpus: the whole DPU "
        "node (DPUNode node-<host>; DPF deletes every DPU of it; the DPUDevices stay, the hardware is "
        "still in the host). With --dpus: only those DPUs (their DPUDevice and DPU objects); the "
        "others keep running. A delete cannot be taken back. A host with an instance waits for "
        "`metalflow approve`."
    ),
    action="Remove",
    phases=("resolving-inventory", "deleting", "force-deleting", "waiting-until-gone"),
    ended="done",
)
RESET: Final = EntityRequest(
    update=REQUEST_RESET_UPDATE,
    request=ResetRequest,
    operation=RESET_OPERATION,
    child="HostResetWorkflow",
    approval=True,
    command="reset",
    help="reset DPUs, the host, or both (a controlled reset sequence)",
    description=(
        "Reset the host's DPUs, the host, or both, in the order the hardware needs (workflow "
        "reset/<id>). --dpu/--all-dpus: each DPU's Arm cores (ForceRestart through its own BMC; the "
        "host keeps running; a Paused DPU is recovered so), or with --full its Arm and NIC: the host "
        "is powered off, each DPU PowerCycled (a BlueField takes it only with the host off), brought "
        "back to its OS, then the host powered on. --host: one host power cycle. --both: --all-dpus "
        "--full. Refused while a DPU installs or another operation runs; a host with an instance "
        "waits for `metalflow approve`."
    ),
    action="Reset",
    phases=(
        "resolving-inventory",
        "checking-dpf",
        "checking-dpu-bmcs",
        "powering-host-off",
        "resetting-dpu",
        "waiting-for-dpu-os",
        "powering-host-on",
        "rebooting-host",
        "manual-intervention-required",
    ),
)

ENTITY_REQUESTS: Final[tuple[EntityRequest[Any], ...]] = (
    PROVISION,
    REPROVISION,
    REBOOT,
    FIRMWARE,
    REMOVAL,
    RESET,
)
"""Every operation request, in the order `metalflow host --help` lists their commands."""


def of_operation(operation: str) -> EntityRequest[Any]:
    """The request that starts `operation` (each operation has one)."""
    return next(kind for kind in ENTITY_REQUESTS if kind.operation == operation)


def declared(
    kind: EntityRequest[RequestT],
) -> workflow.UpdateMethodMultiParam[[Any, RequestT], Awaitable[OperationAccepted]]:
    """The typed reference of a row's update, for `contracts.workflow_api.HostWorkflow`: a
    declaration, never run (the worker runs `workflows/host/workflow.py`)."""

    async def declaration(self: Any, request: RequestT) -> OperationAccepted:
        raise NotImplementedError(
            f"HostWorkflow.{kind.update} is a declaration for callers; "
            "the worker runs the class in workflows/"
        )

    return workflow.update(name=kind.update)(kind.typed(declaration, OperationAccepted))
