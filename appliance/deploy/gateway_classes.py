"""Per model and priority class, what the gateway admitted, shed, refused and failed, and which requests their
clients abandoned in the queue: counted from HAProxy's log.

HAProxy 2.6's exporter publishes per proxy, not per stick-table entry, so a request's class is known only to its
log. The OpenAI frontend logs each request as one JSON object (configuration manual 8.2.4, custom log format) to a
datagram UNIX socket that `appliance gateway` binds in its run folder before HAProxy starts: HAProxy sends each line
without waiting, so a reader that falls behind loses lines (HAProxy counts them as DroppedLogs) and never stalls a
request. The process counts the lines with prometheus_client and serves the counters over HTTP on a second UNIX
socket beside it, which HAProxy's metrics listener forwards as `/metrics/classes`: one address serves both pages.
"""

from __future__ import annotations

import json
import logging
import socket
import socketserver
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import MetricsHandler

from appliance.deploy.gateway_admission import MODEL_BACKEND
from appliance.errors import LaunchError

__all__ = [
    "CLASSES_PATH",
    "LOG_FORMAT",
    "OUTCOMES",
    "ClassCounts",
    "classes_backend",
    "counting_classes",
    "outcome",
    "request_log",
]

log = logging.getLogger(__name__)

CLASSES_PATH = "/metrics/classes"
"""Where the metrics listener serves the per-class counters (`render prometheus --gateway` scrapes it)."""
OUTCOMES = ("admitted", "shed", "refused", "error", "abandoned")
_LOG_SOCKET, _PAGE_SOCKET = "requests.sock", "classes.sock"
_UNSEEN = "-"
"""The model or class label of a request naming none the site serves or lists: client text never becomes a label."""
# Client-sent text is cut (bytes) before it is escaped (json), so a line stays whole within the log's length.
_TEXT = "%[var(txn.{}),bytes(0,256),json(utf8s)]"
LOG_FORMAT = (
    f'{{"model":"{_TEXT.format("model")}","class":"{_TEXT.format("class")}","status":%ST,"queue_ms":%Tw,'
    '"backend":"%b","server":"%s","termination":"%tsc"}'
)
"""One request's log line: HAProxy writes `-` for a variable never set and -1 for a queue never reached."""


def request_log(folder: Path) -> list[str]:
    """The frontend's log lines: each request, at level info, to the socket `counting_classes` binds."""
    return [f"    log {folder / _LOG_SOCKET} len 2048 format raw local0 info", f"    log-format '{LOG_FORMAT}'"]


def classes_backend(folder: Path) -> list[str]:
    """The backend the metrics listener forwards `/metrics/classes` to: this process's counters."""
    return ["", "backend classes", f"    server counts unix@{folder / _PAGE_SOCKET}"]


def outcome(status: int, backend: str, server: str, termination: str) -> str | None:
    """What became of a request, from its log fields; None for one the gateway answered itself with no error."""
    if termination.startswith("sQ"):  # waited the whole bound: the errorfile sends the 429
        return "shed"
    if termination.startswith("CQ"):  # its client closed while it queued (manual 8.5): no engine was asked
        return "abandoned"
    if status >= 500:
        return "error"
    if server != "<NOSRV>":
        return "admitted"
    if status == 429 and backend.startswith(MODEL_BACKEND):  # a sheddable class denied in its model's backend
        return "shed"
    return "refused" if status >= 400 else None


class ClassCounts:
    """The counters, fed one log line at a time, each labelled by a served model and a listed class (else `-`)."""

    def __init__(self, models: Collection[str], classes: Collection[str]) -> None:
        self.registry = CollectorRegistry()
        self._models, self._classes = frozenset(models), frozenset(classes)
        labels = ("model", "class", "outcome")
        self._requests = Counter(
            "appliance_gateway_requests",
            "Requests by model, priority class and outcome",
            labels,
            registry=self.registry,
        )
        self._queue = Histogram(
            "appliance_gateway_queue_seconds",
            "Time a request waited for an engine slot, by model and priority class",
            labels[:2],
            registry=self.registry,
        )
        for model in self._models:  # every rate exists from the start, at zero
            for name in self._classes:
                self._queue.labels(model, name)
                for result in OUTCOMES:
                    self._requests.labels(model, name, result)

    def count(self, line: bytes) -> None:
        """One log line counted; a line that is not one (truncated, foreign) is logged and skipped."""
        try:
            entry = json.loads(line)
            fields = (int(entry["status"]), str(entry["backend"]), str(entry["server"]), str(entry["termination"]))
            queue_ms = int(entry["queue_ms"])
        except (ValueError, KeyError, TypeError):
            log.warning("gateway: skipped a request log line that is not the gateway's: %.200r", line)
            return
        model = entry["model"] if entry["model"] in self._models else _UNSEEN
        name = entry["class"] if entry["class"] in self._classes else _UNSEEN
        result = outcome(*fields)
        if result is not None:
            self._requests.labels(model, name, result).inc()
        if queue_ms >= 0 and model != _UNSEEN:
            self._queue.labels(model, name).observe(queue_ms / 1000)


class _PageServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


@contextmanager
def counting_classes(folder: Path, counts: ClassCounts) -> Iterator[None]:
    """The log socket read into `counts` and their page served, both in `folder`, each on a thread of its own;
    LaunchError when a socket cannot be bound there."""
    logs = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        for name in (_LOG_SOCKET, _PAGE_SOCKET):  # left by a gateway that stopped without cleaning up
            (folder / name).unlink(missing_ok=True)
        logs.bind(str(folder / _LOG_SOCKET))
        page = _PageServer(str(folder / _PAGE_SOCKET), MetricsHandler.factory(counts.registry))
    except OSError as error:
        logs.close()
        raise LaunchError(f"gateway: cannot bind its sockets in {folder} ({error}); pass a shorter --out") from error
    threading.Thread(target=_read, args=(logs, counts), daemon=True, name="gateway-log").start()
    threading.Thread(target=page.serve_forever, daemon=True, name="gateway-classes").start()
    try:
        yield
    finally:
        page.shutdown()
        page.server_close()
        logs.shutdown(socket.SHUT_RDWR)
        logs.close()
        for name in (_LOG_SOCKET, _PAGE_SOCKET):
            (folder / name).unlink(missing_ok=True)


def _read(logs: socket.socket, counts: ClassCounts) -> None:
    while line := logs.recv(65536):  # an empty read: the socket was shut down
        counts.count(line)
