"""`python -m taskq` is the `taskq` command."""

from taskq.cli.main import main

if __name__ == "__main__":  # not when a pool process re-imports the main module
    main()
