"""What the gateway answers itself, in the OpenAI error shape clients already parse.

OpenAI's API refuses with `{"error": {"message", "type", "param", "code"}}` and vLLM's server answers the same
shape, so a client's error handling reads a gateway refusal like an engine's. Two forms: an `http-request return`
line (the gateway decides before any engine is asked) and an errorfile (a whole HTTP response, for errors HAProxy
raises itself: a queue timeout, a slow or malformed request).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http import HTTPStatus

__all__ = ["Answer", "errorfile", "openai_error", "return_line"]


@dataclass(frozen=True, slots=True)
class Answer:
    """One refusal: its status, the error's message, type, param and code, and how soon to retry (429s)."""

    status: int
    message: str
    kind: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    retry_after_s: int | None = None


def openai_error(answer: Answer) -> str:
    """The JSON body of `answer`, on one line."""
    error = {"message": answer.message, "type": answer.kind, "param": answer.param, "code": answer.code}
    return json.dumps({"error": error})


def return_line(answer: Answer, condition: str, *, model_in_message: bool = False, deny: bool = False) -> str:
    """`http-request return …` sending `answer` when `condition` holds (configuration manual 4.2, "http-request
    return"). With `model_in_message`, `{model}` in its message becomes the request's model, JSON-escaped by the
    `json` converter (manual 7.3.1) inside a log-format string. With `deny`, the same answer as `http-request deny`
    (same arguments, manual 4.2), which HAProxy also counts as a denied request of its proxy."""
    body = openai_error(answer)
    if model_in_message:
        body = body.replace("{model}", "%[var(txn.model),json(utf8s)]")
        payload = f"lf-string '{body}'"
    else:
        payload = f"string '{body}'"
    retry = f" hdr Retry-After {answer.retry_after_s}" if answer.retry_after_s is not None else ""
    action = "deny" if deny else "return"
    return (
        f"    http-request {action} status {answer.status} content-type application/json {payload}{retry} {condition}"
    )


def errorfile(answer: Answer) -> str:
    """A whole HTTP/1.1 response for an `errorfile` (manual 4.2, "errorfile"): HAProxy sends the file as it is, so
    its status line may differ from the code it stands in for (a queue timeout's 503 sent as a 429)."""
    body = openai_error(answer) + "\n"
    headers = [
        f"HTTP/1.1 {answer.status} {HTTPStatus(answer.status).phrase}",
        "content-type: application/json",
        "cache-control: no-store",
        *([f"retry-after: {answer.retry_after_s}"] if answer.retry_after_s is not None else []),
        f"content-length: {len(body.encode())}",
        "connection: close" if answer.status in (400, 408) else "",
    ]
    return "\r\n".join(h for h in headers if h) + "\r\n\r\n" + body
