"""rtjob: submit PyTorch training jobs to Ray clusters and Anyscale from one spec."""

__version__ = "0.1.0"
