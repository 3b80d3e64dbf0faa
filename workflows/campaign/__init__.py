"""`CampaignWorkflow`: bring many hosts to one target, paced and guarded. `workflow.py` the runbook,
`state.py` what it knows and decides (`CampaignState`, carried over continue-as-new), built on
`controls.py` (the operator's updates), `canary.py` (the canary and the batches), `changes.py`
(its DPUDeployment changes) and `ledger.py` (where each host is); `admission.py` whether and how
it may start (which `campaign plan` and `start` call too); `views.py` what it shows (status,
hosts, result); `plan.py` its rules (windows, budget, limits).

A workflow is defined in `workflow.py` only; every other module here is its state, its rules or
a part (docs/ARCHITECTURE.md section 3). Nothing is imported here: Temporal's sandbox runs this
file for every run of the workflow."""
