"""Deep, long or odd code never crashes or stalls a run: it is checked, or gets one TL000 (issue 15, 1/2/12)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from robustness_support import FINDING, REPO, invoke, torchlint_subprocess, with_finding

from torchlint.config import Settings
from torchlint.run.fileio import decode_source
from torchlint.run.guard import MAX_NESTING, parse_problem
from torchlint.run.runner import Job, process_source


def check_text(text: str):
    return process_source(decode_source(text.encode()), "t.py", Path("t.py"), Job(Settings())).diagnostics


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_code_that_crashes_the_native_parser_is_one_tl000_and_the_run_goes_on(tmp_path, jobs):
    (tmp_path / "ok.py").write_text(with_finding())
    for i in range(3):
        (tmp_path / f"deep{i}.py").write_text(with_finding("x = " + "(" * 3000 + "1" + ")" * 3000))
    proc = torchlint_subprocess(["check", "--no-cache", "--jobs", jobs, "."], tmp_path)
    out = proc.stdout.decode()
    assert proc.returncode == 1, proc.stderr.decode()[-500:]
    assert "ok.py:5:48: TL501" in out
    for i in range(3):
        assert out.count(f"deep{i}.py") == 1 and f"deep{i}.py:2:205: TL000 syntax error: too many nested parentheses" in out


@pytest.mark.parametrize("body", [
    "x = " + " and ".join(["a"] * 8000),
    "x = " + "-" * 10000 + "a",
    "x = a" + ".b" * 10000,
    "x = " + "lambda: " * 10000 + "1",  # CPython itself gives up here: measured on tokens
])
def test_chains_deeper_than_the_limit_are_refused_before_parsing(body):
    problem = parse_problem(with_finding(body))
    assert problem is not None and f"the limit is {MAX_NESTING}" in problem[0] and problem[1] == 2


def test_a_dead_worker_costs_its_file_one_tl000_and_nothing_else(tmp_path):
    for name in ("a", "b", "crash", "c", "d", "e"):
        (tmp_path / f"{name}.py").write_text(with_finding())
    script = textwrap.dedent(f"""
        import os, signal, sys
        from pathlib import Path
        import torchlint.run.runner as runner
        from torchlint.config import Settings
        real = runner._process_source
        def fragile(source, shown, path, job, project):
            if shown.endswith("crash.py"):
                os.kill(os.getpid(), signal.SIGSEGV)  # what a native stack overflow looks like
            return real(source, shown, path, job, project)
        runner._process_source = fragile
        paths = sorted(Path({str(tmp_path)!r}).glob("*.py"))
        for result in runner.run(paths, runner.Job(Settings()), jobs=2):
            print(Path(result.path).name, [d.code for d in result.diagnostics], result.diagnostics[0].message)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-1000:]
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert sorted(lines) == ["a.py", "b.py", "c.py", "crash.py", "d.py", "e.py"]
    assert lines["crash.py"].startswith("['TL000'] torchlint crashed while checking this file")
    assert all(lines[name].startswith("['TL501']") for name in lines if name != "crash.py")


def test_a_500_branch_elif_chain_is_checked():
    chain = "if a:\n    pass\n" + "".join(f"elif a == {i}:\n    pass\n" for i in range(500))
    assert [d.code for d in check_text(with_finding(chain))] == ["TL501"]


def test_a_500_term_sum_is_checked():
    assert [d.code for d in check_text(with_finding("x = " + " + ".join(["a"] * 500)))] == ["TL501"]


def test_valid_code_that_libcst_cannot_parse_is_not_called_a_syntax_error():
    diagnostics = check_text(with_finding("x = (" + " ".join(['"s"'] * 5000) + ")"))
    assert all("syntax error" not in d.message for d in diagnostics)
    # TL501 detects on the index, and `check` makes its fix on LibCST's tree of the finding's statement alone,
    # which LibCST parses: the file keeps its finding and its `[*]` (tests/test_rewrites.py)
    assert [(d.code, d.fix is not None) for d in diagnostics] == [("TL501", True)]


