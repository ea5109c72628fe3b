"""The documentation site: built strictly from the source, then opened page by page in a real headless Chromium.

The build (`python -m docsgen`, what `make docs` runs) generates the reference pages and pictures from the code,
so it runs once for the module; the browser visits every page over a real local HTTP server.
"""

from __future__ import annotations

import asyncio
import functools
import http.server
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urldefrag, urlsplit

import httpx
import pytest
import yaml

from appliance.control.site_file import SiteEntry
from appliance.deploy.prometheus import DOCS_URL, render_prometheus, runbook_path
from testkit.chromium import chromium
from testkit.paths import ROOT

SCREENSHOT = ROOT / ".cache" / "docs-home.png"
"""Where the test leaves the home page's screenshot for a person to look at (.cache/ is not committed)."""


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    out = tmp_path_factory.mktemp("site")
    started = time.monotonic()
    built = subprocess.run(
        [sys.executable, "-m", "docsgen", "--site-dir", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    print(f"docs build: {time.monotonic() - started:.1f} s")
    assert built.returncode == 0, built.stderr
    yield out


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_the_site_builds_strictly_with_the_reference_generated_from_the_code(site: Path) -> None:
    from appliance.cli.main import COMMANDS

    cli = (site / "reference" / "cli" / "index.html").read_text()
    assert all(f"appliance {name}" in cli for name in COMMANDS)
    config = (site / "reference" / "config" / "index.html").read_text()
    assert "engine.host_share.reserve_cores" in config and "≥ 1, ≤ 65535" in config
    assert "host-share-no-core" in (site / "reference" / "codes" / "index.html").read_text()
    assert "appliance_goodput_ratio" in (site / "reference" / "metrics" / "index.html").read_text()
    pilot = (site / "getting-started" / "first-pilot" / "index.html").read_text()
    assert "<!-- run" not in pilot and "NOT READY: a check fails" in pilot  # the recorded T3K's real check


def test_every_rendered_alert_links_to_its_runbook_page(site: Path, tmp_path: Path) -> None:
    secret = tmp_path / "APPLIANCE_TOKEN"
    secret.write_text("x")
    secret.chmod(0o600)
    files = render_prometheus("lab", [SiteEntry("a", "http://127.0.0.1:8100")], tmp_path, gateways=("127.0.0.1:8405",))
    rules = [r for group in yaml.safe_load(files.rules)["groups"] for r in group["rules"]]
    site_url = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["site_url"]
    assert site_url == DOCS_URL
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        assert url == DOCS_URL + runbook_path(rule["alert"])
        page = site / runbook_path(rule["alert"]) / "index.html"
        assert page.is_file(), f"{rule['alert']} has no runbook page"
        assert f'<h1 id="{rule["alert"].lower()}">{rule["alert"]}' in page.read_text()


def test_chromium_finds_every_page_image_and_link_of_the_site(site: Path, served: str) -> None:
    pages = sorted(p.relative_to(site).parent.as_posix() for p in site.rglob("index.html"))
    started = time.monotonic()
    facts = asyncio.run(_visit([served + (p + "/" if p != "." else "") for p in pages]))
    print(f"chromium: {len(pages)} pages in {time.monotonic() - started:.1f} s")
    assert len(facts) == len(pages) > 30
    checked: set[str] = set()
    with httpx.Client() as client:
        for page, (images, links) in facts.items():
            assert images or "reference" in page or "alerts" in page or links, page
            broken = [src for src, loaded in images if not loaded]
            assert not broken, f"{page}: images that did not load: {broken}"
            for link in {urldefrag(link).url for link in links if link.startswith(served)} - checked:
                assert client.get(link).status_code == 200, f"{page} links to {link}, which is not served"
                checked.add(link)
            outside = [link for link in links if not link.startswith(served)]
            assert all(urlsplit(link).scheme in ("http", "https", "mailto") for link in outside), outside
    assert SCREENSHOT.stat().st_size > 10_000


async def _visit(urls: list[str]) -> dict[str, tuple[tuple[tuple[str, bool], ...], tuple[str, ...]]]:
    seen = {}
    async with chromium() as browser:
        for url in urls:
            facts, png = await browser.visit(url, screenshot=url == urls[0])
            if png:
                SCREENSHOT.parent.mkdir(exist_ok=True)
                SCREENSHOT.write_bytes(png)
            seen[url] = (facts.images, facts.links)
    return seen


def test_the_readme_is_short_and_its_links_and_picture_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not urlsplit(t).scheme]
    assert "docs/img/console-site.svg" in local
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    assert "make serve   #" in readme and "make test    #" in readme  # the quick start's two commands
