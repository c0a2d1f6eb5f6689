"""The taskq dead-letter subsystem."""

from dlq.record import REASONS, DeadLetter, ErrorInfo

__all__ = ["REASONS", "DeadLetter", "ErrorInfo"]
