"""The docs' commands parse: every `rmjudge`, `rmjudge-train` and `rmjudge-export` command line
in README.md and docs/*.md (code blocks and inline code) is resolved to its click command and
run through click's parser, without executing it. Placeholders (FILE, ORG/NAME, ...) are fine as
values; an unknown option, a missing option value, an unknown subcommand, a surplus argument or a
value outside a choice fails. Each docs page with measured figures names the rmjudge version
they were measured on."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from rmjudge.cli import main as rmjudge_main
from rmjudge.quantize.cli import main as export_main
from rmjudge.training.cli import main as train_main

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

PROGRAMS = {
    "rmjudge": rmjudge_main,
    "rmjudge-train": train_main,
    "rmjudge-export": export_main,
    "python -m rmjudge": rmjudge_main,
    "python -m rmjudge.training": train_main,
    "python -m rmjudge.quantize": export_main,
}
_PROGRAM = re.compile(r"(?:^|\s)(" + "|".join(re.escape(p) for p in sorted(PROGRAMS, key=len,
                                                                          reverse=True))
                      + r")(?=\s|$)")
# shell operators that end one command line
_SEPARATOR = re.compile(r"\s(?:&&|\|\||\||;)\s|\s*;\s*$|\)")
_FENCE = re.compile(r"^```(\S*)\s*$")
_INLINE = re.compile(r"`([^`\n]+)`")
# a placeholder or elision stands for any number of values
_ELISION = {"...", "…"}


def _code(text: str) -> list[tuple[int, str, bool]]:
    """(line number, command text, inline) for each shell line in a fenced block (continuations joined)
    and each inline code span."""
    out: list[tuple[int, str, bool]] = []
    fence = None
    pending, start = "", 0
    for n, line in enumerate(text.splitlines(), 1):
        m = _FENCE.match(line.strip())
        if m:
            fence = None if fence is not None else m.group(1)
            continue
        if fence is not None:
            if fence not in ("", "bash", "sh", "shell", "console"):
                continue
            stripped = line.strip()
            stripped = stripped.removeprefix("$ ")
            if not pending:
                start = n
            if stripped.endswith("\\"):
                pending += stripped[:-1] + " "
                continue
            out.append((start, pending + stripped, False))
            pending = ""
        else:
            out.extend((n, m.group(1), True) for m in _INLINE.finditer(line))
    return out


def _strip_comment(line: str) -> str:
    """Drop a shell comment: a `#` that starts a word outside quotes."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i]
    return line


def commands(text: str) -> list[tuple[int, str, list[str], bool]]:
    """(line, program, args, inline) for every command line of the three programs in a markdown
    text."""
    found = []
    for n, code, inline in _code(text):
        code = _strip_comment(code)
        for m in _PROGRAM.finditer(code):
            rest = _SEPARATOR.split(code[m.end():], maxsplit=1)[0]
            rest = re.split(r"\s[12]?>{1,2}\s*\S+", rest)[0]  # redirections
            try:
                args = shlex.split(rest)
            except ValueError:  # an unbalanced quote: the span is prose, not a command
                continue
            found.append((n, m.group(1), args, inline))
    return found


def _choice_ok(param: click.Parameter, value: str) -> bool:
    if not isinstance(param.type, click.Choice) or not value.islower() or "|" in value:
        return True  # placeholders (upper case, `a|b|c`) stand for any value
    return value in param.type.choices


def check(program: str, args: list[str], inline: bool = False) -> None:
    """Raise click.UsageError (or a subclass) when `args` would not parse."""
    cmd: click.Command = PROGRAMS[program]
    name = program
    while isinstance(cmd, click.Group):
        if not args or args[0] in ("--help", "-h", "--version"):
            return
        if args[0].startswith("-"):
            raise click.NoSuchOption(args[0])
        sub = cmd.get_command(click.Context(cmd), args[0])
        if sub is None:
            raise click.UsageError(f"no such command {args[0]!r} in {name}")
        name, cmd, args = f"{name} {args[0]}", sub, args[1:]
    if "--help" in args:
        args = [a for a in args if a != "--help"]
    # `[--opt VALUE]` in a synopsis is the option itself
    args = [a.strip("[]") if a.startswith("[-") or a.endswith("]") else a for a in args]
    args = [a for a in args if a]
    ctx = click.Context(cmd, info_name=name, resilient_parsing=False)
    try:
        values, positional, order = cmd.make_parser(ctx).parse_args(args=list(args))
    except click.BadOptionUsage:
        if not (inline and args and args[-1].startswith("-")):
            raise
        # inline prose names an option without its value: `rmjudge score --model`
        values, positional, order = cmd.make_parser(ctx).parse_args(args=[*args, "VALUE"])
    for param in order:
        value = values.get(param.name)
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str) and not _choice_ok(param, v):
                raise click.BadParameter(f"{v!r} is not one of {param.type.choices}",
                                         param=param)
    if any(a in _ELISION for a in positional + args):
        return
    if positional and not ctx.allow_extra_args:  # what the declared arguments left over
        raise click.UsageError(f"{name}: unexpected extra argument(s) {positional}")


