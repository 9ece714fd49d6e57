"""`tempoconf get`: what the distribution API serves to one client."""

from __future__ import annotations

import argparse
import json
import socket

import httpx

from tempoconf.cli._common import die, settings_from_args
from tempoconf.cli.schema import check_config_name

__all__ = ["get_command"]

TIMEOUT_SECONDS = 10.0


def get_command(args: argparse.Namespace) -> int:
    check_config_name(args.namespace, args.path)
    settings = settings_from_args(args)
    params: list[tuple[str, str]] = [
        ("namespace", args.namespace),
        ("client", args.client or socket.gethostname()),
    ]
    if args.channel:
        params.append(("channel", args.channel))
    params += [("label", label) for label in args.label]
    if args.stable:
        params.append(("stable", "true"))
    headers = {"Authorization": f"Bearer {settings.client_token}"} if settings.client_token else {}
    url = f"{settings.resolved_api_url}/v1/configs/{args.path}"
    try:
        response = httpx.get(url, params=tuple(params), headers=headers, timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as error:
        die(
            f"cannot reach the API at {settings.resolved_api_url}: {error} "
            "(is `tempoconf dev` running? set TEMPOCONF_API_URL or --api-url)"
        )
    if response.status_code != 200:
        die(_refusal(response, args, settings.resolved_api_url))
    print(json.dumps(response.json(), indent=2))
    return 0


def _refusal(response: httpx.Response, args: argparse.Namespace, api_url: str) -> str:
    """One line saying what the API refused and why (its `error`), naming the API that answered."""
    answer = f"{response.status_code} from {api_url}"
    if response.status_code == 404:
        return f"no config {args.path} in namespace {args.namespace} ({answer})"
    if response.status_code == 401:
        return f"the API refused the client token ({answer}): set TEMPOCONF_CLIENT_TOKEN"
    try:
        reason = str(response.json()["error"])
    except (ValueError, KeyError, TypeError):
        reason = response.text.strip() or response.reason_phrase
    return f"the API refused the request ({answer}): {reason}"
