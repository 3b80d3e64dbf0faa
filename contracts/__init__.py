"""The ground floor: what every other floor agrees on. Models (`models`), names (task queue,
search attributes, workflow ids), every error type (`errors`), the typed references to
activities (`activity_api`) and workflows (`workflow_api`), the payload converter, metrics,
priorities and the shared wording. Imports nothing of metalflow's other floors."""
