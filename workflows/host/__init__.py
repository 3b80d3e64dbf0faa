"""The host entity `host/<id>` (`HostWorkflow`, `workflow.py`): the one owner of a host; its state
and request rules (`state.py`), how an operation's child ended in its words (`outcome.py`), and
the versions it shows in its memo (`versions.py`). Its operation requests are declared once, in
`contracts/host_requests.py`.

A workflow is defined in `workflow.py` only; every other module here is its state, its rules or
a part (docs/ARCHITECTURE.md section 3). Nothing is imported here: Temporal's sandbox runs this
file for every run of the workflow."""
