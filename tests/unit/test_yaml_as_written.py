"""YAML as written (issue 11, point 4): job files, compute configs and --set values are read as YAML 1.2, so
strings stay strings (`on`, `NO`, `010`), and a number in `args` reaches the script as it was written
(`1.10`, `010`, `1e-3`). YAML that rtjob writes for other tools loads back the same in YAML 1.1 (PyYAML, which
Anyscale's CLI uses) and YAML 1.2 (ruamel). The CLI runs in-process (no cluster, nothing contacted)."""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from rtjob.core.errors import BadInput
from rtjob.core.yamlout import dump_yaml
from rtjob.jobspec.resolve import render_args
from rtjob.jobspec.schema import validate_job
from rtjob.jobspec.yamlsrc import MAX_NODES, parse_yaml
from ruamel.yaml import YAML
from support.cli import base_env, main_captured
from support.companion import WRAPPER, inner
from support.scrub import scrub

REPO = Path(__file__).resolve().parents[2]

AS_WRITTEN_JOB = """\
name: as-written
entrypoint: python train.py
nodes: 2
timeout_s: 90
tags:
  country: NO
  release: 1.10
env_vars:
  MODE: on
  TAG: 010
args:
  version: 1.10
  tag: 010
  lr: 1e-3
  mode: on
  country: NO
  dataset: yes
  mask: 0x1F
  epochs: 5
  ratio: 0.5
  sizes: [1.10, 2]
  quoted: "1.10"
  use_gpu: true
  debug: false
  nothing: ~
"""
# What the script receives: every value as written; true → a bare flag; false and null → omitted.
AS_WRITTEN_ARGV = ["--version", "1.10", "--tag", "010", "--lr", "1e-3", "--mode", "on", "--country", "NO",
                   "--dataset", "yes", "--mask", "0x1F", "--epochs", "5", "--ratio", "0.5", "--sizes", "1.10", "2",
                   "--quoted", "1.10", "--use-gpu"]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A throw-away project with one job; the CLI runs in this process, in a private RTJOB_HOME."""
    root = tmp_path / "project"
    (root / "jobs").mkdir(parents=True)
    (root / "jobs" / "as-written.yaml").write_text(AS_WRITTEN_JOB)
    scrub(monkeypatch)
    monkeypatch.setenv("RTJOB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RTJOB_PROJECT", str(root))
    monkeypatch.chdir(root)
    return root



def script_argv(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[list[str], dict[str, Any]]:
    """`rtjob render as-written -o json ARGS`: the script's own arguments (inside the timeout wrapper)."""
    code, out, err = main_captured(capsys, "render", "as-written", "-o", "json", "--submission-id", "t-1", *args)
    assert code == 0, err
    rendered = json.loads(out)
    outer = shlex.split(rendered["submit_job"]["entrypoint"])
    assert outer[:3] == WRAPPER and len(outer) == 4, outer  # the companion runs it (and its timeout_s: 90)
    assert rendered["submit_job"]["runtime_env"]["env_vars"]["RTJOB_TIME_LIMIT_S"] == "90"
    inner = shlex.split(outer[-1])
    assert inner[:2] == ["python", "train.py"]
    return inner[2:], rendered


