"""The docs stay true to the code: the generated reference pages are current, every runnable command names real
commands and options, every relative link lands, and README stays a landing page that links every docs page.

Runnable commands are the `$ ` lines of ```console blocks (CONTRIBUTING.md, "Docs"). Commands are checked against
the Click command tree in this process: no rtjob process per line.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from rtjob.commands import cli
from rtjob.core import errors

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
PAGES = sorted([README, REPO / "CONTRIBUTING.md", *DOCS.rglob("*.md")])
README_MAX_LINES = 250
OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "2>&1"}


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def _generator():  # noqa: ANN202 - a module loaded from tools/ (not a package)
    spec = importlib.util.spec_from_file_location("gen_reference", REPO / "tools" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- the generated reference ----------------------------------------------------------------------------------

def test_generated_reference_pages_are_current() -> None:
    # One process of its own, as `make docs-cli` runs it: nothing another test did to Click's commands in this
    # process (Click caches each command's help option) can change what it renders.
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "gen_reference.py"), "--check"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_the_generator_check_names_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    gen = _generator()
    stale = tmp_path / "docs" / "reference" / "cli.md"
    stale.parent.mkdir(parents=True)
    stale.write_text(gen.cli_page().replace("rtjob submit", "rtjob submitt", 1), encoding="utf-8")
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "PAGES", {stale: gen.cli_page})
    assert gen.main(["--check"]) == 1
    assert "docs/reference/cli.md is stale: run `make docs-cli`" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0


def test_the_agent_skill_keeps_its_text_and_generates_its_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """docs/agents/SKILL.md: an Agent Skill (front matter: name, description) whose hand-written part stays as
    written and whose command reference, below the generator's mark, is the --help of the commands an agent needs."""
    gen = _generator()
    real = (DOCS / "agents" / "SKILL.md").read_text(encoding="utf-8")
    assert real.startswith("---\nname: rtjob\ndescription: ") and gen.SKILL_MARK in real
    page = tmp_path / "docs" / "agents" / "SKILL.md"
    page.parent.mkdir(parents=True)
    page.write_text("---\nname: x\n---\n\n# By hand\n", encoding="utf-8")
    monkeypatch.setattr(gen, "REPO", tmp_path)
    monkeypatch.setattr(gen, "SKILL_PAGE", page)
    monkeypatch.setattr(gen, "PAGES", {page: gen.skill_page})
    assert gen.main(["--check"]) == 1
    assert "docs/agents/SKILL.md is stale: run `make docs-cli`" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
    text = page.read_text(encoding="utf-8")
    assert text.startswith("---\nname: x\n---\n\n# By hand\n\n" + gen.SKILL_MARK)
    for name in gen.SKILL_COMMANDS:
        assert f"### `rtjob {name}`" in text and f"Usage: rtjob {name} " in text, name
    page.write_text(text.replace("# By hand", "# By hand, edited"), encoding="utf-8")
    assert gen.main(["--check"]) == 0  # the text above the mark is the page's own


def test_the_cli_reference_has_every_command() -> None:
    text = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    ctx = click.Context(cli)
    for name in cli.list_commands(ctx):
        assert f"## `rtjob {name}`" in text, name


# -- runnable commands ----------------------------------------------------------------------------------------

def _console_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, command) for each `$ ` line of a ```console block, continuation lines joined."""
    inside, pending, start = False, "", 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = line.strip()
        if fence.startswith("```"):
            inside = fence == "```console"
            continue
        if not inside:
            continue
        if pending:
            pending += " " + line.strip()
        elif line.lstrip().startswith("$ "):
            pending, start = line.lstrip()[2:], number
        else:
            continue  # output shown under a command
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        yield start, pending
        pending = ""


def _segments(tokens: list[str]) -> Iterator[list[str]]:
    """The simple commands of a parsed line (split at pipes, lists and redirections), and those in `$(...)`."""
    segment: list[str] = []
    for token in tokens:
        for inner in re.findall(r"\$\(([^()]*)\)", token):
            yield from _segments(shlex.split(inner, comments=True))
        ends = token.endswith(";") and token != ";"
        token = token.rstrip(";") if ends else token
        if token in OPERATORS:
            yield segment
            segment = []
            continue
        segment.append(token)
        if ends:
            yield segment
            segment = []
    yield segment


def _option_names(command: click.Command) -> set[str]:
    names = {"--help", "-h"}
    for param in command.params:
        if isinstance(param, click.Option):
            names.update(param.opts, param.secondary_opts)
    return names


def check_rtjob(args: list[str]) -> str | None:
    """None when `rtjob ARGS` names an existing command and only its options, else what is wrong."""
    command: click.Command = cli
    path = "rtjob"
    for token in args:
        if token.startswith("-") and token != "-":
            name = token.split("=", 1)[0]
            if name not in _option_names(command):
                return f"`{path}` has no option {name}"
        elif isinstance(command, click.Group):
            sub = command.get_command(click.Context(command), token)
            if sub is None:
                return f"`{path}` has no command {token!r}"
            command, path = sub, f"{path} {token}"
    return None


