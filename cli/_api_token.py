"""The bearer token the operator commands send the admin API in API mode (cli/_backend.py), from
the first of these that is set: `TEMPOCONF_API_TOKEN_COMMAND` (a shell command that prints it,
as kubectl's exec credential plugins do), `TEMPOCONF_API_TOKEN` (a static token or an OIDC access
token, sent as is), `TEMPOCONF_ADMIN_TOKEN` (the older name). The command runs only when a command
goes through the API, once per process however many requests it makes; the token is never
printed, nor the command (it may hold a secret)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass
from typing import Any

from tempoconf.cli._common import die
from tempoconf.settings import Settings

__all__ = ["TOKEN_COMMAND_TIMEOUT_SECONDS", "ApiCredential", "api_credential", "token_variable"]

TOKEN_COMMAND_TIMEOUT_SECONDS = 30.0
COMMAND_VARIABLE = "TEMPOCONF_API_TOKEN_COMMAND"

# What the command printed, by command: run once per process (a command may open the API twice).
_printed: dict[str, str] = {}


@dataclass(frozen=True)
class ApiCredential:
    token: str
    variable: str
    """The setting it came from, for the messages that ask to fix it."""


def token_variable(settings: Settings) -> str | None:
    """The setting the API token comes from (its command not run); None when none is set."""
    if settings.api_token_command:
        return COMMAND_VARIABLE
    if settings.api_token:
        return "TEMPOCONF_API_TOKEN"
    if settings.admin_token:
        return "TEMPOCONF_ADMIN_TOKEN"
    return None


def api_credential(settings: Settings) -> ApiCredential:
    """The token and where it came from; a command that fails, times out or prints no token ends
    the command with one line naming TEMPOCONF_API_TOKEN_COMMAND and its stderr's last line."""
    command = settings.api_token_command
    if command:
        if command not in _printed:
            _printed[command] = _run(command)
        return ApiCredential(_printed[command], COMMAND_VARIABLE)
    if settings.api_token:
        return ApiCredential(settings.api_token, "TEMPOCONF_API_TOKEN")
    if settings.admin_token:
        return ApiCredential(settings.admin_token, "TEMPOCONF_ADMIN_TOKEN")
    raise AssertionError("API mode without a token")  # api_mode() requires one


def _run(command: str) -> str:
    # A process group of its own: on a timeout the shell's children die with it, else one holding
    # the pipes open would keep us waiting. No input: outside the terminal's foreground group a
    # prompt would stop it until the timeout; reading nothing, it fails at once, saying why.
    with subprocess.Popen(
        command,
        shell=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        process_group=0,
    ) as process:
        try:
            stdout, stderr = process.communicate(timeout=TOKEN_COMMAND_TIMEOUT_SECONDS)
        except BaseException as error:
            _kill_group(process)
            process.communicate()
            if isinstance(error, subprocess.TimeoutExpired):
                die(
                    f"{COMMAND_VARIABLE} printed no token within "
                    f"{TOKEN_COMMAND_TIMEOUT_SECONDS:g} s (stopped)"
                )
            raise
    said = _last_line(stderr)
    if process.returncode != 0:
        die(f"{COMMAND_VARIABLE} failed (exit {process.returncode}){said}")
    return _token(stdout.strip(), said)


def _kill_group(process: subprocess.Popen[str]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended meanwhile
        pass


def _last_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return f": {lines[-1]}" if lines else ""


def _token(printed: str, said: str) -> str:
    """The token in what the command printed: the text itself, or a JSON object's `access_token`,
    else `token`, else `status.token` (kubectl's ExecCredential)."""
    if not printed:
        die(f"{COMMAND_VARIABLE} printed no token (exit 0){said}")
    if printed.startswith("{"):
        try:
            found: Any = json.loads(printed)
        except ValueError:
            die(f"{COMMAND_VARIABLE} printed neither a token nor a JSON object")
        status = found.get("status")  # a text starting with `{` that parses is an object
        candidates = (
            found.get("access_token"),
            found.get("token"),
            status.get("token") if isinstance(status, dict) else None,
        )
        token = next((c for c in candidates if isinstance(c, str) and c.strip()), None)
        if token is None:
            die(
                f"{COMMAND_VARIABLE} printed a JSON object without a token (expected a string "
                "`access_token`, `token` or `status.token`)"
            )
        printed = token.strip()
    if len(printed.split()) != 1:
        # A bearer token is one word; more is something else (never echoed: it may hold it).
        die(f"{COMMAND_VARIABLE} printed more than a token ({len(printed.split())} words)")
    return printed
