"""`CampaignWorkflow`: bring many hosts to one target, paced and guarded. `workflow.py` the runbook,
`state.py` what it knows and decides (`CampaignState`, carried over continue-as-new), `views.py`
what it shows (status, hosts, result), `plan.py` its rules (windows, budget, limits).

A workflow is defined in `workflow.py` only; every other module here is its state, its rules or
a part (docs/ARCHITECTURE.md section 3). Nothing is imported here: Temporal's sandbox runs this
file for every run of the workflow."""
