"""`python -m docsgen [--config-file mkdocs.yml] [--site-dir DIR]`: build the site strictly (what `make docs` runs).

A problem is one line naming the page, command or key, exit 1: MkDocs's first warning (strict mode fails on any:
a broken link, anchor or nav entry), or what the generated reference could not document. MkDocs's own progress
stays quiet; `--verbose` shows it.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

from docsgen import ROOT, DocsError


class _Warnings(logging.Handler):
    """MkDocs's warnings, kept to report the first one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(" ".join(record.getMessage().split()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m docsgen", description="build the documentation site strictly")
    parser.add_argument("--config-file", type=Path, default=ROOT / "mkdocs.yml", help="the site's mkdocs.yml")
    parser.add_argument("--site-dir", type=Path, default=None, help="where the site goes (default: mkdocs.yml's)")
    parser.add_argument("--verbose", action="store_true", help="show MkDocs's own progress")
    args = parser.parse_args(argv)
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")  # Material's notice about a future MkDocs, on every build
    from mkdocs.commands.build import build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort, ConfigurationError

    warnings = _Warnings()
    log = logging.getLogger("mkdocs")
    log.addHandler(warnings)
    log.propagate = False
    if args.verbose:
        log.addHandler(logging.StreamHandler())
        log.setLevel(logging.INFO)
    started = time.monotonic()
    try:
        extra = {"site_dir": str(args.site_dir)} if args.site_dir else {}
        build(load_config(str(args.config_file), strict=True, **extra))
    except DocsError as error:
        return _fail(str(error))
    except (Abort, ConfigurationError) as error:
        return _fail(_first(warnings.seen) or " ".join(str(error).split()))
    except Exception as error:  # the process's boundary: one line; APPLIANCE_DEBUG=1 shows the traceback
        if os.environ.get("APPLIANCE_DEBUG") == "1":
            raise
        return _fail(f"the build failed: {type(error).__name__}: {' '.join(str(error).split())}")
    print(f"docs: built in {time.monotonic() - started:.1f} s", file=sys.stderr)
    return 0


def _first(seen: list[str]) -> str:
    more = f" (and {len(seen) - 1} more)" if len(seen) > 1 else ""
    return seen[0] + more if seen else ""


def _fail(message: str) -> int:
    print(f"docs: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
