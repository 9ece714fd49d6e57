"""The rollout model: the request, its plan, the run's state machine and what it shows."""
