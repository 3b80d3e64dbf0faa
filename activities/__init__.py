"""All I/O of metalflow lives in activities: methods of small classes that hold their clients.

`build_activities` is the one list the worker registers; a new activity class is added there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from activities.demo import DemoActivities


def build_activities() -> list[Callable[..., Any]]:
    """Build every activity class once and return all activity callables to register."""
    demo = DemoActivities()
    return [demo.describe_worker]
