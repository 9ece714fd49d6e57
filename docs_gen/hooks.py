"""The mkdocs hook (mkdocs.yml `hooks:`) that adds the generated pages to the site:
reference/request.md, reference/cli.md and reference/http-api.md, written from the code they
document, and getting-started.md, taken from README.md, each time the site is built, and never
committed, so they cannot drift from what they show. A
generator that fails fails the build (`make docs`, CI)."""

from __future__ import annotations

import sys
from pathlib import Path

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

# mkdocs loads this file by its path, with only its own folder importable: the generators are
# imported as the docs_gen package, from the repository root.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from docs_gen.pages import generated_pages  # noqa: E402

__all__ = ["on_files"]


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Adds each generated page, as if it were a file of the docs folder."""
    for src_uri, markdown in generated_pages(Path(config.docs_dir)).items():
        if files.get_file_from_path(src_uri) is not None:
            raise RuntimeError(f"docs/{src_uri} is generated at build time: remove the file")
        files.append(File.generated(config, src_uri, content=markdown))
    return files
