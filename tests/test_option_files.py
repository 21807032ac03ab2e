"""Files named by options (`--criteria @FILE`, `--prompt-template`, `--chat-template`) and the
templates' renderings are bounded: a device, a FIFO or a huge file is one `Error:` line before
anything is read, and a template that multiplies its text is refused before it fills memory
(docs/scoring.md, "Criteria and prompt templates").

Every command runs under a 4 GiB address-space limit and a timeout, so an unbounded read or
render fails the test quickly instead of exhausting the machine."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from rmjudge.engine.chat import ChatTemplate, TemplateError, sandbox_environment
from rmjudge.prompts.render_limit import RenderTooLarge, render_bounded
from rmjudge.core.errors import EXIT_USER
from rmjudge.io.textfile import TEXT_FILE_LIMIT, read_text_file
from rmjudge.prompts.criteria import CriteriaError
from rmjudge.prompts.template import PromptTemplateError

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).parent / "data"
MEMORY = 4 << 30

GOOD_TEMPLATE = """{% if task == "pref" %}Which answer is better?
Q: {{ context }}
A1: {{ response1 }}
A2: {{ response2 }}
{{ answer_format }}{% else %}Which critique is better?
Q: {{ context }}
A1: {{ response1 }}
A2: {{ response2 }}
Critique 1: {{ critique1 }}
Critique 2: {{ critique2 }}
{{ answer_format }}{% endif %}"""
MULTIPLYING = "{{ context * 100000000 }}" + GOOD_TEMPLATE


def _bounded() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def rmjudge(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rmjudge", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, preexec_fn=_bounded)


def one_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == EXIT_USER, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    return errors[0]


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe.jinja"
    os.mkfifo(path)
    return path


@pytest.fixture
def sparse(tmp_path):
    """An 8 GiB file that takes no disk space (all a hole)."""
    path = tmp_path / "huge.txt"
    with open(path, "wb") as f:
        f.truncate(8 << 30)
    return path


def score(tmp_path, *options):
    # a model that does not exist: every refusal comes before any load is tried
    return rmjudge("score", DATA / "pandalm_5.jsonl", "-o", tmp_path / "o.duckdb", "--model",
                   tmp_path / "missing.gguf", *options)


def test_criteria_from_dev_zero_is_one_error_line(tmp_path):
    line = one_error(score(tmp_path, "--criteria", "@/dev/zero"))
    assert line.startswith("Error: --criteria @/dev/zero: /dev/zero is not a regular file "
                           "(a character device); give a readable UTF-8 text file of at most "
                           "1 MiB"), line
    assert not (tmp_path / "o.duckdb").exists()


def test_a_fifo_prompt_template_is_refused_without_waiting_for_a_writer(tmp_path, fifo):
    line = one_error(score(tmp_path, "--prompt-template", fifo))
    assert line.startswith(f"Error: --prompt-template {fifo}: {fifo} is not a regular file "
                           "(a FIFO); give a readable UTF-8 Jinja2 file of at most 1 MiB"), line


def test_a_huge_sparse_criteria_file_is_refused_by_its_size(tmp_path, sparse):
    line = one_error(score(tmp_path, "--criteria", f"@{sparse}"))
    assert f"{sparse} is 8 GiB, over the 1 MiB limit of this option" in line, line


def test_a_huge_sparse_chat_template_is_refused_before_the_server_is_asked(tmp_path, sparse):
    # the port is never contacted: the file is checked first
    line = one_error(score(tmp_path, "--server", "http://127.0.0.1:9/v1", "--chat-template",
                           sparse))
    assert line.startswith(f"Error: --chat-template {sparse}: {sparse} is 8 GiB, over the "
                           "1 MiB limit of this option; give a readable UTF-8 Jinja2 file"), line


def test_a_multiplying_prompt_template_is_refused_before_it_fills_memory(tmp_path):
    f = tmp_path / "t.jinja"
    f.write_text(MULTIPLYING)
    line = one_error(score(tmp_path, "--prompt-template", f))
    assert line.startswith(f"Error: --prompt-template {f} renders a prompt too large (the "
                           "operator * would make "), line
    assert "over the limit of" in line and "see docs/scoring.md" in line, line


def test_a_multiplying_chat_template_is_refused(tmp_path):
    f = tmp_path / "chat.jinja"
    f.write_text("{% for m in messages %}{{ m.content * 100000000 }}{% endfor %}")
    line = one_error(score(tmp_path, "--server", "http://127.0.0.1:9/v1", "--chat-template", f))
    assert line.startswith(f"Error: --chat-template {f} renders a prompt too large"), line


# -- the reader and the renderer, in-process -----------------------------------------------

def test_the_reader_takes_a_file_at_the_limit_and_refuses_one_byte_more(tmp_path):
    f = tmp_path / "c.txt"
    f.write_bytes(b"a" * TEXT_FILE_LIMIT)
    assert len(read_text_file(str(f), "--criteria @c", "fix")) == TEXT_FILE_LIMIT
    f.write_bytes(b"a" * (TEXT_FILE_LIMIT + 1))
    with pytest.raises(CriteriaError, match=r"over the 1 MiB limit"):
        read_text_file(str(f), "--criteria @c", "fix", CriteriaError)


def test_the_reader_keeps_the_text_as_a_text_file_reads_it(tmp_path):
    f = tmp_path / "c.txt"
    f.write_bytes("R\u00e9ponse\r\nline two\rthree\n".encode())
    with open(f, encoding="utf-8") as fh:
        assert read_text_file(str(f), "x", "y") == fh.read()
    f.write_bytes(b"\xff\xfe")
    with pytest.raises(PromptTemplateError, match=r"^--prompt-template t: cannot read .* \(not "
                                                  r"UTF-8 text"):
        read_text_file(str(f), "--prompt-template t", "fix", PromptTemplateError)


def test_the_library_refuses_a_device_as_criteria():
    code = ("from rmjudge.prompts import prompt_style\n"
            "from rmjudge.prompts.criteria import CriteriaError\n"
            "try:\n    prompt_style('@/dev/zero')\n"
            "except CriteriaError as exc:\n    print(exc)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60, preexec_fn=_bounded)  # in a child: bounded even if it reads
    assert r.stdout.startswith("--criteria @/dev/zero: /dev/zero is not a regular file (a "
                               "character device)"), r.stdout + r.stderr


# Each would build at most about 150 MB without the limit (so the test stays cheap either way),
# far over the limit of a 14-character text (4 x 14 + 1 MiB).
HOSTILE = [
    "{{ context * 10000000 }}",
    "{{ 10000000 * [context] }}",
    "{{ context.ljust(10**8) }}",
    "{{ '{:>99999999}'.format(1) }}",
    "{{ '%099999999d' % 1 }}",
    "{{ context|center(100000000) }}",
    "{{ ([context] * 1000)|join(context * 1000) }}",
    "{{ 2 ** 100000000 }}",
    "{% set ns = namespace(s=context) %}{% for i in range(22) %}{% set ns.s = ns.s ~ ns.s %}"
    "{% endfor %}{{ ns.s|length }}",
    "{% for i in range(3000) %}{% for j in range(3000) %}{{ context }}{% endfor %}{% endfor %}",
    "{% set x %}{% for i in range(200) %}{% for j in range(200) %}{% for k in range(200) %}"
    "{{ context }}{% endfor %}{% endfor %}{% endfor %}{% endset %}{{ x|length }}",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_rendering_that_would_pass_its_limit_stops_early(text):
    with pytest.raises(RenderTooLarge):
        render_bounded(sandbox_environment().from_string(text), context="a conversation")


def test_ordinary_templates_render_as_jinja2_renders_them():
    import jinja2.sandbox

    vars = dict(task="refl", context="Q" * 5000, response1="a" * 9000, response2="b",
                critique1="c", critique2="d", answer_format="fmt")
    plain = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    text = (GOOD_TEMPLATE + "{{ '-' * 40 }}{% for i in range(3) %}{{ i }}{% endfor %}"
            "{{ [1, 2]|join(', ') }}{{ 'x'.ljust(5) }}|{{ '%5s' % 'y' }}"
            "{{ response1|replace('a', 'aa') }}{% set ns = namespace(n=context) %}{{ ns.n }}")
    assert render_bounded(sandbox_environment().from_string(text), **vars) == \
        plain.from_string(text).render(**vars)


def test_a_long_prompt_within_the_factor_renders():
    """The limit grows with the data: a template showing a 2 MB response twice renders."""
    t = sandbox_environment().from_string("{{ response1 }}{{ response1 }}")
    assert len(render_bounded(t, response1="r" * (2 << 20))) == 4 << 20


def test_a_chat_template_too_large_for_a_prompt_is_its_one_line_error():
    chat = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", origin="the chat "
                        "template of x.gguf", fix="use another GGUF")
    assert chat.render([{"role": "user", "content": "hi"}]) == "hi"
    chat = ChatTemplate("{% for m in messages %}{{ m.content }}{% if m.content|length > 100 %}"
                        "{{ m.content * 10000 }}{% endif %}{% endfor %}",
                        origin="the chat template of x.gguf", fix="use another GGUF")
    with pytest.raises(TemplateError, match=r"^the chat template of x.gguf renders a prompt too "
                                            r"large \(.*\); use another GGUF$"):
        chat.render([{"role": "user", "content": "z" * 1000}])
