"""The boards in GET /state: each owned board's verdict, readings and trends, and the source they came from.

Mirrors `appliance.observe.board_health.BoardsView` field by field without importing it, so the console may
import this module (as `appliance.control.documents` does for the rest of /state).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ConfigDict

__all__ = ["BOARD_STATES", "BoardHealthDocument", "BoardsDocument"]

_WIRE = ConfigDict(extra="ignore", populate_by_name=True, ser_json_inf_nan="strings")
BOARD_STATES = ("ok", "hot", "stalled", "tripped", "gone", "unknown")
"""A board's states, best first; the fleet's worst board is the one latest in this order."""


@dataclass(frozen=True, slots=True)
class BoardHealthDocument:
    """One board: its verdict and why, the latest reading (None where unknown) and its trends, oldest first."""

    __pydantic_config__ = _WIRE

    board: str
    slot: str
    state: str
    reason: str
    present: bool
    card_type: str | None = None
    firmware: str | None = None
    temperature_c: float | None = None
    trip_c: float | None = None
    power_w: float | None = None
    current_a: float | None = None
    voltage_v: float | None = None
    aiclk_mhz: float | None = None
    heartbeat_age_s: float | None = None
    """Seconds since the ARC heartbeat last advanced; None before it was read."""
    therm_trips: int | None = None
    trips_since_start: int = 0
    dram_trained: bool | None = None
    problems: tuple[str, ...] = ()
    """Attributes the source could not read, each naming its file or field: shown as unknown."""
    temperatures: tuple[float | None, ...] = ()
    powers: tuple[float | None, ...] = ()
    aiclks: tuple[float | None, ...] = ()

    @property
    def rank(self) -> int:
        return BOARD_STATES.index(self.state) if self.state in BOARD_STATES else 0

    @property
    def name(self) -> str:
        return f"board {self.board}" if self.board.isdigit() else f"chip {self.board}"

    def readings(self) -> str:
        """Temperature (and trip point), power, AI clock, heartbeat age and firmware; unknown where unread."""
        trip = f" (trip {self.trip_c:g})" if self.trip_c is not None else ""
        age = "unknown" if self.heartbeat_age_s is None else f"{self.heartbeat_age_s:.1f}s ago"
        return (
            f"{_value(self.temperature_c, 'C', '.1f')}{trip}  {_value(self.power_w, 'W', '.1f')}  aiclk "
            f"{_value(self.aiclk_mhz, 'MHz', '.0f')}  heartbeat {age}  fw {self.firmware or 'unknown'}"
        )

    def trends(self) -> str:
        """The temperature and power from the oldest sample kept to the latest."""
        said = []
        for label, values, unit in (("temp", self.temperatures, "C"), ("power", self.powers, "W")):
            known = [v for v in values if v is not None]
            if known:
                said.append(f"{label} {known[0]:.1f}→{known[-1]:.1f} {unit}")
        return f"{', '.join(said)} over {len(self.temperatures)} samples" if said else "no trend yet"


@dataclass(frozen=True, slots=True)
class BoardsDocument:
    """The boards the engine owns, and which source said so ("sysfs", "tt-telemetry <url>")."""

    __pydantic_config__ = _WIRE

    source: str
    slot: str
    interval_s: float
    boards: tuple[BoardHealthDocument, ...] = ()
    error: str | None = None
    """Why the last sample failed; the boards keep their previous readings."""
    samples: int = 0

    def worst(self) -> BoardHealthDocument | None:
        """The board in the worst state (the hottest among equals), None without boards."""
        return max(self.boards, key=lambda b: (b.rank, b.temperature_c or 0.0), default=None)

    def heading(self) -> str:
        """Where the boards were read, how often, and the last sample's error."""
        error = f"; last sample failed: {self.error}" if self.error else ""
        return f"boards from {self.source}, every {self.interval_s:g}s{error}"


def _value(value: float | None, unit: str, spec: str) -> str:
    return "unknown" if value is None else f"{value:{spec}} {unit}"
