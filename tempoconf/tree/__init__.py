"""Configs as code: a tree of config files (tempoconf's layout, or a protoconf repository) read
with every problem it has, the rollout requests it makes, and what applying it would do against
what is served (`tempoconf diff`, `tempoconf apply`; docs/how-to/configs-as-code.md)."""