def test_args_reach_the_script_as_written(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, rendered = script_argv(capsys)
    assert argv == AS_WRITTEN_ARGV
    # Typed fields are still typed (nodes, timeout_s); tags and env values are the strings written.
    assert rendered["run"]["nodes"] == 2
    assert rendered["submit_job"]["metadata"]["rtjob.timeout_s"] == "90"
    assert rendered["submit_job"]["metadata"]["tag.country"] == "NO"
    assert rendered["submit_job"]["metadata"]["tag.release"] == "1.10"
    assert rendered["submit_job"]["runtime_env"]["env_vars"]["MODE"] == "on"
    assert rendered["submit_job"]["runtime_env"]["env_vars"]["TAG"] == "010"


def test_set_values_are_yaml_12_and_keep_their_text(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv, rendered = script_argv(capsys, "--set", "args.dataset=off", "--set", "args.version=2.10",
                                 "--set", "args.tag=007", "--set", "args.lr=5e-4", "--set", "args.debug=true",
                                 "--set", "args.use_gpu=false", "--set", "args.sizes=[1.50, 03]",
                                 "--set", "nodes=3", "--set", "tags.country=NO")
    assert argv == ["--version", "2.10", "--tag", "007", "--lr", "5e-4", "--mode", "on", "--country", "NO",
                    "--dataset", "off", "--mask", "0x1F", "--epochs", "5", "--ratio", "0.5", "--sizes", "1.50", "03",
                    "--quoted", "1.10", "--debug"]
    assert rendered["run"]["nodes"] == 3
    assert rendered["submit_job"]["metadata"]["tag.country"] == "NO"


def test_the_local_profile_args_keep_their_text_too(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "jobs" / "as-written.yaml").write_text(AS_WRITTEN_JOB + "local:\n  args:\n    version: 0.10\n")
    argv, _ = script_argv(capsys)
    assert argv[:2] == ["--version", "0.10"]


@pytest.mark.parametrize(("text", "line", "what"), [
    ("name: x\nentrypoint: y\nargs:\n  lr: 1\n  lr: 2\n", 5, "duplicate key 'lr' (first on line 4)"),
    ("name: x\nentrypoint: y\nname: z\n", 3, "duplicate key 'name' (first on line 1)"),
    ("name: x\nentrypoint: y\nexcludes: [a, b\nnodes: 2\n", 3, "the '[' opened here is not closed (line 4"),
    ("name: x\nentrypoint: 'y\nnodes: 2\n", 2, "the quote opened here is not closed"),
    ("name: x\nentrypoint: y\nargs:\n  lr: !python/object 1\n", 4, "invalid YAML"),
    ("name: x\nentrypoint: y\nnodes: three\n", 3, "nodes"),
])
def test_bad_yaml_is_one_line_with_file_and_line(project: Path, capsys: pytest.CaptureFixture[str], text: str,
                                                 line: int, what: str) -> None:
    (project / "jobs" / "bad.yaml").write_text(text)
    code, out, err = main_captured(capsys, "render", "bad")
    assert code == 2 and not out
    assert err.startswith(f"rtjob: error: jobs/bad.yaml:{line}: ") and what in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_aliases_and_nesting_stay_bounded(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bomb = "name: x\nentrypoint: y\nargs:\n  a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
        f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8))
    (project / "jobs" / "bomb.yaml").write_text(bomb)
    code, _, err = main_captured(capsys, "render", "bomb")
    assert code == 2 and f"more than {MAX_NODES:,} values" in err and "jobs/bomb.yaml" in err
    (project / "jobs" / "deep.yaml").write_text("name: x\nentrypoint: y\nargs: " + "[" * 5000 + "]" * 5000 + "\n")
    code, _, err = main_captured(capsys, "render", "deep")
    assert code == 2 and err.startswith("rtjob: error: jobs/deep.yaml") and len(err.strip().splitlines()) == 1


PLAIN = (dict, list, str, int, float, bool, type(None))


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return type(value) is dict and all(_plain(k) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return type(value) is list and all(_plain(v) for v in value)
    return type(value) in PLAIN


def test_loaded_data_is_plain_python_with_lines() -> None:
    text = ("base: &base\n  cpus: 2\n  when: 2024-01-01\nresources_per_worker:\n  <<: *base\n  gpus: 1\n"
            "list: [!!str 5, 0o10, .inf, ~, =, <<]\n")
    located = parse_yaml(text, "j.yaml")
    assert located.data == {"base": {"cpus": 2, "when": "2024-01-01"},
                            "resources_per_worker": {"cpus": 2, "when": "2024-01-01", "gpus": 1},
                            "list": ["5", 8, math.inf, None, "=", "<<"]}
    assert located.where(("resources_per_worker", "gpus")) == "j.yaml:6"
    for path in [*sorted((REPO / "jobs").glob("*.yaml")), *sorted((REPO / "compute_configs").glob("*.yaml")), None]:
        data = parse_yaml(path.read_text(), path.name).data if path else located.data
        assert _plain(data), path


def test_yaml_11_words_are_strings_and_only_true_false_are_booleans() -> None:
    data = parse_yaml("a: on\nb: off\nc: yes\nd: NO\ne: y\nf: true\ng: False\nh: 010\ni: 1.10\n", "x.yaml").data
    assert data == {"a": "on", "b": "off", "c": "yes", "d": "NO", "e": "y", "f": True, "g": False, "h": 10,
                    "i": 1.1}  # outside args a number is a number (YAML 1.2: 010 is ten, not eight)


def test_a_broken_merge_is_one_line() -> None:
    with pytest.raises(BadInput, match=r"^j\.yaml:2: invalid YAML: '<<' merges mappings only"):
        parse_yaml("a:\n  <<: [1]\n", "j.yaml")


# -- YAML written for other tools --------------------------------------------------------------------------

AMBIGUOUS = ["on", "off", "NO", "yes", "y", "~", "null", "", "010", "0o10", "0x1F", "1.10", "1e-3", "1_000",
             ".inf", "-.5", "2024-01-01", "True", "12:30", "<<", "=", "plain"]


def _both_readers(text: str) -> tuple[Any, Any]:
    return yaml.safe_load(text), YAML(typ="safe", pure=True).load(text)


def test_dumped_strings_survive_yaml_11_and_12_readers() -> None:
    data = {"tags": {s: s for s in AMBIGUOUS if s}, "args": list(AMBIGUOUS), "n": 5, "f": 1.5, "b": True, "z": None}
    pyyaml, ruamel = _both_readers(dump_yaml(data))
    assert pyyaml == data and ruamel == data


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(st.characters(blacklist_categories=("Cs",)), max_size=12),
                       st.text(st.characters(blacklist_categories=("Cs",)), max_size=20), max_size=5))
