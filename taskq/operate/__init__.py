"""The operator's features, read from and done to what the server holds (for `taskq`, the
dashboard and `App`): queue statistics and control, finding an unfinished task, a task's
story, the recent-task list, and how a recorded traceback is told."""
