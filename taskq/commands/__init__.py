"""Command groups of the `taskq` CLI, one module per feature."""
