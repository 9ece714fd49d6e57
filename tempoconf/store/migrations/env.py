"""Alembic environment: run by `tempoconf.store.migrate` on a connection it passes in."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine, pool

from tempoconf.store.tables import metadata

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    # Only the `alembic` command line comes here (with sqlalchemy.url set); the store passes a connection.
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "", poolclass=pool.NullPool)
    with engine.connect() as connection:
        _run(connection)


if context.is_offline_mode():
    raise RuntimeError("tempoconf migrations run online only")
run_migrations_online()
