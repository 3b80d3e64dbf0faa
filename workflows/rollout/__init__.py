"""`RolloutWorkflow` (`workflow.py`): a coherent rollout of one Grove PodCliqueSet; `state.py`
its state and decisions, `steps.py` its rules over one view of the PodCliqueSet, `guard.py` the
part that heals while paused.

A workflow is defined in `workflow.py` only; every other module here is its state, its rules or
a part (docs/ARCHITECTURE.md section 3). Nothing is imported here: Temporal's sandbox runs this
file for every run of the workflow."""
