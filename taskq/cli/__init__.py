"""The `taskq` command line: one module per command group, registered in `taskq.cli.main`."""
