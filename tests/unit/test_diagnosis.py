"""A failed run whose driver log shows a missing module ends with one line that names it and the job file."""

from __future__ import annotations

from rtjob.runs.lifecycle.diagnosis import missing_module, missing_module_hint

TRACEBACK = """Traceback (most recent call last):
  File "/tmp/ray/session/runtime_resources/working_dir_files/train.py", line 1, in <module>
    import numpy.linalg
ModuleNotFoundError: No module named 'numpy'
"""


def test_the_missing_module_is_read_from_the_log_and_the_last_one_wins() -> None:
    assert missing_module("all fine\n") is None
    assert missing_module(TRACEBACK) == "numpy"
    earlier = "ModuleNotFoundError: No module named 'optional_accel'\nhandled, carrying on\n"
    assert missing_module(earlier + "ModuleNotFoundError: No module named 'sklearn.metrics'\n") == "sklearn"


def test_the_hint_names_the_module_the_job_file_and_step_and_a_pip_name_only_when_known() -> None:
    # This environment has pyyaml (rtjob's own dependency): its module `yaml` maps to a known distribution.
    hint = missing_module_hint("ModuleNotFoundError: No module named 'yaml'\n", "jobs/train.yaml", "prep")
    assert hint is not None and "module 'yaml' (pip: PyYAML)" in hint
    assert "the `requirements:` of jobs/train.yaml (step prep)" in hint
    # A module nothing here provides: no pip name is invented.
    unknown = missing_module_hint("ModuleNotFoundError: No module named 'rtjob_no_such_mod'\n", "jobs/t.yaml")
    assert unknown is not None and "pip:" not in unknown and "module 'rtjob_no_such_mod' is not installed" in unknown
    assert missing_module_hint("Traceback: KeyError: 'x'\n", "jobs/t.yaml") is None
