"""Temporal task priorities of metalflow's work, in one place: a lower key is served first.

The matching service keeps a sub-queue per priority key in a task queue and serves the lowest key
that has a task; within a key, tasks keep their order. A workflow's activities, children and
continued runs inherit its key unless they set one. When nothing is backlogged the keys change
nothing; when one worker is behind (a burst of operations, 10,000 monitors starting), they
decide what goes first.

- 2, `REBOOT_PRIORITY`: a reboot child (`HostRebootWorkflow`) and its activities
  (`lease_host_bmc`, `power_cycle_host`), and a BMC's lease workflow. DPF waits for the power
  cycle it asked for: every second in the backlog is reaction time. In a 200-host burst, the
  same code without and with the key: from the reboot's start to its power cycle's schedule
  11.7 s -> 1.9 s, reaction 12.6 s -> 2.9 s median, 22.5 s -> 7.0 s p99 (bench/README.md).
- 3, unset: entities, operations, campaigns, rollouts, the site watch.
- 4, `MONITOR_PRIORITY`: host monitors, background work (see `metalflow.monitors`).

Cost: none per host (a field of the start command; no queue, worker, poller or history event
more). A reboot is short (two activities, a handful of workflow tasks), so serving it first delays
the rest by little. A server without the priority matcher (older, or `matching.useNewMatcher`
off) ignores the keys: everything shares FIFO order as before. Work started before a key was set
keeps the key it started with.
"""

from __future__ import annotations

from typing import Final

from temporalio.common import Priority

REBOOT_PRIORITY: Final = Priority(priority_key=2)
MONITOR_PRIORITY: Final = Priority(priority_key=4)
