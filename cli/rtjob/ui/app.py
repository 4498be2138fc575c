"""`rtjob ui`'s web app: Starlette routes over what the pages show, server-rendered Jinja templates, one small script.

Its parts: safety.py (the Host check, the token, the redaction boundary, the CSP), site.py (what every route shares:
templates, the run asked for as `rtjob status` tells it), pages.py (the HTML pages), live.py (JSON, the live poll,
the log and its stream, samples); what they show, as plain data: runs_page.py, table.py, run_page.py, logs.py,
compare.py; formats.py: the templates' filters and chart data. Read-only: no route changes a run or writes to its
storage."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from . import live, pages
from .safety import Config, Guard
from .site import HERE, Site

__all__ = ["Config", "create_app"]


def create_app(config: Config) -> ASGIApp:
    app = Starlette(routes=[*pages.ROUTES, *live.ROUTES,
                            Mount("/static", app=StaticFiles(directory=str(HERE / "static")), name="static")])
    app.state.site = Site(config)  # what every handler shares (site.site_of)
    return Guard(app, config)
