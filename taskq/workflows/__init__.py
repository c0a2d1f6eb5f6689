"""Workflows: tasks composed into larger work. `canvas` is Celery's canvas (`chain`, `group`,
`chord`; `from taskq import chain, group, chord`), with `state` (what a step's message
carries) and `story` (a workflow's steps and their states); durable workflows will live here
too."""
