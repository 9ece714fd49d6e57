"""`tempoconf get`: what the distribution API serves to one client."""

from __future__ import annotations

import argparse
import json
import socket

import httpx

from cli._common import die, settings_from_args
from cli.schema import check_config_name

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
        response = httpx.get(url, params=params, headers=headers, timeout=TIMEOUT_SECONDS)
    except httpx.HTTPError as error:
        die(
            f"cannot reach the API at {settings.resolved_api_url}: {error} (is `tempoconf dev` running? set TEMPOCONF_API_URL or --api-url)"
        )
    if response.status_code != 200:
        print(f"error: {response.status_code} {response.reason_phrase} from GET {response.url}")
        try:
            print(json.dumps(response.json(), indent=2))
        except ValueError:
            if response.text:
                print(response.text)
        return 1
    print(json.dumps(response.json(), indent=2))
    return 0
