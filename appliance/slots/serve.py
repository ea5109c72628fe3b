"""Serve every slot of a host plan: one supervisor per slot, one control API, one event loop.

Each slot's engine has its own supervisor, log, restarts and locks, so a crash, drain or
restart of one never touches another. SIGTERM/SIGINT stop (drain) every slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import uvicorn

from appliance.control.api import create_slots_app
from appliance.control.tls import uvicorn_tls
from appliance.host.discovery import HostFacts, device_lock_name
from appliance.observe.board_sources import board_monitor
from appliance.runtime.engine_log import EngineLog
from appliance.runtime.lifecycle import EngineEvent, EngineState
from appliance.runtime.media_gate import open_media_gate
from appliance.runtime.notify import lifecycle_notifier
from appliance.runtime.supervisor import EngineSupervisor
from appliance.serve import EmbeddedServer, hold_locks
from appliance.slots.plan import HostPlan

__all__ = ["ReadyHook", "hold_slot_locks", "run_slots"]

ReadyHook = Callable[[str, str, bool], None]
"""Called when a slot becomes ready: (slot, its engine URL, whether every slot is ready now)."""
_EXIT_FOR_SIGNAL = {signal.SIGINT: 130, signal.SIGTERM: 143}


@contextlib.contextmanager
def hold_slot_locks(plan: HostPlan, host: HostFacts) -> Iterator[None]:
    """Lock the control port once, every slot's engine port, and each tt slot's own devices."""
    names = [f"port-{plan.control.port}"]
    for slot in plan.slots:
        names.append(f"port-{slot.plan.port}")
        if slot.devices:
            boards = tuple(b for b in host.boards if b.index in slot.devices)
            names.append(device_lock_name(boards) if boards else f"tenstorrent-{'-'.join(map(str, slot.devices))}")
    with hold_locks(names, Path(plan.state_dir), f"slots {plan.name}"):
        yield


async def run_slots(plan: HostPlan, token: str, control: socket.socket, *, on_ready: ReadyHook) -> int:
    """Supervise every slot and serve the control API until stopped; return the exit code."""
    gates = [gate for s in plan.slots if (gate := await open_media_gate(s.plan)) is not None]
    logs = {s.name: EngineLog(Path(s.plan.log_dir)) for s in plan.slots}
    sups = {s.name: EngineSupervisor(s.plan, logs[s.name], name=f"slot {s.name}") for s in plan.slots}
    _watch_readiness(sups, on_ready)
    monitors = {
        s.name: board_monitor(
            s.plan.boards, s.devices, slot=s.name, every_chip=False, on_fault=sups[s.name].board_fault
        )
        for s in plan.slots
        if s.devices and s.plan.engine == "tt"
    }  # each slot watches its own devices: a fault on one slot's board stops only that slot's engine
    app = create_slots_app(plan.name, sups, token, boards={name: m.view for name, m in monitors.items()})
    config = uvicorn.Config(
        app,
        host=plan.control.host,
        port=plan.control.port,
        log_level="warning",
        lifespan="off",
        **uvicorn_tls(plan.control.tls),
    )
    server = EmbeddedServer(config)
    received: list[signal.Signals] = []
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        received.append(sig)
        for sup in sups.values():
            sup.request("stop")

    for sig in _EXIT_FOR_SIGNAL:
        loop.add_signal_handler(sig, on_signal, sig)
    api = asyncio.create_task(server.serve(sockets=[control]))
    watching = [asyncio.create_task(m.run()) for m in monitors.values()]
    try:
        await asyncio.gather(*(sup.run() for sup in sups.values()))
    finally:
        for task in watching:
            task.cancel()
        for sig in _EXIT_FOR_SIGNAL:
            loop.remove_signal_handler(sig)
        server.should_exit = True
        await api
        for engine_log in logs.values():
            engine_log.close()
        for gate in gates:
            await gate.close()
    return _EXIT_FOR_SIGNAL[received[0]] if received else 0


def _watch_readiness(sups: dict[str, EngineSupervisor], on_ready: ReadyHook) -> None:
    """Report each slot's readiness; tell systemd READY only once every slot is ready."""
    notifier = lifecycle_notifier(os.environ)

    def listener(name: str) -> Callable[[EngineEvent], None]:
        def heard(event: EngineEvent) -> None:
            every = all(s.snapshot().state is EngineState.READY for s in sups.values())
            if event.state is EngineState.READY:
                on_ready(name, sups[name].plan.base_url, every)
            if notifier is not None and (event.state is not EngineState.READY or every):
                notifier.on_event(event)

        return heard

    for name, sup in sups.items():
        sup.subscribe(listener(name))
