"""`python -m taskq` is the `taskq` command."""

from taskq.cli.main import main

main()
