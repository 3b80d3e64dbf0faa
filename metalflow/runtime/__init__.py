"""The worker runtime: `python worker.py` (`worker`), its workflow runner (`code_cache`), worker
versioning (`versioning`), tracing (`telemetry`), health and metrics (`observability`), and the
lifeline that stops a child process with its parent (`lifeline`). Never imports the dev stack."""
