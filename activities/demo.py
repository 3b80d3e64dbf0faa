"""The foundation demo's activity: observe the worker process that runs it."""

from __future__ import annotations

import os
import platform
import socket
from datetime import UTC, datetime

import temporalio
from temporalio import activity

from metalflow.models.demo import WorkerFacts


class DemoActivities:
    """Activities of the demo workflow; holds nothing yet, but shows the shape every activity class has."""

    @activity.defn(name="describe_worker")
    async def describe_worker(self) -> WorkerFacts:
        """Report which worker process ran this activity, so the demo proves a real worker did."""
        return WorkerFacts(
            hostname=socket.gethostname(),
            pid=os.getpid(),
            python_version=platform.python_version(),
            temporalio_version=temporalio.__version__,
            activity_attempt=activity.info().attempt,
            observed_at=datetime.now(UTC),
        )
