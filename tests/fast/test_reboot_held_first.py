"""Issue 40 (re-attack, item 1): an operation that will reboot the host is refused before it
changes anything while a reboot waiting for a person holds the host's next boot generation.
A reprovision was accepted, deleted both DPUs, then failed `HostBusy` at its own reboot. The
entity now reads the generation each such operation's reboot would take before it starts it
(`child_input.reboot_held_first`); these are the operations it reads it for."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from contracts.models.host import (
    FirmwareInput,
    HostOperationInput,
    HostOperationKind,
    HostRebootInput,
    HostResetInput,
    ResetTarget,
)
from contracts.models.removal import HostRemovalInput
from workflows.host.child_input import reboot_held_first

HOST = "host-002"


@pytest.mark.parametrize(
    ("child", "first"),
    [
        (HostOperationInput(host_id=HOST, kind=HostOperationKind.REPROVISION, requested_by="a"), 1),
        (
            HostOperationInput(
                host_id=HOST, kind=HostOperationKind.PROVISION, requested_by="a", boot_generation=4
            ),
            5,
        ),
        (
            FirmwareInput(
                host_id=HOST,
                target_version="32",
                image_uri="http://fw/x.bfb",
                requested_by="a",
                boot_generation=2,
            ),
            3,
        ),
        (HostResetInput(host_id=HOST, target=ResetTarget.HOST, requested_by="a"), 1),
        (HostResetInput(host_id=HOST, target=ResetTarget.BOTH, full=True, requested_by="a"), 1),
        # Never a reboot of the host: nothing to read.
        (HostResetInput(host_id=HOST, target=ResetTarget.DPU, dpu_ids=("d",), requested_by="a"), None),
        (HostResetInput(host_id=HOST, target=ResetTarget.ALL_DPUS, requested_by="a"), None),
        (HostRemovalInput(host_id=HOST, requested_by="a"), None),
        # A `host reboot` reads it itself as it starts (`start_next_reboot`): not read twice.
        (HostRebootInput(host_id=HOST, boot_generation=1, requested_by="a"), None),
    ],
)
def test_each_operation_that_reboots_the_host_reads_its_first_generation_before_it_starts(
    child: BaseModel, first: int | None
) -> None:
    assert reboot_held_first(child) == first