def _cases():
    for page in PAGES:
        for n, program, args, inline in commands(page.read_text()):
            yield pytest.param(program, args, inline, id=f"{page.relative_to(ROOT)}:{n}")


CASES = list(_cases())


def test_the_docs_hold_commands_of_each_program():
    programs = {c.values[0].split()[-1] for c in CASES}
    assert {"rmjudge", "rmjudge-train", "rmjudge-export"} <= programs, programs
    assert len(CASES) > 100


@pytest.mark.parametrize("program,args,inline", CASES)
def test_docs_command_parses(program, args, inline):
    try:
        check(program, args, inline)
    except click.ClickException as exc:
        pytest.fail(f"{program} {shlex.join(args)}: {exc.format_message()}")


# -- the check itself ------------------------------------------------------------------------

SAMPLE = """\
Score it:

```bash
HF_HUB_OFFLINE=1 rmjudge score pairs.jsonl -o out.duckdb --samples 2 \\
  --max-tokens 16   # a comment
rmjudge eval out.duckdb && rmjudge filter out.duckdb -o dpo.jsonl --format kto | head
```

```python
rmjudge.score("not a command")
```

Then `rmjudge-train sft pairs.jsonl -o runs/warm` and `python -m rmjudge.quantize quantize SRC -o OUT`.
"""


def test_commands_are_extracted_from_blocks_inline_code_and_continuations():
    got = [(program, args) for _, program, args, _ in commands(SAMPLE)]
    assert got == [
        ("rmjudge", ["score", "pairs.jsonl", "-o", "out.duckdb", "--samples", "2",
                     "--max-tokens", "16"]),
        ("rmjudge", ["eval", "out.duckdb"]),
        ("rmjudge", ["filter", "out.duckdb", "-o", "dpo.jsonl", "--format", "kto"]),
        ("rmjudge-train", ["sft", "pairs.jsonl", "-o", "runs/warm"]),
        ("python -m rmjudge.quantize", ["quantize", "SRC", "-o", "OUT"]),
    ]
    for program, args in got:
        check(program, args)


@pytest.mark.parametrize("program,line", [
    ("rmjudge", "score pairs.jsonl --no-such-option"),
    ("rmjudge", "score pairs.jsonl --samples"),
    ("rmjudge", "filter X.duckdb -o out.jsonl --format parquet-ish"),
    ("rmjudge", "eval X.duckdb Y.duckdb"),
    ("rmjudge", "no-such-command FILE"),
    ("rmjudge", "--no-such-flag"),
    ("rmjudge-train", "sft pairs.jsonl -o runs/warm --epochz 2"),
    ("rmjudge-export", "quantize SRC -o OUT --type q4_k_m --bogus"),
    ("rmjudge-export", "quantize SRC -o OUT --type q3_xs"),
])
def test_a_bad_command_fails_the_check(program, line):
    with pytest.raises(click.UsageError):
        check(program, shlex.split(line))


def test_a_page_with_a_bad_option_fails():
    page = "Run `rmjudge score pairs.jsonl --samplez 4`.\n"
    ((_, program, args, inline),) = commands(page)
    with pytest.raises(click.NoSuchOption):
        check(program, args, inline)


# -- versions of measured figures ------------------------------------------------------------

# a rate, a duration, a memory size, a percentage with decimals or a confidence interval
_FIGURE = re.compile(r"tok/s|pairs/s|rows/s|\b\d+(?:\.\d+)? ?(?:s|min|MB|MiB|GB)\b"
                     r"|\d+\.\d+%|\[[-+]?\d+\.\d+, [-+]?\d+\.\d+\]")
