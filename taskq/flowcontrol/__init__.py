"""Flow control: unique, debounce and throttle at enqueue; concurrency and rate limits in
the worker; priorities in the fetch. Every mechanism is the server's (see
docs/flow-control.md): TTL records, counters, message schedules, consumer limits.

`options` holds what a task declares (validated at declaration), `store` the streams the
state lives in, `gates` the enqueue-side options, `slots`, `rates` and `held` the pieces of
the worker-side limits, `usage` what `taskq limits` shows. Concurrency lanes and priority
levels are consumers (taskq.topology.specs), run by the worker (taskq.workers.setup,
taskq.workers.levels); the worker's checks are taskq.workers.admission.
"""
