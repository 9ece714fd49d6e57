"""Read a tree: a protoconf repository when DIR has a `materialized_config/` folder, else
tempoconf's own layout."""

from __future__ import annotations

from pathlib import Path

from tempoconf.tree.layout import Tree, TreeError, read_layout_tree
from tempoconf.tree.protoconf import MATERIALIZED_FOLDER, read_protoconf_tree

__all__ = ["read_tree"]


def read_tree(root: Path) -> Tree:
    """Every config of the tree at `root`, and every problem found reading it. Raises TreeError
    when `root` is no folder."""
    if not root.is_dir():
        raise TreeError(f"{root} is not a folder" if root.exists() else f"{root} does not exist")
    if (root / MATERIALIZED_FOLDER).is_dir():
        return read_protoconf_tree(root)
    return read_layout_tree(root)
