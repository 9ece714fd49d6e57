"""The docs site's generated reference pages (mkdocs.yml `hooks:`): written at build time from the
code that defines what they document, never committed. Not part of the installed package."""
