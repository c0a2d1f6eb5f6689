"""The process pool executor: `executor="process"` tasks in child processes (`processes`,
the worker's side; `child`, inside each pool process)."""
