"""`BMCLeaseWorkflow`: the fleet-wide limit of operations per BMC (its holder's side is a part:
`workflows/parts/bmc_lease_holder.py`).

A workflow is defined in `workflow.py` only; every other module here is its state, its rules or
a part (docs/ARCHITECTURE.md section 3). Nothing is imported here: Temporal's sandbox runs this
file for every run of the workflow."""
