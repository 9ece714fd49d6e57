"""`tempoconf db upgrade`: bring the store's schema to this version of tempoconf, explicitly.

Deployments run it once per upgrade (the compose file's `migrate` service does), before the new
API and worker processes start."""

from __future__ import annotations

import argparse

from tempoconf.cli._common import open_store, settings_from_args

__all__ = ["upgrade_command"]


def upgrade_command(args: argparse.Namespace) -> int:
    from tempoconf.store.engine import head_revision

    settings = settings_from_args(args)
    # create=True: a first deployment's SQLite store starts here; the only migrating command
    # besides `dev` and `demo`.
    with open_store(settings, create=True, migrate=True) as store:
        print(f"store {store.redacted_url} is at migration {head_revision()} (head)")
    return 0
