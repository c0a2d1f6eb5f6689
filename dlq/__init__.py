"""The taskq dead-letter subsystem."""

from taskq.dlq.record import (
    REASONS,
    BlobOriginal,
    DeadLetter,
    EnvelopeOriginal,
    ErrorInfo,
    Original,
    RawOriginal,
)

__all__ = [
    "REASONS",
    "BlobOriginal",
    "DeadLetter",
    "EnvelopeOriginal",
    "ErrorInfo",
    "Original",
    "RawOriginal",
]
