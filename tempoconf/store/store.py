"""Data access for tempoconf (sqlmodel): schemas, versions, stable, rollouts, locks, audit log.

INTERFACE CONTRACT (implementations must keep it):
- Every method opens its own short transaction; nothing is half-written (one transaction per call).
- Every write an activity makes is idempotent: methods that take `event_key` insert an audit row
  with that unique key in the same transaction, and do nothing at all (returning False) when the
  key exists already, so an activity retried after a crash writes nothing twice.
- Every change that alters what a client resolves to bumps `revision()` in the same transaction,
  naming the configs it changed (the change log `load_snapshots_since` reads).
- Times are timezone-aware UTC datetimes in and out.

The methods live beside this module, one module per concern, and `Store` composes them:
catalogue.py (schemas, versions, stable), rollouts.py (locks and rollout rows), steps.py (a run's
publish, lease renewal, promote and revert, over each config it changes: a single config's
rollout is a changeset of one), rollout_rows.py (the rows those two write), audit.py (events and
history), clients.py (health reports, clients seen), distribution.py (snapshots clients resolve
against), engine.py (engine set-up, migrations, the revision counter) and change_log.py (the
configs each revision changed). _base.py holds what
they share: the connection, transactions and statements.
"""

from __future__ import annotations

from tempoconf.store.applied import AppliedMixin
from tempoconf.store.audit import AuditMixin
from tempoconf.store.catalogue import CatalogueMixin
from tempoconf.store.clients import ClientsMixin
from tempoconf.store.distribution import DistributionMixin
from tempoconf.store.engine import CHANGE_CHANNEL
from tempoconf.store.errors import (
    LockError,
    LockHeldError,
    LockLostError,
    StoreSchemaError,
    UnknownVersionError,
)
from tempoconf.store.freezes import FreezeActiveError, FreezesMixin, NotFrozenError
from tempoconf.store.rollouts import RolloutsMixin
from tempoconf.store.steps import StepsMixin

__all__ = [
    "CHANGE_CHANNEL",
    "Store",
    "FreezeActiveError",
    "LockError",
    "LockHeldError",
    "LockLostError",
    "NotFrozenError",
    "StoreSchemaError",
    "UnknownVersionError",
]


class Store(
    CatalogueMixin,
    RolloutsMixin,
    StepsMixin,
    AuditMixin,
    ClientsMixin,
    AppliedMixin,
    DistributionMixin,
    FreezesMixin,
):
    """The one store of a deployment. `url` is an SQLAlchemy URL (sqlite:///... or postgresql+psycopg://...)."""
