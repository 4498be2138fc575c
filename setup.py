"""setuptools reads pyproject.toml; this file only says when rtjob is built without rtjob ui's npm-built chart
library (a clone without npm: rtjob works, `rtjob ui` says what it lacks and how to add it)."""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

VENDOR = Path(__file__).parent / "cli" / "rtjob" / "ui" / "static" / "vendor"
ASSETS = ("uPlot.iife.min.js", "uPlot.min.css")


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        missing = [name for name in ASSETS if not (VENDOR / name).is_file()]
        if missing:
            print(f"rtjob: building without rtjob ui's chart library ({', '.join(missing)} not in {VENDOR}); "
                  "`make ui-assets` (npm ci) adds it", file=sys.stderr)
        super().run()


setup(cmdclass={"build_py": BuildPyWithAssets})
