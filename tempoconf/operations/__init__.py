"""The application layer: each operation an operator performs, once, for the CLI and the admin API."""
