"""The documentation site builds with no warning, and its pages render in a real browser.

The site is built once per test session, as ``./dev docs`` builds it (Sphinx, warnings as
errors, offline). Every internal link of every page is checked against the built files and
their anchors; four pages (the index, a how-to, the option reference, a notebook) are opened
in headless Chromium (Debian's ``chromium``, which ``./dev`` installs): the rendered DOM's
links are checked the same way, the page must show its title and body, the browser must log
no script error, and a screenshot must show a laid-out page rather than a blank one.
Screenshots stay in the session's temporary directory (the path is printed) for a look.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
BROWSER_PAGES = ("index.html", "how-to/consume-output.html", "reference/source-options.html",
                 "tutorials/backpressure.html")


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []
        self.resources: list[str] = []  # stylesheets, scripts, images
        self.h1 = ""
        self._in_h1 = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "a" and values.get("name"):
            self.ids.add(str(values["name"]))
        if tag == "a" and values.get("href") is not None:
            self.links.append(str(values["href"]))
        if tag == "link" and values.get("rel") == "stylesheet" and values.get("href"):
            self.resources.append(str(values["href"]))
        if tag in ("script", "img") and values.get("src"):
            self.resources.append(str(values["src"]))
        if tag == "h1":
            self._in_h1 = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "h1":
            self._in_h1 = False

    def handle_data(self, data: str) -> None:
        if self._in_h1:
            self.h1 += data


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site") / "html"
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out.parent / "doctrees"), str(ROOT / "docs"), str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    print(f"the site built in {time.monotonic() - started:.1f} s into {out}")
    assert result.returncode == 0 and not result.stderr.strip(), \
        f"the docs build failed or warned:\n{result.stderr[-6000:]}"
    return out


@functools.cache
def _anchors(page: Path) -> frozenset[str]:
    """The ids of a built page, read once for all the links that point at it."""
    return frozenset(_parse(page.read_text(encoding="utf-8")).ids)


def _broken_links(site: Path, page: Path, html: str) -> list[str]:
    broken = []
    for href in _parse(html).links:
        parts = urlsplit(href)
        if parts.scheme in ("http", "https", "mailto", "data", "javascript"):
            continue
        if parts.scheme == "file":
            target = Path(unquote(parts.path))
        elif parts.path:
            target = (page.parent / unquote(parts.path)).resolve()
        else:
            target = page
        if target.is_dir():
            target = target / "index.html"
        if site.resolve() not in target.resolve().parents and target.resolve() != site:
            broken.append(f"{href} (leaves the site)")
            continue
        if not target.is_file():
            broken.append(f"{href} (no file {target.relative_to(site)})")
            continue
        if parts.fragment and target.suffix == ".html":
            if unquote(parts.fragment) not in _anchors(target):
                broken.append(f"{href} (no anchor #{parts.fragment} in "
                              f"{target.relative_to(site)})")
    return broken


def test_no_page_has_a_broken_internal_link(site: Path) -> None:
    broken = {}
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 20, [p.name for p in pages]
    for page in pages:
        found = _broken_links(site, page, page.read_text(encoding="utf-8"))
        if found:
            broken[str(page.relative_to(site))] = found
    assert not broken, broken


def test_every_page_with_sections_has_an_outline(site: Path) -> None:
    # "On this page": the theme's page-toc in the right column, a link per section.
    missing = {}
    for page in sorted(site.rglob("*.html")):
        if page.name in ("genindex.html", "search.html", "py-modindex.html"):
            continue  # Sphinx's generated lists: a heading per letter, no sections
        html = page.read_text(encoding="utf-8")
        sections = len(re.findall(r"<h2\b", html.split("<article", 1)[-1]))
        if sections < 2:
            continue
        outline = re.search(r'<nav id="pst-page-toc-nav" class="page-toc"[^>]*>(.*?)</nav>',
                            html, re.S)
        links = len(re.findall(r'href="#', outline.group(1))) if outline else 0
        if links < 2:
            missing[str(page.relative_to(site))] = f"{sections} sections, {links} links"
    assert not missing, missing


def test_the_reference_lists_every_accepted_option(site: Path) -> None:
    # The tables are generated from the definitions the code validates with: each option
    # has a row (an anchor) on its page.
    from pyspark_reactive.source import options

    pages = {"source": site / "reference" / "source-options.html"}
    pages.update({name: site / "reference" / "publishers" / f"{name}.html"
                  for name in options.BUILTIN_PUBLISHERS})
    specs = {"source": options.SOURCE_OPTION_SPECS}
    specs.update({name: options.resolve_factory(name).option_specs  # type: ignore[attr-defined]
                  for name in options.BUILTIN_PUBLISHERS})
    missing = {}
    for kind, page in pages.items():
        ids = _parse(page.read_text(encoding="utf-8")).ids if page.is_file() else set()
        absent = [spec.name for spec in specs[kind]
                  if f"option-{kind}-{spec.name.lower()}" not in ids]
        if absent:
            missing[str(page.relative_to(site))] = absent
    assert not missing, missing


@pytest.mark.parametrize("page", ["pyspark_reactive.publish", "reactive_streams.Publisher",
                                  "reactive_streams.tck.PublisherVerification"])
def test_the_api_pages_show_the_docstrings(site: Path, page: str) -> None:
    # Rendered from the docstrings: a signature, and numpydoc's sections (stubs parsed as
    # Markdown showed the directives' text instead, with no warning).
    html = (site / "reference" / "api" / f"{page}.html").read_text(encoding="utf-8")
    assert 'class="sig ' in html
    assert ".. auto" not in html and ".. currentmodule" not in html
    assert "Parameters" in html or "Methods" in html or "Attributes" in html


@pytest.mark.parametrize("page", ["pyspark_reactive.publish", "reactive_streams.Publisher",
                                  "reactive_streams.create"])
def test_the_main_api_pages_carry_an_example_and_a_link_to_their_narrative(
        site: Path, page: str) -> None:
    html = (site / "reference" / "api" / f"{page}.html").read_text(encoding="utf-8")
    assert ">Examples<" in html and 'class="highlight' in html, "no example"
    narrative = re.findall(r'href="\.\./\.\./(?:how-to|getting-started)/[^"]+\.html', html)
    assert narrative, "no link to a how-to or getting-started page"


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("no chromium on PATH: ./dev installs Debian's chromium package "
                "(apt-get install chromium)")


def _browse(page: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = page.parent / f".chromium-{os.getpid()}"
    return subprocess.run(
        [_chromium(), "--headless=new", "--no-sandbox", "--disable-gpu",
         "--no-first-run", "--disable-extensions", "--disable-background-networking",
         "--hide-scrollbars", f"--user-data-dir={profile}", "--enable-logging=stderr",
         "--v=0", *args, page.as_uri()],
        capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("name", BROWSER_PAGES)
def test_a_page_renders_in_chromium(site: Path, name: str,
                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    page = site / name
    assert page.is_file(), f"{name} was not built"
    dom = _browse(page, "--dump-dom", "--virtual-time-budget=5000")
    assert dom.returncode == 0, dom.stderr[-3000:]
    rendered = _parse(dom.stdout)
    assert rendered.h1.strip(), f"{name} shows no title"
    assert "bd-article" in dom.stdout, f"{name} has no article body (theme not applied?)"
    assert not _broken_links(site, page, dom.stdout)
    # The theme's stylesheets and scripts, and the page's images, are there to load.
    missing = [src for src in rendered.resources if not urlsplit(src).scheme
               and not (page.parent / unquote(urlsplit(src).path)).is_file()]
    assert not missing and any(".css" in src for src in rendered.resources), \
        (missing, rendered.resources)
    errors = [line for line in dom.stderr.splitlines()
              if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)]
    assert not errors, errors
    shots = tmp_path_factory.getbasetemp() / "screenshots"
    shots.mkdir(exist_ok=True)
    shot = shots / (name.replace("/", "_").removesuffix(".html") + ".png")
    taken = _browse(page, f"--screenshot={shot}", "--window-size=1280,1400")
    assert taken.returncode == 0 and shot.is_file(), taken.stderr[-3000:]
    print(f"screenshot: {shot}")
    from matplotlib import image

    pixels = image.imread(str(shot))[..., :3]
    dark = (pixels.mean(axis=2) < 0.5).mean()  # text and headings on a light page
    assert 0.005 < dark < 0.6, f"{name}'s screenshot looks blank (dark share {dark:.4f})"


# Run in the page: every cell of every table whose content (or a child's box) reaches past
# the cell's own right edge; written into the title, which --dump-dom then shows.
_OVERFLOW_PROBE = """<script>
window.addEventListener("load", () => {
  const over = [];
  for (const cell of document.querySelectorAll("article table td, article table th")) {
    const edge = cell.getBoundingClientRect().right + 1;
    const wide = cell.scrollWidth > cell.clientWidth + 1 ||
      [...cell.querySelectorAll("*")].some(c => c.getBoundingClientRect().right > edge);
    if (wide) over.push(cell.textContent.trim().slice(0, 40));
  }
  document.title = "OVERFLOW:" + JSON.stringify(over);
});
</script>"""


@pytest.mark.parametrize("width", [1400, 800])
@pytest.mark.parametrize("name", ["reference/source-options.html",
                                  "reference/publishers/mqtt.html"])
def test_the_option_tables_fit_their_cells(site: Path, name: str, width: int) -> None:
    page = site / name
    probe = page.with_name(f".fit-{width}-{page.name}")  # beside it: the same relative links
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>",
                                                            _OVERFLOW_PROBE + "</body>"),
                     encoding="utf-8")
    try:
        dom = _browse(probe, "--dump-dom", "--virtual-time-budget=5000",
                      f"--window-size={width},1000")
    finally:
        probe.unlink()
    assert dom.returncode == 0, dom.stderr[-3000:]
    found = re.search(r"<title>OVERFLOW:(.*?)</title>", dom.stdout, re.S)
    assert found, "the probe did not run"
    assert found.group(1) == "[]", f"cells whose content overflows at {width} px: {found.group(1)}"
