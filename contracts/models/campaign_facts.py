"""What a campaign reads before it decides: the DPUDeployments it would point, and the claims
registry's answer (the hosts and deployments other campaigns hold, and what a campaign that no
longer runs left changed). Facts only: the decisions over them are the campaign's admission
(`workflows/campaign/admission.py`), which `metalflow campaign plan`, `campaign start` and the
workflow call alike.

The registry (`CampaignClaimsWorkflow`, `campaign-claims`) holds, per running campaign, its
hosts and the DPUDeployments it points, each with the value it found (`DeploymentRecord`), so a
campaign terminated mid-way leaves its changes on record: the next campaign that touches its
hosts or deployments takes them over and puts them back (README, "Fleet campaigns").

Size: ids only (~15 bytes a host); a deployment's hosts are named only as far as the campaign's
roster goes (those outside it are counted, SHOWN of them named).
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.campaign_target import CampaignTarget

SHOWN: Final = 10  # hosts outside a campaign's roster named per deployment
ON_DELETE: Final = "OnDelete"

CLAIM_UPDATE: Final = "claim"
RECORD_UPDATE: Final = "record"
RELEASE_UPDATE: Final = "release"
HELD_QUERY: Final = "held"


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


class HostGroup(_Frozen):
    """Hosts that share one reason (compact: ids only, ~15 bytes a host)."""

    reason: str
    host_ids: tuple[str, ...]


# A degraded group's reason names each of its hosts so (one group for many hosts alike: a fleet of
# one BMC model is one reason, not one per host); each host's operation says its own name.
HOST_MARK: Final = "<host>"


def degraded_words(groups: tuple[HostGroup, ...], host_id: str) -> tuple[str, ...]:
    """What the kept site check says of `host_id`'s operation (`CampaignInput.site_degraded`), as
    `metalflow host` has its request carry it (`site_check`): none when it is not degraded."""
    return tuple(g.reason.replace(HOST_MARK, host_id) for g in groups if host_id in g.host_ids)


# -- the DPUDeployments a BFB or flavor campaign points --------------------------------------------


class DeploymentsInput(_Frozen):
    """What to read for a BFB or flavor campaign: its target's deployments, over its roster."""

    target: CampaignTarget
    host_ids: tuple[str, ...]  # the campaign's roster: a deployment's hosts are named within it


class DeploymentFacts(_Frozen):
    """One DPUDeployment as read: nothing is decided here."""

    role: Literal["canary", "fleet"]
    name: str
    found: bool = True
    strategy: str = ""  # spec.dpus.dpuSetStrategy.type (the CRD's default when the object omits it)
    value: str = ""  # its current value of the target kind's field
    covered: tuple[str, ...] = ()  # the roster's hosts whose DPUs it selects, in roster order
    outside: int = 0  # hosts outside the roster it selects
    outside_named: tuple[str, ...] = ()  # the first SHOWN of them


class DeploymentsRead(_Frozen):
    """The deployments of a BFB or flavor campaign as read, and whether its BFB or flavor exists."""

    target_found: bool = True
    namespace: str = ""
    deployments: tuple[DeploymentFacts, ...] = ()


def strategy_refusal(name: str, strategy: str) -> str | None:
    """Why a DPUDeployment under `strategy` may not be pointed (None: it is `OnDelete`)."""
    if strategy == ON_DELETE:
        return None
    return (
        f"DPUDeployment {name} has dpuSetStrategy {strategy}: DPF would reprovision each of its "
        "DPUs on its own, at its own pace, once pointed; a campaign paces them only under "
        "OnDelete (set spec.dpus.dpuSetStrategy.type: OnDelete)"
    )


# -- the claims registry ---------------------------------------------------------------------------


class DeploymentRecord(_Frozen):
    """A DPUDeployment a campaign holds, and the change it makes there: `previous` is the value it
    found, so it can be put back whoever ends the campaign. `field` "": held, no change recorded."""

    deployment: str
    holder: str = ""  # the campaign's workflow id
    field: str = ""
    previous: str = ""
    value: str = ""
    taken_from: str = ""  # the campaign that made the change, when another took it over

    @property
    def changed(self) -> bool:
        return bool(self.field)


class DeploymentHeld(_Frozen):
    deployment: str
    holder: str


class ClaimRequest(_Frozen):
    """Claim `host_ids` and the DPUDeployments `deployments` for `campaign` (a workflow id);
    `take_from`: holders known to have ended, whose hosts are freed and whose recorded changes
    pass to `campaign`."""

    campaign: str
    host_ids: tuple[str, ...]
    take_from: tuple[str, ...] = ()
    deployments: tuple[str, ...] = ()


class ClaimAnswer(_Frozen):
    """The hosts and deployments another campaign holds, by holder (every other one is now
    `campaign`'s), the recorded changes of those holders (`records`: a holder found to have
    ended leaves them to be put back), and the changes `campaign` took over (`inherited`)."""

    held: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    held_deployments: dict[str, tuple[str, ...]] = Field(default_factory=dict)
    records: tuple[DeploymentRecord, ...] = ()
    inherited: tuple[DeploymentRecord, ...] = ()


class RecordRequest(_Frozen):
    """The changes `campaign` is about to make, recorded before the first one is made."""

    campaign: str
    changes: tuple[DeploymentRecord, ...]


class ReleaseRequest(_Frozen):
    """Free what `campaign` holds: everything (`host_ids` None: its end), or only these of its
    hosts (ended in it: done, at the target, skipped; its deployments stay held)."""

    campaign: str
    host_ids: tuple[str, ...] | None = None


class ReleaseAnswer(_Frozen):
    released: int


class ClaimsInput(BaseModel):
    """The registry's state, carried whole over continue-as-new: holder -> hosts (~15 bytes a
    host), and deployment -> the record of the campaign that holds it. Mutable: the registry's
    state object (workflows/campaign_claims/state.py) derives from it and changes it in place.
    Unknown fields are ignored (a newer worker may add one)."""

    holders: dict[str, list[str]] = Field(default_factory=dict)
    deployments: dict[str, DeploymentRecord] = Field(default_factory=dict)


class ClaimsStatus(_Frozen):
    holders: dict[str, int]  # holder -> hosts held
    deployments: dict[str, str] = Field(default_factory=dict)  # deployment -> its holder


# -- the campaign's activities over the registry ---------------------------------------------------


class ClaimInput(_Frozen):
    campaign_workflow_id: str
    host_ids: tuple[str, ...]
    deployments: tuple[str, ...] = ()


class ClaimResult(_Frozen):
    """What a claim (or its preview) found: hosts and deployments another running campaign holds
    (`reason` names it), and the changes of campaigns that no longer run, taken over to be put
    back (`inherited`)."""

    held: tuple[HostGroup, ...] = ()
    held_deployments: tuple[DeploymentHeld, ...] = ()
    inherited: tuple[DeploymentRecord, ...] = ()


class RecordInput(_Frozen):
    campaign_workflow_id: str
    changes: tuple[DeploymentRecord, ...]


class ReleaseInput(_Frozen):
    campaign_workflow_id: str
    host_ids: tuple[str, ...] | None = None  # None: everything it holds (its end)
