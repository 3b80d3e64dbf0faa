"""Which workflow runs this worker process has counted already (`contracts.metrics`).

Why: the SDK skips a workflow's metric increments while it replays, but a workflow task that
failed before its completion was recorded runs its code again for real. The case seen: a signal
arrived while `reprovision/host-003` completed, the server refused the completion
(`WorkflowTaskFailed`, cause `UNHANDLED_COMMAND`), and the retried task ran the kernel's end path
(`to_the_end`) again, so `metalflow_operations_finished_total` counted one run twice.

How: `contracts.metrics` imports this module passed through the workflow sandbox, so every run's
sandbox shares the one record of the process (a sandboxed module would be fresh per run, and a
retried task after an eviction gets a new sandbox). `first_time(run_id, what)` is True once per
run id and fact. The record is bounded (`LIMIT` entries, oldest forgotten first): a run whose
task is retried after more than `LIMIT` other counts in between would count again.

What remains possible: a retried task taken by another worker process (after a restart, or on a
queue served by several workers) counts again there; the counters stay at least once in that
case and exactly once otherwise.

Cost: one dict entry (two short strings) per counted fact, at most `LIMIT`; a lock per call.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

LIMIT = 20_000

_seen: OrderedDict[tuple[str, str], None] = OrderedDict()
_lock = threading.Lock()


def first_time(run_id: str, what: str) -> bool:
    """True the first time this process sees (`run_id`, `what`); False after that."""
    key = (run_id, what)
    with _lock:
        if key in _seen:
            return False
        _seen[key] = None
        if len(_seen) > LIMIT:
            _seen.popitem(last=False)
        return True
