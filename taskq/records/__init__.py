"""What taskq stores on the server, one module per kind of record: the task message
(`envelope`), result records, progress reports, worker heartbeats, cancel requests, delayed
and periodic schedules and their firings, and how a stored body is sealed and bound to its
place; `clock` is how every record writes and reads a time."""
