"""`SiteDPFWatchWorkflow`: a site's one DPF watch and the registry of who waits on which host.

A workflow is defined in `workflow.py` only; every other module here is its state, its rules or
a part (docs/ARCHITECTURE.md section 3). Nothing is imported here: Temporal's sandbox runs this
file for every run of the workflow."""
