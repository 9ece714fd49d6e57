"""The application layer: each operation an operator performs, once, for the CLI and the admin API.

Each transport (the admin API's routes, api/routes/; the CLI's direct mode, cli/_backend.py)
parses its input, calls the operation and formats what it answers; the CLI's API mode is an HTTP
client of the routes, so it runs the same operations too. An operation takes typed inputs, answers
dataclasses, and raises `errors.OperationError`s (NotFound, Conflict, Refused, Unavailable,
Undelivered) that each transport maps to its answer (an HTTP status and JSON error body; a message
and an exit code). Temporal and the store are imported where used: the API-mode CLI imports these
modules without loading either.

- `preview`: what a valid rollout request would do (`rollout plan`, `POST /v1/admin/plans`).
- `start`: plan a rollout (validated and previewed) and start it, refused while the lock's holder
  runs (tempoconf.temporal.lock_holder).
- `steer`: halt, bypass, advance, pause, resume, approve: the workflow's updates.
- `state`: a config's rollout as `rollout status` shows it (`view`: how a run is read).
- `targets`: which rollout a command or read acts on and every namespace it touches, from the
  rollout's own records (the admin API checks access against them).
- `freezes`: freeze a namespace, end its freeze (telling the waiting rollouts), list freezes.
- `clients`: the clients seen on a config, with what each applied.
- `served`: what is served in some namespaces at once (every config's stable version, schema
  digest and lock; the active freezes), which configs as code compare a directory with.
- `temporal_access`: how an operation reaches Temporal (each transport connects its own way).
- `errors`: the operations' errors.
"""
