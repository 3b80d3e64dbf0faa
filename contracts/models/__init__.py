"""Pydantic models: the inputs, results, signals and query answers of workflows and activities."""
