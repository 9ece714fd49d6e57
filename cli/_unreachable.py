"""A command that cannot reach the store, Temporal or the API ends with one line saying what, where
and which setting to check (tempoconf.cli.main catches it, once for every command); any other
exception is a bug and keeps its traceback.

Only the libraries the command loaded are looked at (sys.modules): an error of a library that was
never imported cannot be this one's, and `tempoconf --help` or an API-mode command must not pay for
importing the others (tests/cli/test_startup.py)."""

from __future__ import annotations

import argparse
import sys

from tempoconf.settings import Settings

__all__ = ["unreachable_message"]


def unreachable_message(error: BaseException, args: argparse.Namespace) -> str | None:
    """The one line for `error` when it says the store, Temporal or the API could not be reached
    (refused, unknown database, rejected credentials, timed out); None for anything else."""
    from tempoconf.cli._common import settings_from_args

    if not isinstance(error, Exception):
        return None
    try:
        settings = settings_from_args(args)
    except Exception:  # the settings were read before the command failed: they still parse
        return None
    if "sqlalchemy" in sys.modules:
        message = _store_message(error, settings)
        if message is not None:
            return message
    if "temporalio" in sys.modules:
        message = _temporal_message(error, settings)
        if message is not None:
            return message
    if "httpx" in sys.modules:
        import httpx

        if isinstance(error, httpx.TransportError):
            return (
                f"cannot reach the API at {settings.resolved_api_url}: {_reason(error)}. "
                "Check TEMPOCONF_API_URL (or --api-url)."
            )
    return None


def _store_message(error: Exception, settings: Settings) -> str | None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

    if not isinstance(error, OperationalError | InterfaceError):
        return None
    assert isinstance(error, DBAPIError)
    # No statement: the connection itself failed (refused, no such database, bad password);
    # an invalidated connection: the server went away during the command. A statement's own
    # failure (a schema problem) is not "cannot reach": it keeps its traceback.
    if error.statement is not None and not error.connection_invalidated:
        return None
    url = make_url(settings.resolved_database_url)
    reason = _reason(error.orig if error.orig is not None else error)
    if url.password:
        reason = reason.replace(str(url.password), "***")
    where = url.render_as_string(hide_password=True)
    if settings.database_url is None:
        check = "TEMPOCONF_DATA_DIR (or --data-dir), or TEMPOCONF_DATABASE_URL (or --database-url)"
    else:
        check = "TEMPOCONF_DATABASE_URL (or --database-url)"
    return f"cannot reach the store at {where}: {reason}. Check {check}."


def _temporal_message(error: Exception, settings: Settings) -> str | None:
    from temporalio.service import RPCError

    from tempoconf.operations.temporal_access import temporal_unavailable
    from tempoconf.temporal.connection import TemporalSettingsError, temporal_connection

    if not isinstance(error, RPCError) or not temporal_unavailable(error):
        return None
    try:
        connection = temporal_connection(settings)
    except TemporalSettingsError:
        return None
    reason = connection.redact(_reason(error))
    return (
        f"cannot reach {connection.where}: {reason}. "
        "Check TEMPORAL_ADDRESS (or --temporal-address) and the TEMPORAL_TLS_* settings."
    )


def _reason(error: BaseException) -> str:
    """The first line of the error's message, without a trailing period (the line adds its own)."""
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0].strip().rstrip(".")
