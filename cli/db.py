"""`tempoconf db upgrade`: bring the store's schema to this version of tempoconf, explicitly;
`tempoconf db downgrade REVISION`: take it back to an earlier version's, before that version runs
on it again.

Deployments run `upgrade` once per upgrade (the compose file's `migrate` service does), before the
new API and worker processes start. Going back to an earlier tempoconf after a migration: this
(newer) version's `downgrade` first, to the migration the earlier one names when it refuses the
store, then the earlier version's processes."""

from __future__ import annotations

import argparse

from sqlalchemy import Engine, text

from tempoconf.cli._common import (
    die,
    missing_store_message,
    open_store,
    settings_from_args,
    sqlite_file,
)

__all__ = ["downgrade_command", "upgrade_command"]


def upgrade_command(args: argparse.Namespace) -> int:
    from tempoconf.store.engine import head_revision

    settings = settings_from_args(args)
    # create=True: a first deployment's SQLite store starts here; the only migrating command
    # besides `dev` and `demo`.
    with open_store(settings, create=True, migrate=True) as store:
        print(f"store {store.redacted_url} is at migration {head_revision()} (head)")
    return 0


def downgrade_command(args: argparse.Namespace) -> int:
    from tempoconf.store.engine import current_revision, downgrade, make_engine, revisions_in_order

    settings = settings_from_args(args)
    url = settings.resolved_database_url
    database = sqlite_file(url)
    if database is not None and not database.exists():
        die(missing_store_message(settings, database))
    known = revisions_in_order()
    target = args.revision
    if target not in known:
        die(
            f"no migration {target!r}: this tempoconf knows {', '.join(known)} (oldest first; the "
            "earlier tempoconf names the one it needs when it refuses the store)"
        )
    engine = make_engine(url)
    try:
        where = f"store {engine.url.render_as_string(hide_password=True)}"
        current = current_revision(engine)
        if current is None:
            die(f"{where} has no tempoconf schema: nothing to take back")
        if current not in known:
            die(
                f"{where} is at migration {current}, which this tempoconf does not know: a newer "
                "tempoconf migrated it; run `tempoconf db downgrade` with that version"
            )
        if known.index(target) > known.index(current):
            die(
                f"{where} is at migration {current}, before {target}: `tempoconf db upgrade` "
                "moves it forward"
            )
        if target == current:
            print(f"{where} is at migration {target}: nothing to undo")
            return 0
        holders = _lock_holders(engine)
        if holders:
            die(
                f"{where}: {len(holders)} config(s) are locked by a rollout ({'; '.join(holders)}). "
                "A downgrade drops what later migrations added, which a running rollout may use: "
                "let the rollouts end, or halt them, first. Nothing was changed."
            )
        undone = known[known.index(target) + 1 : known.index(current) + 1]
        downgrade(engine, target)
    finally:
        engine.dispose()
    print(f"{where} is at migration {target}; undone: {', '.join(reversed(undone))}")
    return 0


def _lock_holders(engine: Engine) -> list[str]:
    """`namespace/path by workflow id` of every config lock. Plain SQL, not `Store.list_locks`:
    a Store opens only a store at this version's head, and a downgrade may start below it (the
    table is the first migration's, so every revision has it)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT namespace, path, workflow_id FROM config_lock ORDER BY acquired_at")
        ).all()
    return [f"{namespace}/{path} by {workflow_id}" for namespace, path, workflow_id in rows]
