"""Every campaign target kind is declared once (contracts/models/campaign_target.py, `KINDS`) and
the rest reads it: the target's checks and words, and the CLI's options and refusals
(metalflow/cli/campaign_options.py)."""

from __future__ import annotations

import argparse
import typing

import pytest
from pydantic import ValidationError

from contracts.host_requests import ENTITY_REQUESTS
from contracts.models.campaign import KINDS, CampaignTarget, TargetKind
from contracts.models.campaign_target import RequestedOperation, kind_of_field, pointing_kinds
from metalflow.cli.campaign_options import add_options, campaign_input


def test_every_kind_has_its_row() -> None:
    assert set(KINDS) == set(TargetKind)
    for kind, spec in KINDS.items():
        assert spec.at_target != "dpf" or spec.dpu_field, f"{kind}: a DPF read names the DPU's field"
        assert not spec.points_deployment or spec.dpf_object, f"{kind}: what it points must exist"
        assert not spec.value or spec.metavar, f"{kind}: the CLI names its value"


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_options(parser, required=False)
    parser.add_argument("--by", default="ops@dc")
    return parser.parse_args(["--all", *argv])


@pytest.mark.parametrize("kind", list(TargetKind))
def test_the_cli_takes_each_kind_by_its_row(kind: TargetKind) -> None:
    spec = KINDS[kind]
    argv = [f"--{kind}"] + (["v1"] if spec.value else [])
    argv += ["--image", "http://images/v1"] if spec.image else []
    argv += ["--deployment", "gpu", "--canary", "0"] if spec.points_deployment else []
    target = campaign_input("fleet", _args(*argv)).target
    assert (target.kind, target.value, target.points_deployment) == (
        kind,
        "v1" if spec.value else "",
        spec.points_deployment,
    )
    assert target.describe().startswith(str(kind))
    if spec.image:
        with pytest.raises(ValueError, match=f"--{kind} needs --image URI"):
            campaign_input("fleet", _args(f"--{kind}", "v1"))
    if spec.points_deployment:
        assert kind_of_field(spec.deployment_field) is spec
        with pytest.raises(ValidationError, match="needs the DPUDeployment"):
            CampaignTarget(kind=kind, value="v1")
    else:
        with pytest.raises(
            ValueError,
            match=f"--canary-deployment goes with {' or '.join(f'--{k}' for k in pointing_kinds())}",
        ):
            campaign_input("fleet", _args(*argv, "--canary-deployment", "c"))


def test_each_operation_a_kind_asks_for_is_a_row_of_the_entitys_requests() -> None:
    # The models sit below the table (its rows name their payload models), so campaign_target.py
    # cannot read it: the Literal is held to it here. A kind never asks for an operation the
    # entity lacks.
    operations = {row.operation for row in ENTITY_REQUESTS}
    assert set(typing.get_args(RequestedOperation)) <= operations
    assert {spec.request for spec in KINDS.values()} == set(typing.get_args(RequestedOperation))


def test_a_missing_target_names_every_kind() -> None:
    with pytest.raises(ValueError) as refused:
        campaign_input("fleet", _args())
    message = str(refused.value)
    assert message.startswith("give a target: --reprovision, --bfb NAME, --flavor NAME")
    for kind, spec in KINDS.items():
        assert f"--{kind}" + (f" {spec.metavar}" if spec.value else "") in message
    assert "--firmware VERSION --image URI" in message


def test_the_deployment_activity_knows_every_object_a_kind_points_at() -> None:
    # Written out there for the static RBAC check; a new kind's object must be added there too.
    from drivers.campaign import POINTED

    pointed = {spec.dpf_object for spec in KINDS.values() if spec.points_deployment}
    assert pointed <= set(POINTED), f"drivers/campaign.py POINTED lacks {pointed - set(POINTED)}"


def test_bad_deployment_options_are_named_never_pydantics_text() -> None:
    """An independent reviewer's attack (item 6): a canary deployment equal to the fleet's printed
    pydantic's raw error (with its errors.pydantic.dev link) from `plan` and `start`; and a
    `--whole-deployment` that names neither of the campaign's deployments is bad input (exit 2)."""
    same = ("--bfb", "b", "--deployment", "gpu", "--canary-deployment", "gpu")
    with pytest.raises(ValueError) as caught:
        campaign_input("fleet", _args(*same))
    assert str(caught.value) == "the canary deployment must not be the fleet's (gpu)"
    other = ("--bfb", "b", "--deployment", "gpu", "--canary-deployment", "c", "--whole-deployment", "x")
    with pytest.raises(ValueError, match=r"^whole deployment x is neither the campaign's deployment"):
        campaign_input("fleet", _args(*other))
    both = campaign_input("fleet", _args(*other[:-1], "c", "--whole-deployment", "gpu")).target
    assert both.whole_deployment == ("c", "gpu")


def test_the_failure_budgets_help_says_what_the_code_counts() -> None:
    """An independent reviewer's attack (item 7): the help said "share of those attempted", the
    code (`FailureBudget.allowed`) counts a share of the hosts selected, rounded down."""
    parser = argparse.ArgumentParser()
    add_options(parser, required=False)
    [option] = [a for a in parser._actions if "--failure-budget" in a.option_strings]
    assert option.help is not None and "attempted" not in option.help
    assert "of the hosts selected" in option.help and "rounded down" in option.help
