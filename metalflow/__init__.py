"""metalflow's applications, the top floor: the Temporal client (`client`) and the CLI's host
entity and monitor helpers (`hosts`, `monitors`, `rollouts`, `progress`), the worker runtime
(`runtime`), the command line (`cli`) and the local dev stack (`devstack`)."""
