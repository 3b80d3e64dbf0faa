"""Orchestration only: deterministic workflow definitions, no I/O, no clocks, no randomness.

`ALL` is the one list the worker registers; a new workflow is added there.
"""

from __future__ import annotations

from workflows.demo import DemoWorkflow

ALL: list[type] = [DemoWorkflow]
