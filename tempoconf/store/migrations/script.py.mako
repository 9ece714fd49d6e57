## A revision declares what alembic reads of it: `revision` and `down_revision` (no branch labels or
## dependencies: the chain is linear). The docstring says what it changes, not the ids again.
"""${message}"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

revision: str = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
