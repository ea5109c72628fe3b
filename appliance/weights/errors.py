"""The weights' errors, beneath the appliance's family.

LaunchError (exit 3: the host cannot serve this config)
└── WeightsError     a lock, a source, a fetch or a store entry cannot be trusted or used
    ├── TransientError   a fault worth retrying: a reset, a timeout or stall, a 5xx
    └── DiskFull         the store's filesystem ran out of space while a fetch wrote to it
"""

from __future__ import annotations

from appliance.errors import LaunchError

__all__ = ["DiskFull", "TransientError", "WeightsError"]


class WeightsError(LaunchError):
    """One line: what was asked, what is wrong and what mends it."""


class TransientError(WeightsError):
    """A network fault the fetch retries with backoff; reported as a WeightsError once the attempts are spent."""


class DiskFull(WeightsError):
    """The disk filled while writing; the fetch removes its staging folder to give the space back."""
