"""Sphinx configuration of the pyspark-reactive documentation (``./dev docs`` builds it).

The build is offline: no intersphinx inventory or remote page is fetched. PySpark's API
pages are linked by address. Warnings are errors (``./dev docs`` and the tests pass -W).
"""

from __future__ import annotations

import glob
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))

from importlib.metadata import version as _distribution_version  # noqa: E402

# The tutorials are the repository's notebooks/, copied beside their page at each build
# (a symbolic link would resolve their links to each other outside the site).
NOTEBOOKS = os.path.join(os.path.dirname(HERE), "notebooks")
# Stubs of an earlier build written as .md (before .rst came first) would shadow the new.
for _stale in glob.glob(os.path.join(HERE, "reference", "api", "*.md")):
    os.remove(_stale)
for _name in sorted(os.listdir(NOTEBOOKS)):
    if _name.endswith(".ipynb"):
        shutil.copyfile(os.path.join(NOTEBOOKS, _name), os.path.join(HERE, "tutorials", _name))

project = "pyspark-reactive"
author = "The pyspark-reactive authors"
copyright = "2026, the pyspark-reactive authors"
release = _distribution_version("pyspark-reactive")
version = ".".join(release.split(".")[:2])

extensions = [
    "myst_nb",  # MyST Markdown pages and the notebooks, rendered with their stored outputs
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx_design",
    "reactive_docs",  # _ext/: the option tables, generated from the code's definitions
]

exclude_patterns = ["_build", "conftest.py", "examples/*.out", "**/.ipynb_checkpoints"]
# .rst first: autosummary writes its stubs (reference/api/) in the first suffix, and they are
# reStructuredText.
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"

# The notebooks are shown as committed, with the outputs the tests produced: never run here.
nb_execution_mode = "off"
nb_merge_streams = True
myst_enable_extensions = ["colon_fence", "deflist", "fieldlist", "attrs_block"]
myst_heading_anchors = 3

autosummary_generate = True
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
autodoc_member_order = "bysource"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

html_theme = "pydata_sphinx_theme"
html_title = f"pyspark-reactive {release}"
html_static_path = ["_static"]
html_css_files = ["reactive.css"]
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "navbar_align": "left",
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
    # No icon links: the project has no public address yet.
    "icon_links": [],
    # An "On this page" outline on every page, the option references included (their
    # tables wrap within their cells: reactive.css).
    "secondary_sidebar_items": {"**": ["page-toc"]},
}
# No section navigation beside the pages with the generated option tables: the tables get
# its width (each page's outline stays on the right).
html_sidebars = {"index": [], "changelog": [], "reference/source-options": [],
                 "reference/publishers/*": []}
html_show_sourcelink = False
# Offline: nothing is fetched at build time, and nothing at view time either.
html_theme_options["analytics"] = {}
