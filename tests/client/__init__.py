"""Client SDK tests, against a live API."""
