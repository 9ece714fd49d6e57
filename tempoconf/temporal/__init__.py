"""Temporal plumbing: names, connections, the data converter, the CLI's binaries."""
