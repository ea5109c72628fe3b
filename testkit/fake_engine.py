"""A small real child process that behaves like the engine in ways vLLM cannot on demand.

Used only for fault cases: hanging while alive, ignoring SIGTERM, crashing at a chosen moment.
It serves /health, /v1/models and /v1/completions over real HTTP and prints vLLM-style boot lines. Behind the
gateway it stands for a model: its answers name `--served-name`, and `--delay` makes each completion take that long
(so a few concurrent requests saturate it); a streamed one sends its first (and only) token chunk after the delay.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="ok", choices=["ok", "boot-crash", "crash-after", "hang-after", "no-ready"])
    parser.add_argument("--after", type=float, default=1.0, help="seconds after ready for crash/hang modes")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--sigterm-log", help="a recorded engine log to print on SIGTERM, then keep running")
    parser.add_argument("--child", action="store_true", help="fork a worker into the same process group")
    parser.add_argument("--metrics", help="a recorded engine /metrics page to answer GET /metrics with")
    parser.add_argument("--served-name", default="fake", help="the model name its answers carry")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each completion takes")
    args = parser.parse_args()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.sigterm_log:
        lines = Path(args.sigterm_log).read_text().splitlines()
        recorded = [line for line in lines if not line.startswith("#")]
        signal.signal(signal.SIGTERM, lambda *_: print(*recorded, sep="\n", flush=True))
    if args.child:
        worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        print(f"worker pid {worker.pid}", flush=True)
    print("INFO Starting to load model fake...", flush=True)
    if args.mode == "boot-crash":
        print("ERROR RuntimeError: fake engine cannot load the model", flush=True)
        sys.exit(3)
    print("INFO Model loading took 0.01 GiB and 0.1 seconds", flush=True)
    state = {"healthy": args.mode != "no-ready"}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: object) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/health" and state["healthy"]:
                self._reply(200, b"")
            elif self.path == "/health":
                time.sleep(30)  # hung: the connection stays open without an answer
            elif self.path == "/metrics" and args.metrics:
                self._reply(200, Path(args.metrics).read_bytes())
            elif self.path == "/v1/models":
                self._reply(200, json.dumps({"object": "list", "data": [{"id": args.served_name}]}).encode())
            else:
                self._reply(404, b"")

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            request = _json_object(self.rfile.read(length))
            time.sleep(args.delay)
            if request.get("stream"):
                self._stream(int(request.get("max_tokens") or 1))
            else:
                self._reply(200, json.dumps({"model": args.served_name, "choices": [{"text": "x"}]}).encode())

        def _stream(self, tokens: int) -> None:
            """One chunk carrying every token, with vLLM's continuous usage stats, then [DONE]; the connection's
            close ends the body (HTTP/1.0), as the load tester's streams read it."""
            choice = {"index": 0, "text": "x", "delta": {"content": "x"}, "finish_reason": "length"}
            chunk = {"model": args.served_name, "choices": [choice], "usage": {"completion_tokens": tokens}}
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())

        def _reply(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("INFO Application startup complete.", flush=True)
    if args.mode in ("crash-after", "hang-after"):
        time.sleep(args.after)
        if args.mode == "crash-after":
            print("ERROR fake engine crashed", flush=True)
            os._exit(7)
        state["healthy"] = False
        print("WARNING fake engine hangs", flush=True)
    while True:
        time.sleep(1)


def _json_object(body: bytes) -> dict[str, Any]:
    """The request's JSON object; empty for anything else (the gateway's bad-input tests send such bodies)."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


if __name__ == "__main__":
    main()
