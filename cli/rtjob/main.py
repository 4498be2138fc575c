"""The `rtjob` console script (pyproject: rtjob = "rtjob.main:main"; also `python -m rtjob.main`)."""

from .commands import main

if __name__ == "__main__":
    main()
