"""`HostOperationWorkflow`: provision or reprovision a host's DPUs through DPF.

`workflow.py` is the runbook (the only `workflow.defn`); `reboot_round.py` its reboot round, its
base class; `state.py` what the run knows and decides (`HostOperationState`, no temporalio);
`kube_calls.py` its bounded Kubernetes calls (docs/ARCHITECTURE.md section 3). Nothing is
imported here: Temporal's sandbox runs this file for every run of the workflow."""
