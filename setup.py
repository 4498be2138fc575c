"""setuptools reads pyproject.toml; this file only refuses to build rtjob without rtjob ui's npm-built assets."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

VENDOR = Path(__file__).parent / "cli" / "rtjob" / "ui" / "static" / "vendor"
ASSETS = ("uPlot.iife.min.js", "uPlot.min.css")


class BuildPyWithAssets(build_py):
    def run(self) -> None:
        missing = [name for name in ASSETS if not (VENDOR / name).is_file()]
        if missing:
            raise SystemExit(f"rtjob ui's assets are missing ({', '.join(missing)} in {VENDOR}): run `make ui-assets` "
                             "(npm ci from web/package-lock.json) before building rtjob")
        super().run()


setup(cmdclass={"build_py": BuildPyWithAssets})