_MEASURED_ON = re.compile(r"[Mm]easured on rmjudge \d+\.\d+")
_LEAD = 25  # lines before a table where its "measured on rmjudge X.Y" is looked for


def unversioned(text: str) -> list[str]:
    """What in a markdown page holds measured figures without the version they were measured
    on: each table of figures needs "measured on rmjudge X.Y" in the lines before it, and a
    page with figures in its prose needs one somewhere (code blocks are left out)."""
    lines = text.splitlines()
    missing, i = [], 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("|"):
            i += 1
            continue
        j = i
        while j < len(lines) and lines[j].lstrip().startswith("|"):
            j += 1
        if _FIGURE.search("\n".join(lines[i:j])) \
                and not _MEASURED_ON.search("\n".join(lines[max(0, i - _LEAD):i])):
            missing.append(f"line {i + 1}: table {lines[i][:60]!r}")
        i = j
    prose = re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)
    if _FIGURE.search(prose) and not _MEASURED_ON.search(text):
        missing.append(f"prose figure {_FIGURE.search(prose).group(0)!r}")
    return missing


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_measured_figures_name_their_version(page):
    missing = unversioned(page.read_text())
    assert not missing, (f"{page.name}: measured figures without 'measured on rmjudge X.Y' "
                         "(and the command) before them:\n" + "\n".join(missing))


def test_an_unversioned_table_of_figures_is_found():
    table = "| threads | gen tok/s |\n|---|---|\n| 2 | 67.1 |\n"
    assert unversioned("Two threads:\n\n" + table)
    assert not unversioned("Measured on rmjudge 0.4.0 with `rmjudge score x.jsonl`:\n\n" + table)
    assert not unversioned("| option | meaning |\n|---|---|\n| `--samples N` | rollouts |\n")
    assert unversioned("It took 3.5 s.\n")


# -- links ----------------------------------------------------------------------------------

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_CODE_BLOCK = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = _CODE_BLOCK.sub("", page.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    """Relative links of a page whose file or section does not exist."""
    bad = []
    for m in _LINK.finditer(_CODE_BLOCK.sub("", page.read_text())):
        link = m.group(1)
        if re.match(r"[a-z]+:", link):
            continue
        path, _, fragment = link.partition("#")
        target = (page.parent / path).resolve() if path else page.resolve()
        if not target.exists():
            bad.append(f"{link}: no such file")
        elif fragment and target.suffix == ".md" and fragment not in _anchors(target):
            bad.append(f"{link}: no such section")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_reach_their_file_and_section(page):
    assert not broken_links(page), f"{page.name}: " + ", ".join(broken_links(page))


def test_a_link_to_a_moved_section_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n## Inputs\n\nsee [b](b.md#gone) and [c](c.md)\n")
    (tmp_path / "b.md").write_text("# B\n\n## Still here\n")
    assert broken_links(tmp_path / "a.md") == ["b.md#gone: no such section", "c.md: no such file"]
    (tmp_path / "a.md").write_text("[b](b.md#still-here) [self](#inputs)\n\n## Inputs\n")
    assert broken_links(tmp_path / "a.md") == []


# -- install hints -----------------------------------------------------------------------------

_INDEX_INSTALL = re.compile(r"pip install [^\n`]*rmjudge\[")


def test_install_hints_say_one_thing():
    """rmjudge is installed from its clone (`pip install '.[hub]'`), not from a package index:
    no page, message or help text tells users to `pip install 'rmjudge[...]'`."""
    sources = [*PAGES, *sorted((ROOT / "rmjudge").rglob("*.py")),
               *sorted((ROOT / "training").rglob("*.py")),
               *sorted((ROOT / "quantize").rglob("*.py"))]
    found = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in sources
             for m in _INDEX_INSTALL.finditer(path.read_text())]
    assert not found, "\n".join(found)


def test_the_install_hint_names_the_clone():
    from rmjudge.core.extras import install_hint

    assert install_hint("hub") == "pip install '.[hub]' in the rmjudge clone"


def test_help_names_kto_and_every_input_form():
    from click.testing import CliRunner

    r = CliRunner().invoke(rmjudge_main, ["score", "--help"])
    assert r.exit_code == 0 and "hf://datasets/" in r.output and "glob" in r.output \
        and "folder" in r.output
    r = CliRunner().invoke(rmjudge_main, ["--help"])
    assert r.exit_code == 0 and "KTO" in r.output
