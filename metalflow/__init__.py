"""metalflow: contracts and tools (models, names, settings, telemetry, the CLI, the dev stack)."""
