"""`CampaignClaimsWorkflow`: which campaign holds which host (one campaign per host); `state.py`
its state and decisions (`ClaimsState`).

A workflow is defined in `workflow.py` only; every other module here is its state, its rules or
a part (docs/ARCHITECTURE.md section 3). Nothing is imported here: Temporal's sandbox runs this
file for every run of the workflow."""
