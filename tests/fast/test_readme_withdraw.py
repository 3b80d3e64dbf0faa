"""README says how a person withdraws a pending request without metalflow's CLI (issue 40: "every
pending request can be withdrawn from the CLI and the UI"): the entity's update, by the name and
JSON input the Temporal UI and CLI send. Checked against the entity's own update and model, so
the README's command cannot drift from the code."""

from __future__ import annotations

import json
import re
from pathlib import Path

from temporalio import workflow

from contracts import names
from contracts.models.host import WITHDRAW_UPDATE, WithdrawRequest
from workflows.host.workflow import HostWorkflow

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_shows_the_entitys_withdraw_update_with_an_input_it_takes() -> None:
    text = README.read_text()
    found = re.search(
        r"temporal workflow update execute --workflow-id (\S+) --name (\S+) \\\n\s+--input '([^']+)'",
        text[text.index("**Every pending request can be withdrawn.**") :],
    )
    assert found is not None, "README's withdraw command"
    workflow_id, update, body = found.groups()
    assert workflow_id == names.host_workflow_id("host-001")
    assert update == WITHDRAW_UPDATE
    defined = workflow._Definition.must_from_class(HostWorkflow)
    assert WITHDRAW_UPDATE in defined.updates
    request = WithdrawRequest.model_validate(json.loads(body))
    assert request.workflow_id == names.host_operation_workflow_id(names.REPROVISION, "host-001")