def _make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    targets: set[str] = set()
    for match in re.finditer(r"^([A-Za-z0-9_.$() /-]+?)\s*&?:(?!=)", text, re.MULTILINE):
        targets.update(match.group(1).split())
    return targets


def check_line(command: str) -> list[str]:
    """What is wrong with one runnable line: it parses as shell, its rtjob commands and make targets exist."""
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError as exc:
        return [f"does not parse as shell ({exc})"]
    problems = []
    for segment in _segments(tokens):
        while segment and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", segment[0]):
            segment = segment[1:]  # NAME=VALUE before the command
        if not segment:
            continue
        program = Path(segment[0]).name
        if program == "rtjob":
            problem = check_rtjob(segment[1:])
            if problem:
                problems.append(problem)
        elif program == "make":
            targets = [t for t in segment[1:] if not t.startswith("-") and "=" not in t]
            problems += [f"the Makefile has no target {t!r}" for t in targets if t not in _make_targets()]
    return problems


def test_every_runnable_command_names_real_commands_and_options() -> None:
    found, problems = 0, []
    for page in PAGES:
        for number, command in _console_lines(page):
            found += 1
            problems += [f"{_rel(page)}:{number}: {command!r}: {p}" for p in check_line(command)]
    assert not problems, "\n".join(problems)
    assert found >= 30, f"only {found} runnable commands found: the ```console marker is not being read"


@pytest.mark.parametrize("command,problem", [
    ("rtjob submitt ddp-resnet", "`rtjob` has no command 'submitt'"),
    ("rtjob submit ddp-resnet --nodez 2", "`rtjob submit` has no option --nodez"),
    ("rtjob local upp", "`rtjob local` has no command 'upp'"),
    ('eval "$(rtjob local envv)"', "`rtjob local` has no command 'envv'"),
    ("rtjob list | rtjob statu ID", "`rtjob` has no command 'statu'"),
    ("NO_COLOR=1 rtjob list --colour", "`rtjob list` has no option --colour"),
    ("rtjob render x --output=jsn; rtjob validat", "`rtjob` has no command 'validat'"),
    ("make tesst", "the Makefile has no target 'tesst'"),
    ("rtjob submit 'unclosed", "does not parse as shell"),
])
def test_the_command_check_catches(command: str, problem: str) -> None:
    assert any(p.startswith(problem) for p in check_line(command)), check_line(command)


def test_the_command_check_passes_real_commands() -> None:
    for command in ["rtjob submit ddp-resnet --nodes 2 --set args.epochs=5 --env A=1 --no-wait",
                    'eval "$(rtjob local env)"', "rtjob list --output=json | cut -f1",
                    "RTJOB_UI_TOKEN=x rtjob ui --host 0.0.0.0", "rtjob schema > job.schema.json",
                    "make test-unit UNIT_SEED=7", "rtjob --version"]:
        assert check_line(command) == [], command


# -- links ----------------------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!\!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link inside one is code, not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = _prose(path.read_text(encoding="utf-8"))
    found = {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}
    return found | set(re.findall(r'<a id="([^"]+)"', text))


def _links(path: Path) -> Iterator[str]:
    for match in LINK.finditer(_prose(path.read_text(encoding="utf-8"))):
        yield match.group(1) or match.group(2)


def test_every_relative_link_resolves() -> None:
    problems = []
    for page in PAGES:
        for target in _links(page):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            if not dest.exists():
                problems.append(f"{_rel(page)}: {target}: no such file")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                problems.append(f"{_rel(page)}: {target}: no heading or <a id> {anchor!r} in {_rel(dest)}")
    assert not problems, "\n".join(problems)


def test_readme_is_a_landing_page_that_links_every_docs_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (a landing page: ≤ {README_MAX_LINES})"
    linked = {(REPO / t.partition("#")[0]).resolve() for t in _links(README) if not re.match(r"[a-z]+:", t)}
    unlinked = [_rel(p) for p in DOCS.rglob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"README.md links no {unlinked}"
    assert lines[0] == "# rtjob" and "make demo" in "\n".join(lines[:12]) and "make test" in "\n".join(lines[:12])


# -- the exit-code table --------------------------------------------------------------------------------------

def test_the_exit_code_table_lists_every_code() -> None:
    table = (DOCS / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    rows = {int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", table, re.MULTILINE)}
    codes = {value for name, value in vars(errors).items() if name.startswith("EXIT_") and isinstance(value, int)}
    assert rows == codes, f"docs/reference/exit-codes.md lists {sorted(rows)}; core/errors.py has {sorted(codes)}"


# -- environment variables ------------------------------------------------------------------------------------

def test_the_environment_page_names_every_contract_variable_and_no_other() -> None:
    import rtjob_contract

    page = (DOCS / "reference" / "environment.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`(RTJOB_[A-Z0-9_]+)`", page))
    assert not rtjob_contract.ENV_NAMES - named, f"environment.md lacks {sorted(rtjob_contract.ENV_NAMES - named)}"
    source = "\n".join(p.read_text(encoding="utf-8") for folder in ("cli", "rtjob_contract", "training")
                       for p in (REPO / folder).rglob("*.py"))
    phantom = sorted(name for name in named if name not in source)
    assert not phantom, f"environment.md names variables no code reads or sets: {phantom}"
