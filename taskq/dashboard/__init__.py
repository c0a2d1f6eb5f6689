"""`taskq dashboard`: a web UI over what the NATS server holds (queues, tasks, workers,
dead letters, schedules, workflows), with the operator's actions.

It keeps no state of its own (every page is read from the server when asked for, and the
sparklines' history lives in the browser), so any number of dashboards can run. It is the
top layer, beside `taskq.cli`: nothing below imports it. Needs the `taskq[dashboard]` extra
(Starlette, uvicorn, Jinja2); its templates and static assets ship inside the package.
"""
