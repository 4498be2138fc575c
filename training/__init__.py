"""Training entrypoints and their shared pieces (data, models, loop, checkpoint, options).

Run an entrypoint from the project root, e.g. ``python -m training.ray_ddp --help``.
Entrypoints are configured by flags and RTJOB_* environment variables only; nothing
here imports the CLI (``cli/rtjob``).
"""
