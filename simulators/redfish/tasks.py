"""Redfish tasks and their monitors, for resets (task-monitor profile) and firmware updates.

The task resource doubles as its task monitor, as on Dell iDRAC: `GET
/redfish/v1/TaskService/Tasks/<n>` answers 202 (with `Retry-After`) while the task runs and 200
with the final Task once it is `Completed` or `Exception`. Each BMC keeps its last
`TASKS_KEPT` tasks; older finished ones are forgotten, as BMCs prune their task lists.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from . import messages

TASKS_KEPT = 32
TASK_TYPE = "#Task.v1_7_1.Task"


@dataclass(slots=True)
class Task:
    """One long-running operation of one BMC."""

    id: str
    name: str
    uri: str
    started_at: float  # loop time
    expected_seconds: float
    start_time: str = field(default_factory=messages.now_rfc3339)
    state: str = "Running"
    status: str = "OK"
    end_time: str | None = None
    task_messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.state in ("Completed", "Exception", "Killed", "Cancelled")

    def complete(self, text: str) -> None:
        self.state, self.status, self.end_time = "Completed", "OK", messages.now_rfc3339()
        self.task_messages = [messages.message("Success", text)]

    def fail(self, text: str) -> None:
        self.state, self.status, self.end_time = "Exception", "Critical", messages.now_rfc3339()
        self.task_messages = [
            messages.message("GeneralError", text, resolution="Correct the request and resubmit it.")
        ]

    def body(self) -> dict[str, Any]:
        if self.done:
            percent = 100 if self.state == "Completed" else 0
        elif self.expected_seconds <= 0:
            percent = 99
        else:
            elapsed = asyncio.get_running_loop().time() - self.started_at
            percent = min(99, int(100 * elapsed / self.expected_seconds))
        body: dict[str, Any] = {
            "@odata.id": self.uri,
            "@odata.type": TASK_TYPE,
            "Id": self.id,
            "Name": self.name,
            "TaskState": self.state,
            "TaskStatus": self.status,
            "StartTime": self.start_time,
            "PercentComplete": percent,
            "TaskMonitor": self.uri,
            "Messages": self.task_messages,
        }
        if self.end_time is not None:
            body["EndTime"] = self.end_time
        return body


class Tasks:
    """The task lists of all BMCs, each created on its BMC's first task."""

    def __init__(self) -> None:
        self._by_bmc: dict[str, OrderedDict[str, Task]] = {}
        self._next: dict[str, int] = {}

    def new(self, bmc_id: str, prefix: str, name: str, expected_seconds: float) -> Task:
        tasks = self._by_bmc.get(bmc_id)
        if tasks is None:
            tasks = self._by_bmc[bmc_id] = OrderedDict()
        number = self._next.get(bmc_id, 1)
        self._next[bmc_id] = number + 1
        task_id = str(number)
        task = Task(
            id=task_id,
            name=name,
            uri=f"{prefix}/redfish/v1/TaskService/Tasks/{task_id}",
            started_at=asyncio.get_running_loop().time(),
            expected_seconds=expected_seconds,
        )
        tasks[task_id] = task
        while len(tasks) > TASKS_KEPT:
            oldest_id, oldest = next(iter(tasks.items()))
            if not oldest.done:
                break
            del tasks[oldest_id]
        return task

    def get(self, bmc_id: str, task_id: str) -> Task | None:
        tasks = self._by_bmc.get(bmc_id)
        return None if tasks is None else tasks.get(task_id)

    def list(self, bmc_id: str) -> list[Task]:
        tasks = self._by_bmc.get(bmc_id)
        return [] if tasks is None else list(tasks.values())
