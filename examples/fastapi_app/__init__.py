"""taskq in a FastAPI service: see main.py and docs/integrations.md."""
