"""`HostRebootWorkflow`: one reboot of a host to its next boot generation; `failure.py` words a
BMC that could not do it, `options.py` holds the power cycle's activity options.

A workflow is defined in `workflow.py` only; every other module here is its state, its rules or
a part (docs/ARCHITECTURE.md section 3). Nothing is imported here: Temporal's sandbox runs this
file for every run of the workflow."""