@pytest.mark.parametrize("data, message", [
    (with_finding('s = "a\0b"').encode(), "null bytes"),
    (b"\xef\xbb\xbf" + with_finding("\ufeffx = 1").encode(), "U+FEFF"),
])
def test_what_cpython_rejects_is_a_tl000_and_is_never_fixed(tmp_path, monkeypatch, data, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_bytes(data)
    result = invoke("fix", "--apply", "--no-cache", "bad.py")
    assert "bad.py:2:" in result.output and "TL000" in result.output and message in result.output
    assert (tmp_path / "bad.py").read_bytes() == data


# Issue 27 item 11: CPython is the oracle. Its tokenizer refuses more than 200 open brackets on every version,
# so such a file is a syntax error for torchlint too (it used to be checked and fixed); one level fewer is fine.
@pytest.mark.parametrize("depth", [190, 199, 200, 201, 260])
@pytest.mark.parametrize("brackets", ["()", "[]"])
def test_bracket_depth_is_judged_as_cpython_does(tmp_path, depth, brackets):
    body = "x = " + brackets[0] * depth + ("1" if brackets == "()" else "") + brackets[1] * depth
    source = with_finding(body)
    try:
        compile(source, "deep.py", "exec")
        valid = True
    except SyntaxError:
        valid = False
    path = tmp_path / "deep.py"
    path.write_text(source)
    result = invoke("fix", "--apply", "--no-cache", str(path))
    assert ("TL000 syntax error: too many nested parentheses" in result.output) == (not valid), result.output
    assert (FINDING in path.read_text()) == (not valid)  # rejected code is left alone, valid code is fixed


# Issue 27: valid Python that LibCST refuses as a whole file (a tab or a form feed in an indentation, 5,000
# adjacent strings). The index reports every finding. A fix whose statements LibCST parses alone is offered
# (`[*]`), written by `fix` and given as edits in JSON alike: the edits are what `fix` writes. Where it cannot
# be made, it is unavailable with LibCST's reason in the finding, in every format, and the file is left alone.
TAB_INDENT = (
    "import torch\n\n\ndef evaluate(model, loader):\n    model.eval()\n    for batch in loader:\n"
    "        with torch.no_grad():\n\t        total = model(batch)\n    return total\n\n\n"
    "def train(model, loader, opt):\n    for x, y in loader:\n        opt.zero_grad(set_to_none=False)\n"
    "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n\n\n"
    "def score(model, loader):\n    model.eval()\n    return [model(x) for x in loader]\n\n\n"
    "def build(model):\n    " + FINDING + "\n    return opt\n")
FORM_FEED = ("import torch\n\n\ndef train(model, loader, opt):\n    for x, y in loader:\n"
             "\x0c        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n\n\n"
             "def build(model):\n    " + FINDING + "\n    return opt\n")
ADJACENT_STRINGS = with_finding("x = (" + " ".join(['"s"'] * 5000) + ")")


def _libcst_refuses(source: str) -> bool:
    import libcst

    compile(source, "t.py", "exec")  # valid Python
    try:
        libcst.parse_module(source)
    except Exception:
        return True
    return False


def _json_report(*args: str) -> list:
    import json

    return json.loads(invoke("check", "--no-cache", "--output-format", "json", *args).output)


@pytest.mark.parametrize("source", [TAB_INDENT, ADJACENT_STRINGS], ids=["tab in an indentation", "5,000 strings"])
def test_json_gives_the_fixes_fix_writes_where_libcst_refuses_the_file(tmp_path, monkeypatch, source):
    from fixture_support import apply_edits
    from torchlint.rule import Edit

    assert _libcst_refuses(source)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_text(source)
    report = _json_report("--unsafe-fixes", "t.py")
    fixable = [d for d in report if d["fix"]]
    assert fixable and len(fixable) == len(report)
    assert invoke("check", "--no-cache", "--unsafe-fixes", "t.py").output.count("[*]") == len(fixable)
    edits = [Edit(e["location"]["line"], e["location"]["column"], e["end_location"]["line"],
                  e["end_location"]["column"], e["content"]) for d in fixable for e in d["fix"]["edits"]]
    invoke("fix", "--apply", "--unsafe-fixes", "--no-cache", "t.py")
    fixed = (tmp_path / "t.py").read_text()
    assert fixed != source and apply_edits(source, edits) == fixed


def test_where_no_fix_can_be_made_every_format_says_why_and_the_file_is_kept(tmp_path, monkeypatch):
    assert _libcst_refuses(FORM_FEED)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.py").write_bytes(FORM_FEED.encode())
    why = "LibCST, which writes the fixes, cannot parse this file (line "
    [finding] = _json_report("t.py")
    assert finding["code"] == "TL501" and finding["fix"] is None and why in finding["message"]
    text = invoke("check", "--no-cache", "t.py").output
    assert "t.py:12:48: TL501 `Adam" in text and why in text and "[*]" not in text
    invoke("fix", "--apply", "--unsafe-fixes", "--no-cache", "t.py")
    assert (tmp_path / "t.py").read_bytes() == FORM_FEED.encode()