def test_any_dumped_mapping_of_strings_loads_back_the_same(data: dict[str, str]) -> None:
    pyyaml, ruamel = _both_readers(dump_yaml(data))
    assert pyyaml == data and ruamel == data


def test_the_anyscale_job_file_keeps_strings(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = main_captured(capsys, "render", "as-written", "--backend", "anyscale", "-o", "yaml",
                         "--submission-id", "t-1", "--set", "env_vars.TAG=007", "--set", "tags.release=2.10")
    assert code == 0, err
    for loaded in _both_readers(out):
        assert loaded["env_vars"]["MODE"] == "on" and loaded["env_vars"]["TAG"] == "007"
        assert loaded["tags"]["country"] == "NO" and loaded["tags"]["release"] == "2.10"
        assert inner(loaded["entrypoint"]) == "python train.py " + " ".join(AS_WRITTEN_ARGV)


# -- properties: load → render is the identity on what was written ------------------------------------------

def _argv_of(job_text: str) -> list[str]:
    return render_args(validate_job(parse_yaml(job_text, "jobs/p.yaml")).args)


# Job fields strip surrounding whitespace (pydantic str_strip_whitespace), so values are generated stripped.
_stripped = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).filter(lambda s: s == s.strip())


@settings(max_examples=200, deadline=None)
@given(value=_stripped)
def test_any_string_in_args_reaches_the_script_unchanged(value: str) -> None:
    assert _argv_of(dump_yaml({"name": "p", "entrypoint": "x", "args": {"value": value}})) == ["--value", value]
    if all(ord(c) <= 0xFFFF for c in value):  # JSON writes others as surrogate pairs, which YAML does not join
        as_json = f"name: p\nentrypoint: x\nargs:\n  value: {json.dumps(value)}\n"  # a JSON string is YAML 1.2
        assert _argv_of(as_json) == ["--value", value]


@settings(max_examples=200, deadline=None)
@given(number=st.from_regex(r"\A[-+]?([0-9]{1,5}(\.[0-9]{0,4})?|\.[0-9]{1,4})([eE][-+]?[0-9]{1,3})?\Z"))
def test_a_number_in_args_reaches_the_script_as_written(number: str) -> None:
    assert _argv_of(f"name: p\nentrypoint: x\nargs:\n  value: {number}\n  list: [{number}]\n") == [
        "--value", number, "--list", number]


def test_help_does_not_load_the_yaml_libraries(tmp_path: Path) -> None:
    code = ("import sys, rtjob.main\n"
            "try:\n    rtjob.main.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('ruamel', 'ruamel.yaml', 'yaml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=base_env(tmp_path / "home"), capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr
