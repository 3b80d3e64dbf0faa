"""The embedded development stack behind `metalflow dev`: Temporal dev server, worker, demo."""
