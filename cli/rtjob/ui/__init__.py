"""`rtjob ui`: the local, read-only web app (app.py lists its parts: safety, routes, and what each page shows)."""

from pathlib import Path

# The chart library (uPlot), built by `make ui-assets` (npm ci) into this git-ignored folder and shipped as package
# data when present: a wheel built without npm holds none, and `rtjob ui` says so (commands/ui.py).
VENDOR = Path(__file__).parent / "static" / "vendor"
CHART_ASSETS = ("uPlot.iife.min.js", "uPlot.min.css")


def missing_chart_assets() -> list[str]:
    """The chart library's files this installed rtjob lacks."""
    return [name for name in CHART_ASSETS if not (VENDOR / name).is_file()]
