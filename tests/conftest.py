"""Root fixtures: each family lives in tests/fixtures/ (database: store URLs; temporal: servers)."""

pytest_plugins = ["tests.fixtures.database", "tests.fixtures.temporal"]
