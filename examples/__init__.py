"""Example schema, values and rollout requests (installed as `tempoconf.examples`, read with
importlib.resources by the demo and the dev banner)."""
