"""The Kubernetes Events of a rollout and a campaign (`metalflow.runtime.events` writes them): one
start, one end, and what an operator must look at in between (a rollout paused, a campaign halted).

A rollout's first run enters `preparing` (a continued run does not); a campaign's first run reports
`campaign-started` as it selects (`workflows/campaign/footprint.py`: it starts in `selecting`, so no
phase is entered). Their endings are their final phases (`workflows/rollout/state.py` ENDED,
`workflows/campaign/views.py` ENDED_PHASES): an operator's abort and a cancel of the workflow are
both `...Aborted` (the note, the final details, says which and why). A campaign writes no Event per
host: each host's own operation tells its DPUNode, so 10,000 hosts cost the campaign a handful.
"""

from __future__ import annotations

from contracts import events

ROLLOUT_STARTED = "preparing"  # workflows/rollout/state.py PREPARING: its first run only
ROLLOUT_ENDINGS = {
    "completed": ("RolloutSucceeded", "Normal"),
    "rolled-back": ("RolloutRolledBack", "Warning"),
    "failed": ("RolloutFailed", "Warning"),
    "aborted": ("RolloutAborted", "Warning"),
    "cancelled": ("RolloutAborted", "Warning"),
}
CAMPAIGN_STARTED = events.CAMPAIGN_STARTED  # reported as its first run selects (`Footprint._select`)
CAMPAIGN_ENDINGS = {
    "completed": ("CampaignCompleted", "Normal"),
    "stopped": ("CampaignStopped", "Warning"),
    "failed": ("CampaignFailed", "Warning"),
    "aborted": ("CampaignAborted", "Warning"),
    "cancelled": ("CampaignAborted", "Warning"),
}
RUN_REASONS = {
    "RolloutWorkflow": {
        ROLLOUT_STARTED: ("RolloutStarted", "Normal"),
        "paused": ("RolloutPaused", "Warning"),
        **ROLLOUT_ENDINGS,
    },
    "CampaignWorkflow": {
        CAMPAIGN_STARTED: ("CampaignStarted", "Normal"),
        "halted": ("CampaignHalted", "Warning"),
        **CAMPAIGN_ENDINGS,
    },
}
"""Workflow type -> phase (or reported occurrence) -> the Event's reason and type."""

ONCE_PER_RUN = {
    "RolloutWorkflow": frozenset({ROLLOUT_STARTED, *ROLLOUT_ENDINGS}),
    "CampaignWorkflow": frozenset({CAMPAIGN_STARTED, *CAMPAIGN_ENDINGS}),
}
"""Phases of a rollout and a campaign that are one fact per run however often they are told (a
workflow task that ran again after telling one, with a longer history); a pause or a halt again
is a fact of its own."""
