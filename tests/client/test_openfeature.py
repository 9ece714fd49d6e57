"""The OpenFeature provider (blocking flavour) through the OpenFeature SDK, against a live API.

Each test drives openfeature's global `api` as a program would (set_provider_and_wait, clients,
event handlers) and changes the config through the store as the rollout activities do.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from openfeature import api
from openfeature.evaluation_context import EvaluationContext
from openfeature.event import ProviderEvent
from openfeature.exception import ErrorCode, ProviderNotReadyError
from openfeature.flag_evaluation import Reason
from openfeature.provider import ProviderStatus

from tempoconf.client import ConfigClient
from tempoconf.client._flagkeys import MISSING, FlagKeyError, lookup, parse_flag_key
from tempoconf.client._stagekind import stage_kind
from tempoconf.client.openfeature import TempoconfProvider
from tests.api.helpers import publish, start_rollout
from tests.client.helpers import PATH, promote, stable_served
from tests.client.live_api import LiveApi
from tests.client.openfeature_helpers import openfeature_events
from tests.fixtures.waiting import eventually_sync

FAST = {
    "poll_interval": 0.1,
    "min_interval": 0.05,
    "backoff_base": 0.05,
    "backoff_cap": 0.2,
    "timeout": 2,
}
STABLE = {
    "checkout": {"new_flow": False},
    "max_connections": 1000,
    "ratio": 0.5,
    "name": "blue",
    "regions": ["eu", "us"],
    "a/b": 1,
    "m~n": 2,
}
STAGED = {**STABLE, "checkout": {"new_flow": True}, "max_connections": 2000}
FLOW = f"{PATH}#/checkout/new_flow"
MAX = f"{PATH}#/max_connections"
NAME = f"{PATH}#/name"

READY = ProviderEvent.PROVIDER_READY
STALE = ProviderEvent.PROVIDER_STALE
ERROR = ProviderEvent.PROVIDER_ERROR
CHANGED = ProviderEvent.PROVIDER_CONFIGURATION_CHANGED


def test_the_canary_gets_the_canary_value_and_the_others_stable(live_api: LiveApi) -> None:
    stable = stable_served(live_api, STABLE)
    staged = start_rollout(live_api.store, PATH, STAGED)
    publish(live_api.store, PATH, index=0, name="channel:canary", channel="canary")
    live_api.wait_served(PATH, staged.version, channel="canary")

    canary = TempoconfProvider(live_api.url, [PATH], client_id="h1", channel="canary", **FAST)
    other = TempoconfProvider(live_api.url, [PATH], client_id="h2", **FAST)
    with openfeature_events() as events:
        api.set_provider_and_wait(canary, "canary")
        api.set_provider_and_wait(other, "other")
        on_canary = api.get_client("canary").get_boolean_details(FLOW, False)
        on_other = api.get_client("other").get_boolean_details(FLOW, True)
        assert (on_canary.value, on_canary.reason, on_canary.variant) == (
            True,
            Reason.TARGETING_MATCH,
            staged.version,
        )
        assert on_canary.flag_metadata == {
            "stage": "channel:canary",
            "version": staged.version,
            "commit": "3f2a9c1",
            "author": "alice@example.com",
        }
        assert (on_other.value, on_other.reason, on_other.variant, on_other.error_code) == (
            False,
            Reason.STATIC,
            stable.version,
            None,
        )
        assert on_other.flag_metadata["stage"] == "stable"

        # The next stage takes every host by percentile: the other host is in the split now.
        publish(live_api.store, PATH, index=1, name="100%", percentile=100)
        eventually_sync(
            lambda: api.get_client("other").get_boolean_value(FLOW, False),
            what="the other host to get the staged value",
        )
        split = api.get_client("other").get_boolean_details(FLOW, False)
        assert (split.reason, split.variant, split.flag_metadata["stage"]) == (
            Reason.SPLIT,
            staged.version,
            "100%",
        )
        # The canary stays on the first stage it matches.
        assert api.get_client("canary").get_boolean_details(FLOW, False).flag_metadata == (
            on_canary.flag_metadata
        )
        [changed] = eventually_sync(lambda: events.of(CHANGED), what="CONFIGURATION_CHANGED")
        assert changed.flags_changed == [PATH, FLOW]
    assert events.kinds()[:2] == [READY, READY]


def test_the_reason_is_the_kind_the_api_says_whatever_the_stage_is_named(
    live_api: LiveApi,
) -> None:
    stable_served(live_api, STABLE)
    staged = start_rollout(live_api.store, PATH, STAGED)
    publish(live_api.store, PATH, index=0, name="early-birds", channel="canary")
    # A percentile beside a channel under a name of its own: the name says nothing, and the
    # host has a channel, yet its bucket decided.
    publish(live_api.store, PATH, index=1, name="wave-1", channel="beta", percentile=100)
    live_api.wait_served(PATH, staged.version, channel="canary")
    live_api.wait_served(PATH, staged.version, channel="beta", client="h2")

    canary = TempoconfProvider(live_api.url, [PATH], client_id="h1", channel="canary", **FAST)
    beta = TempoconfProvider(live_api.url, [PATH], client_id="h2", channel="beta", **FAST)
    with openfeature_events():
        api.set_provider_and_wait(canary, "canary")
        api.set_provider_and_wait(beta, "beta")
        on_canary = api.get_client("canary").get_boolean_details(FLOW, False)
        on_beta = api.get_client("beta").get_boolean_details(FLOW, False)
    assert (on_canary.value, on_canary.reason, on_canary.flag_metadata["stage"]) == (
        True,
        Reason.TARGETING_MATCH,
        "early-birds",
    )
    assert (on_beta.value, on_beta.reason, on_beta.flag_metadata["stage"]) == (
        True,
        Reason.SPLIT,
        "wave-1",
    )


def test_a_cached_value_without_the_stage_kind_gets_its_reason_from_the_stage_name(
    live_api: LiveApi, cache_dir: Path
) -> None:
    stable_served(live_api, STABLE)
    staged = start_rollout(live_api.store, PATH, STAGED)
    name = "channel:canary 100%"  # a default name: the percentile in it says split
    publish(live_api.store, PATH, index=0, name=name, channel="canary", percentile=100)
    live_api.wait_served(PATH, staged.version, channel="canary", client="h1")
    earlier = ConfigClient(
        live_api.url, PATH, client_id="h1", channel="canary", cache_dir=cache_dir
    )
    try:
        assert earlier.get().stage_kind == "split"
    finally:
        earlier.close()
    # The file as a client older than `stage_kind` left it: same ETag, so a 304 confirms it.
    [file] = sorted(cache_dir.iterdir())
    document = json.loads(file.read_text())
    del document["config"]["stage_kind"]
    file.write_text(json.dumps(document))

    confirmed = ConfigClient(
        live_api.url, PATH, client_id="h1", channel="canary", cache_dir=cache_dir
    )
    try:
        served = confirmed.get()
        assert (served.source, served.version, served.stage_kind) == ("api", staged.version, None)
    finally:
        confirmed.close()
    provider = TempoconfProvider(
        live_api.url, [PATH], client_id="h1", channel="canary", cache_dir=cache_dir, **FAST
    )
    with openfeature_events():
        api.set_provider_and_wait(provider)
        details = api.get_client().get_boolean_details(FLOW, False)
    assert (details.value, details.reason, details.flag_metadata["stage"]) == (
        True,
        Reason.SPLIT,
        name,
    )


def test_a_promotion_emits_configuration_changed_with_the_changed_keys(live_api: LiveApi) -> None:
    stable_served(live_api, STABLE)
    provider = TempoconfProvider(live_api.url, [PATH], client_id="h2", **FAST)
    with openfeature_events() as events:
        api.set_provider_and_wait(provider)
        flags = api.get_client()
        assert flags.get_boolean_value(FLOW, True) is False
        assert flags.get_integer_value(MAX, 0) == 1000
        assert flags.get_string_value(NAME, "") == "blue"  # the same in the new version
        nothing = flags.get_string_details(f"{PATH}#/nothing", "x")  # in neither version
        assert nothing.error_code == ErrorCode.FLAG_NOT_FOUND

        # Canaries first (this host is none), then the promotion brings it the new version.
        staged = start_rollout(live_api.store, PATH, STAGED)
        publish(live_api.store, PATH, index=0, name="channel:canary", channel="canary")
        live_api.wait_served(PATH, staged.version, channel="canary")
        promote(live_api.store, staged.version)
        [changed] = eventually_sync(lambda: events.of(CHANGED), what="CONFIGURATION_CHANGED")
        assert changed.flags_changed == [PATH, FLOW, MAX]
        assert changed.metadata["version"] == staged.version

        now = flags.get_integer_details(MAX, 0)
        assert (now.value, now.reason, now.variant) == (2000, Reason.STATIC, staged.version)
    assert events.kinds() == [READY, CHANGED]


def test_stale_while_the_api_is_down_and_ready_when_it_is_back(
    live_api: LiveApi, cache_dir: Path
) -> None:
    stable = stable_served(live_api, STABLE)
    provider = TempoconfProvider(live_api.url, [PATH], client_id="h1", cache_dir=cache_dir, **FAST)
    with openfeature_events() as events:
        api.set_provider_and_wait(provider)
        flags = api.get_client()
        assert flags.get_provider_status() == ProviderStatus.READY
        assert flags.get_integer_details(MAX, 0).reason == Reason.STATIC

        live_api.stop()
        eventually_sync(
            lambda: flags.get_provider_status() == ProviderStatus.STALE, what="status STALE"
        )
        cached = flags.get_integer_details(MAX, 0)
        assert (cached.value, cached.reason, cached.variant) == (
            1000,
            Reason.CACHED,
            stable.version,
        )
        [stale] = eventually_sync(lambda: events.of(STALE), what="the STALE event")
        assert stale.message is not None and "disk cache" in stale.message

        live_api.start()
        eventually_sync(
            lambda: flags.get_provider_status() == ProviderStatus.READY,
            what="status READY once the API is back",
            timeout=20,
        )
        assert flags.get_integer_details(MAX, 0).reason == Reason.STATIC
        eventually_sync(lambda: events.kinds() == [READY, STALE, READY], what="READY again")


def test_a_start_from_the_disk_cache_is_stale(live_api: LiveApi, cache_dir: Path) -> None:
    stable = stable_served(live_api, STABLE)
    earlier = ConfigClient(live_api.url, PATH, client_id="h1", cache_dir=cache_dir)
    try:
        earlier.get()  # the last good value on disk, as a previous run of this host left it
    finally:
        earlier.close()
    live_api.stop()

    provider = TempoconfProvider(live_api.url, [PATH], client_id="h1", cache_dir=cache_dir, **FAST)
    with openfeature_events() as events:
        api.set_provider_and_wait(provider)
        flags = api.get_client()
        # The SDK says READY when initialize returns; the provider says STALE right after it.
        eventually_sync(lambda: events.kinds() == [READY, STALE], what="READY, then STALE")
        assert flags.get_provider_status() == ProviderStatus.STALE
        cached = flags.get_boolean_details(FLOW, True)
        assert (cached.value, cached.reason, cached.variant) == (
            False,
            Reason.CACHED,
            stable.version,
        )

        live_api.start()
        eventually_sync(
            lambda: flags.get_provider_status() == ProviderStatus.READY,
            what="status READY once the API answers",
            timeout=20,
        )
        assert flags.get_boolean_details(FLOW, True).reason == Reason.STATIC


def test_no_value_and_no_cache_is_an_error_until_the_api_answers(live_api: LiveApi) -> None:
    stable_served(live_api, STABLE)
    live_api.stop()
    provider = TempoconfProvider(live_api.url, [PATH], client_id="h1", **FAST)
    with openfeature_events() as events:
        with pytest.raises(ProviderNotReadyError):
            api.set_provider_and_wait(provider)
        flags = api.get_client()
        assert flags.get_provider_status() == ProviderStatus.ERROR
        [error] = eventually_sync(lambda: events.of(ERROR), what="the ERROR event")
        assert error.message is not None
        assert f"default/{PATH}" in error.message and "cannot reach the API" in error.message
        not_ready = flags.get_integer_details(MAX, 7)
        assert (not_ready.value, not_ready.error_code) == (7, ErrorCode.PROVIDER_NOT_READY)

        live_api.start()  # the watcher kept trying: READY once it has a value
        eventually_sync(
            lambda: flags.get_provider_status() == ProviderStatus.READY,
            what="status READY once the API answers",
            timeout=20,
        )
        assert flags.get_integer_value(MAX, 7) == 1000
        eventually_sync(lambda: events.kinds() == [ERROR, READY], what="ERROR, then READY")


def test_unknown_configs_and_pointers_are_flag_not_found(live_api: LiveApi) -> None:
    stable_served(live_api, STABLE)
    provider = TempoconfProvider(live_api.url, [PATH, "myproject/nowhere"], client_id="h1", **FAST)
    with openfeature_events():
        with pytest.raises(ProviderNotReadyError):  # a declared config with no value: ERROR
            api.set_provider_and_wait(provider)
        flags = api.get_client()
        cases = {
            "myproject/nowhere": "the API knows no config default/myproject/nowhere",
            "myproject/undeclared": "not one this provider watches",
            f"{PATH}#/checkout/old_flow": "names nothing",
            f"{PATH}#/regions/2": "names nothing",
            f"{PATH}#/regions/-": "names nothing",
            f"{PATH}#/name/0": "names nothing",
        }
        for key, message in cases.items():
            details = flags.get_object_details(key, {"default": True})
            assert (details.value, details.error_code) == (
                {"default": True},
                ErrorCode.FLAG_NOT_FOUND,
            ), key
            assert details.error_message is not None and message in details.error_message, key
        assert flags.get_boolean_value(FLOW, True) is False  # the known config still resolves


def test_types_pointers_and_the_targeting_key(live_api: LiveApi) -> None:
    stable = stable_served(live_api, STABLE)
    provider = TempoconfProvider(live_api.url, [PATH], client_id="h1", **FAST)
    with openfeature_events():
        api.set_provider_and_wait(provider)
        assert (provider.paths, provider.client_id) == ((PATH,), "h1")
        in_use = provider.config(PATH)
        assert in_use is not None and (in_use.version, in_use.source) == (stable.version, "api")
        assert provider.config("myproject/undeclared") is None
        flags = api.get_client()
        whole = flags.get_object_details(PATH, {})
        assert (whole.value, whole.variant) == (STABLE, stable.version)
        assert flags.get_object_value(f"{PATH}#", {}) == STABLE  # the empty pointer: all of it
        assert flags.get_object_value(f"{PATH}#/regions", []) == ["eu", "us"]
        assert flags.get_string_value(f"{PATH}#/regions/1", "") == "us"
        assert flags.get_integer_value(f"{PATH}#/a~1b", 0) == 1
        assert flags.get_integer_value(f"{PATH}#/m~0n", 0) == 2
        assert flags.get_float_value(f"{PATH}#/ratio", 0.0) == 0.5
        as_float = flags.get_float_value(MAX, 0.0)  # an integer is a float's value too
        assert (as_float, type(as_float)) == (1000.0, float)

        mismatches = [
            (flags.get_integer_details, FLOW, 0),  # true is no integer
            (flags.get_float_details, FLOW, 0.0),
            (flags.get_boolean_details, MAX, True),  # 1000 is no boolean
            (flags.get_integer_details, f"{PATH}#/ratio", 0),
            (flags.get_string_details, MAX, ""),
            (flags.get_object_details, NAME, {}),
            (flags.get_string_details, PATH, ""),
        ]
        for getter, key, default in mismatches:
            details = getter(key, default)
            assert (details.value, details.error_code) == (default, ErrorCode.TYPE_MISMATCH), key

        for key in (f"{PATH}#checkout.new_flow", f"{PATH}#/a~2", "#/max_connections"):
            details = flags.get_integer_details(key, 3)
            assert (details.value, details.error_code) == (3, ErrorCode.PARSE_ERROR), key
        dotted = flags.get_boolean_details(f"{PATH}#checkout.new_flow", True)
        assert (
            dotted.error_message is not None
            and f"{PATH}#/checkout/new_flow" in dotted.error_message
        )

        mine = flags.get_boolean_details(FLOW, True, EvaluationContext(targeting_key="h1"))
        assert (mine.value, mine.error_code) == (False, None)
        other = flags.get_boolean_details(FLOW, True, EvaluationContext(targeting_key="user-42"))
        assert (other.value, other.error_code) == (True, ErrorCode.INVALID_CONTEXT)
        assert other.error_message is not None and "'h1'" in other.error_message


def test_the_client_imports_without_openfeature() -> None:
    blocked = (
        "import sys\n"
        "sys.modules['openfeature'] = None  # as if the extra were not installed\n"
        "import tempoconf.client\n"
        "try:\n"
        "    import tempoconf.client.openfeature\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", blocked], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "pip install 'tempoconf[openfeature]'" in result.stdout


def test_constructor_refuses_what_is_not_a_list_of_paths() -> None:
    with pytest.raises(TypeError, match="list of config paths"):
        TempoconfProvider("http://127.0.0.1:9", PATH)
    with pytest.raises(ValueError, match="names no config"):
        TempoconfProvider("http://127.0.0.1:9", [])
    with pytest.raises(ValueError, match="is a flag key"):
        TempoconfProvider("http://127.0.0.1:9", [FLOW])


# -- the pure parts: flag keys and stage kinds ------------------------------------------------
@pytest.mark.parametrize(
    ("text", "path", "tokens"),
    [
        ("a/b", "a/b", ()),
        ("a/b#", "a/b", ()),
        ("a/b#/", "a/b", ("",)),
        ("a/b#/x/0", "a/b", ("x", "0")),
        ("a/b#/x~1y/~0z", "a/b", ("x/y", "~z")),
        ("a/b#/~01", "a/b", ("~1",)),  # RFC 6901: ~01 is "~1", not "/"
        ("a/b#/c#d", "a/b", ("c#d",)),
    ],
)
def test_flag_keys_parse(text: str, path: str, tokens: tuple[str, ...]) -> None:
    key = parse_flag_key(text)
    assert (key.text, key.path, key.tokens) == (text, path, tokens)


@pytest.mark.parametrize("text", ["", "#/x", "a/b#x", "a/b#x.y", "a/b#/x~", "a/b#/x~2"])
def test_bad_flag_keys_say_what_is_wrong(text: str) -> None:
    with pytest.raises(FlagKeyError, match="flag key"):
        parse_flag_key(text)


def test_lookup_follows_rfc_6901() -> None:
    value = {"a": [10, {"b": None}], "": 5, "01": "s"}
    assert lookup(value, ("a", "1", "b")) is None  # null is a value, not "missing"
    assert lookup(value, ("",)) == 5
    assert lookup(value, ("01",)) == "s"  # a member name, not an index
    assert lookup(value, ("a", "01")) is MISSING  # leading zero: no index
    assert lookup(value, ("a", "2")) is MISSING
    assert lookup(value, ("a", "0", "x")) is MISSING


@pytest.mark.parametrize(
    ("stage", "channel", "labels", "kind"),
    [
        ("stable", "canary", {}, "stable"),
        ("channel:canary", "canary", {}, "targeting"),
        ("labels:region=eu", None, {"region": "eu"}, "targeting"),
        ("10%", None, {}, "split"),
        ("0.5%", "canary", {}, "split"),
        ("channel:canary 50%", "canary", {}, "split"),
        ("early adopters", None, {}, "split"),  # a name of its own: only a percentile matches
        ("early adopters", "beta", {}, "targeting"),
    ],
)
def test_stage_kind(stage: str, channel: str | None, labels: dict[str, str], kind: str) -> None:
    assert stage_kind(stage, channel=channel, labels=labels) == kind
