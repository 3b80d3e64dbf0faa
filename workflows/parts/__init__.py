"""Pieces several workflows use, none a workflow itself: the DPF watch a workflow waits through
(`dpf_watch.py`), DPF's barrier rules (`dpf_barrier.py`), a host operation's status (`host_status.py`).

Nothing is imported here: Temporal's sandbox runs this file for every run that imports a part."""
