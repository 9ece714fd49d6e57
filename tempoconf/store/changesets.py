"""Changesets in the store: which configs a run holds (a changeset's run holds several locks).

A changeset's steps write every config in one transaction with `Store.atomically()` (_base.py);
the per-config methods of rollouts.py do the writing.
"""

from __future__ import annotations

from sqlalchemy import select

from tempoconf.store._base import LOCK, StoreBase
from tempoconf.store.records import LockRecord
from tempoconf.store.rollouts import _lock_record

__all__ = ["ChangesetsMixin"]


class ChangesetsMixin(StoreBase):
    """The locks of one run (a part of Store)."""

    def locks_of_run(self, run_id: str) -> list[LockRecord]:
        """Every config lock `run_id` holds, by namespace and path (one for a single config's
        rollout, each of a changeset's configs for a changeset's)."""
        with self._read() as conn:
            rows = conn.execute(
                select(LOCK).where(LOCK.c.run_id == run_id).order_by(LOCK.c.namespace, LOCK.c.path)
            ).all()
        return [_lock_record(row._mapping) for row in rows]
