"""The claims registry's decisions (workflows/campaign_claims/state.py, `ClaimsState`), without a
server: one campaign per host and per deployment, a claim answered by holder, a holder that ended
taken over with the changes it recorded, a release, and the registry carried whole over
continue-as-new. The end-to-end claims are
tests/test_campaign.py's."""

from __future__ import annotations

import warnings

from contracts.converter import DATA_CONVERTER
from contracts.models.campaign import ClaimRequest, ClaimsInput, DeploymentRecord, RecordRequest
from workflows.campaign_claims.state import ClaimsState


def _claim(
    state: ClaimsState, campaign: str, *hosts: str, take_from: tuple[str, ...] = ()
) -> dict[str, tuple[str, ...]]:
    return state.claim(ClaimRequest(campaign=campaign, host_ids=hosts, take_from=take_from)).held


def test_a_host_is_held_by_one_campaign_and_the_other_is_told_which() -> None:
    state = ClaimsState()
    assert _claim(state, "campaign/a", "h1", "h2") == {}
    assert _claim(state, "campaign/b", "h2", "h3") == {"campaign/a": ("h2",)}
    assert _claim(state, "campaign/a", "h1", "h2") == {}, "its own hosts again: still its"
    assert state.holders == {"campaign/a": ["h1", "h2"], "campaign/b": ["h3"]}
    assert state.counts() == {"campaign/a": 2, "campaign/b": 1}
    asked = ClaimRequest(campaign="campaign/c", host_ids=("h1", "h3", "h4"))
    assert state.held(asked).held == {"campaign/a": ("h1",), "campaign/b": ("h3",)}
    assert "campaign/c" not in state.holders, "a query changes nothing"


def test_a_holder_that_ended_is_taken_over_and_a_release_frees_every_host() -> None:
    state = ClaimsState()
    _claim(state, "campaign/gone", "h1", "h2", "h3")
    assert _claim(state, "campaign/b", "h1", take_from=("campaign/gone",)) == {}
    assert state.holders == {"campaign/b": ["h1"]}, "an ended holder holds nothing"
    assert _claim(state, "campaign/c", "h2") == {}
    assert state.release("campaign/b").released == 1 and state.release("campaign/b").released == 0
    assert _claim(state, "campaign/d", "h1", "h2") == {"campaign/c": ("h2",)}


def test_the_registry_continues_as_new_whole() -> None:
    state = ClaimsState()
    _claim(state, "campaign/a", "h1", "h2")
    _claim(state, "campaign/b", "h3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [payload] = DATA_CONVERTER.payload_converter.to_payloads([state])
    [carried] = DATA_CONVERTER.payload_converter.from_payloads([payload], [ClaimsInput])
    again = ClaimsState.carried(carried)
    assert again.holders == state.holders
    assert _claim(again, "campaign/c", "h1", "h3") == {"campaign/a": ("h1",), "campaign/b": ("h3",)}


def test_a_deployment_is_held_by_one_campaign_and_its_change_outlives_a_campaign_that_ended() -> None:
    state = ClaimsState()
    first = state.claim(ClaimRequest(campaign="campaign/a", host_ids=("h1",), deployments=("fleet",)))
    assert (first.held_deployments, first.inherited) == ({}, ())
    other = state.claim(ClaimRequest(campaign="campaign/b", host_ids=("h2",), deployments=("fleet",)))
    assert other.held_deployments == {"campaign/a": ("fleet",)}, "one campaign per deployment"
    change = DeploymentRecord(deployment="fleet", field="bfb", previous="bf-orig", value="bf-new")
    assert state.record(RecordRequest(campaign="campaign/a", changes=(change,))) == 1
    assert state.record(RecordRequest(campaign="campaign/b", changes=(change,))) == 0, "not its deployment"
    # campaign/a is terminated: its release never comes. A campaign that touches its host takes
    # its recorded change over, to put it back.
    asked = ClaimRequest(campaign="campaign/c", host_ids=("h1",))
    assert [r.deployment for r in state.held(asked).records] == ["fleet"], "a preview names it"
    taken = state.claim(asked.model_copy(update={"take_from": ("campaign/a",)}))
    assert [(r.deployment, r.previous, r.holder) for r in taken.inherited] == [
        ("fleet", "bf-orig", "campaign/c")
    ]
    assert state.deployment_holders() == {"fleet": "campaign/c"} and state.holders["campaign/c"] == ["h1"]
    assert state.release("campaign/c").released == 1 and state.deployment_holders() == {}


def test_a_later_campaign_of_the_same_name_inherits_what_the_earlier_run_left() -> None:
    state = ClaimsState()
    state.claim(ClaimRequest(campaign="campaign/fleet", host_ids=("h1",), deployments=("canary",)))
    change = DeploymentRecord(deployment="canary", field="bfb", previous="bf-orig", value="bf-new")
    state.record(RecordRequest(campaign="campaign/fleet", changes=(change,)))
    again = state.claim(ClaimRequest(campaign="campaign/fleet", host_ids=("h1",), deployments=("canary",)))
    assert [(r.deployment, r.previous) for r in again.inherited] == [("canary", "bf-orig")]
    unchanged = ClaimsState()
    unchanged.claim(ClaimRequest(campaign="campaign/x", host_ids=(), deployments=("d",)))
    assert (
        unchanged.claim(ClaimRequest(campaign="campaign/x", host_ids=(), deployments=("d",))).inherited == ()
    )
