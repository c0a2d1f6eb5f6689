"""`python -m taskq` is the `taskq` command."""

from taskq.cli import main

main()
