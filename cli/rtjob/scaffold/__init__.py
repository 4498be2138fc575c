"""Files rtjob writes into a project rather than runs: `rtjob init`'s files (init_files.py) and the GitHub workflow
for scheduled runs (workflow.py)."""
