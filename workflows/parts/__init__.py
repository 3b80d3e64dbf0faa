"""Pieces several workflows use, none a workflow itself: the DPF watch a workflow waits through
(`dpf_watch.py`), DPF's barrier rules (`dpf_barrier.py`), the reboots an operation needs
(`reboot_rounds.py`: the host operation, firmware and a host reset; the entity starts its own
with `start_next_reboot`), the holder's side of a BMC's fleet-wide lease (`bmc_lease_holder.py`:
the reboot and the reset).

Nothing is imported here: Temporal's sandbox runs this file for every run that imports a part."""
