"""`check` makes the fixes of findings on the index on LibCST's tree of just the statements that hold them
(``torchlint.fix.rewrites``); JSON, the server and `fix` make them on the whole file's tree. The two must agree
on every finding's message (a refused fix says why) and fix availability (``[*]``)."""

from __future__ import annotations

import textwrap

import pytest

from fixture_support import FIXTURES, apply_edits
from torchlint.config import Settings
from torchlint.engine import lint_source
from torchlint.registry import all_rules

SAMPLES = sorted(p for p in FIXTURES.rglob("*.py") if not p.name.endswith(".fixed.py"))
RULES = [rule() for rule in all_rules()]


def _answers(source: str, with_edits: bool, rules=RULES):
    diagnostics = lint_source(source, "sample.py", rules, Settings(), with_edits=with_edits).diagnostics
    return [(d.code, d.line, d.column, d.end_line, d.end_column, d.message, d.fix) for d in diagnostics]


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_statements_answer_as_the_whole_file(path):
    source = path.read_text(encoding="utf-8")
    assert _answers(source, with_edits=False) == _answers(source, with_edits=True)


def test_statement_parse_sees_imports_decorators_and_shared_lines(monkeypatch):
    from torchlint.fix import rewrites

    seen = []
    real = rewrites.trusted_parse
    monkeypatch.setattr(rewrites, "trusted_parse", lambda text: seen.append(text) or real(text))
    source = textwrap.dedent(
        """\
        import numpy as np
        import torch as t

        def unrelated():
            return 1

        @t.no_grad()
        def load(a):
            return t.tensor(np.zeros(3))

        x = 1; y = t.tensor(np.ones(2))
        """
    )
    answers = _answers(source, with_edits=False)
    assert [a[0] for a in answers] == ["TL104", "TL104"] and all(a[6] is not None for a in answers)
    # each call's line of statements under the headers around it, decorators included
    assert seen == ["import numpy as np\nimport torch as t\n@t.no_grad()\ndef load(a):\n"
                    "    return t.tensor(np.zeros(3))\nx = 1; y = t.tensor(np.ones(2))\n"]
    assert answers == _answers(source, with_edits=True)


def test_a_calls_statement_is_parsed_under_its_headers_and_fixed_in_place(monkeypatch, tmp_path):
    """A rewrite that reads only its call (``Rewrite.reads``) lets `check` and `fix` parse the call's
    statement and the headers of the blocks around it; `fix` carries the changed statement back into its
    lines of the file."""
    from torchlint.engine import fix_source
    from torchlint.fix import rewrites

    seen = []
    real = rewrites.trusted_parse
    monkeypatch.setattr(rewrites, "trusted_parse", lambda text: seen.append(text) or real(text))
    source = textwrap.dedent(
        """\
        import numpy as np
        import torch

        class Trainer:
            def setup(self, model):
                self.ready = True
                if model is not None:
                    # the table
                    self.table = torch.tensor(np.zeros(3))
                    self.count = 0
                else:
                    self.opt = None

            def other(self):
                return 2
        """
    )
    answers = _answers(source, with_edits=False)
    assert [a[0] for a in answers] == ["TL104"] and answers[0][6] is not None
    assert seen == ["import numpy as np\nimport torch\nclass Trainer:\n    def setup(self, model):\n"
                    "        if model is not None:\n            # the table\n"
                    "            self.table = torch.tensor(np.zeros(3))\n"]
    assert answers == _answers(source, with_edits=True)
    seen.clear()
    fixed = fix_source(source, "sample.py", RULES, Settings(), unsafe=True).source
    assert fixed == source.replace("torch.tensor(np.zeros(3))", "torch.from_numpy(np.zeros(3))")
    assert seen[0] == ("import numpy as np\nimport torch\nclass Trainer:\n    def setup(self, model):\n"
                       "        if model is not None:\n            # the table\n"
                       "            self.table = torch.tensor(np.zeros(3))\n")


def test_a_narrowed_statement_libcst_cannot_parse_falls_back_to_the_top_level_statement(monkeypatch):
    """Where LibCST refuses the statement under its headers, `check` parses the top-level statement, as
    `fix` does (a line of statements starting inside another is grouped with it, so this is a safeguard)."""
    import libcst as cst
    from torchlint.fix import rewrites

    seen = []
    real = rewrites.trusted_parse

    def parse(text):
        seen.append(text)
        if len(seen) == 1:
            raise cst.ParserSyntaxError("refused", lines=[text], raw_line=1, raw_column=0)
        return real(text)

    monkeypatch.setattr(rewrites, "trusted_parse", parse)
    source = "import numpy as np, torch\ndef f():\n    z = (1,\n 2); y = torch.tensor(np.ones(2))\n    return y\n"
    answers = _answers(source, with_edits=False)
    assert [a[0] for a in answers] == ["TL104"] and answers[0][6] is not None
    assert seen[0].endswith("y = torch.tensor(np.ones(2))\n") and seen[1].endswith("    return y\n")

def test_a_line_that_starts_inside_the_statement_before_is_parsed_with_it(monkeypatch):
    """Line 3 starts inside the statement of line 2: alone it is no Python. `check` and `fix` parse the line
    of statements that holds the call, `z = ...; y = ...`, and the fix lands in place."""
    from torchlint.engine import fix_source
    from torchlint.fix import rewrites

    seen = []
    real = rewrites.trusted_parse
    monkeypatch.setattr(rewrites, "trusted_parse", lambda text: seen.append(text) or real(text))
    source = "import numpy as np, torch\nz = (1,\n 2); y = torch.tensor(np.ones(2))\n"
    answers = _answers(source, with_edits=False)
    assert [a[0] for a in answers] == ["TL104"] and answers[0][6] is not None
    fixed = fix_source(source, "sample.py", RULES, Settings(), unsafe=False).source
    assert fixed == source.replace("torch.tensor(", "torch.from_numpy(")
    assert seen == [source, source]


def test_statements_libcst_cannot_parse_alone_fall_back_to_the_file(monkeypatch):
    """Where LibCST refuses both the narrowed statement and the top-level one, the whole file is parsed."""
    import libcst as cst
    from torchlint.engine import fix_source
    from torchlint.fix import rewrites

    calls, seen = [], []
    real_make, real_parse = rewrites.make_rewrites, rewrites.trusted_parse
    monkeypatch.setattr(rewrites, "make_rewrites", lambda *a: calls.append(1) or real_make(*a))  # imported per use

    def parse(text):  # refuses the narrowed statement, then the top-level one, of each run
        seen.append(text)
        if len(seen) <= 2:
            raise cst.ParserSyntaxError("refused", lines=[text], raw_line=1, raw_column=0)
        return real_parse(text)

    monkeypatch.setattr(rewrites, "trusted_parse", parse)
    source = "import numpy as np, torch\ndef f():\n    y = torch.tensor(np.ones(2))\n    return y\n"
    answers = _answers(source, with_edits=False)
    assert [a[0] for a in answers] == ["TL104"] and answers[0][6] is not None and calls == [1]
    assert seen[0] != seen[1] and "return y" in seen[1]
    seen.clear()
    assert fix_source(source, "sample.py", RULES, Settings(), unsafe=False).source == source.replace(
        "torch.tensor(", "torch.from_numpy(")

def test_a_module_rewrite_reads_only_the_statements_it_names(monkeypatch):
    from torchlint.fix import rewrites

    seen = []
    real = rewrites.trusted_parse
    monkeypatch.setattr(rewrites, "trusted_parse", lambda text: seen.append(text) or real(text))
    source = textwrap.dedent(
        """\
        \"\"\"Train.\"\"\"
        import torch
        import torch.nn as nn

        def helper(x):
            return x + 1

        def main():
            model = nn.Linear(8, 8).cuda()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in range(3):
                loss = model(torch.randn(4, 8, device="cuda")).sum()
                loss.backward()
                opt.step()

        if __name__ == "__main__":
            main()
            print("done")
        """
    )
    only = [rule for rule in RULES if rule.code == "TL702"]
    answers = _answers(source, with_edits=False, rules=only)
    assert [a[0] for a in answers] == ["TL702"] and answers[0][6] is not None
    # the fix goes before the `__main__` block's first statement: its header and that statement are enough
    assert seen == ['import torch\nimport torch.nn as nn\nif __name__ == "__main__":\n    main()\n']
    assert answers == _answers(source, with_edits=True, rules=only)


def test_a_rewrite_of_a_def_or_loop_reads_only_its_statement(monkeypatch):
    """TL202's decorator and `with` block are made on LibCST's tree of the def or loop under the headers
    around it (`check`) or of its top-level statement (`fix`), with the imports, the twin found by its place
    among that tree's defs or loops."""
    from torchlint.fix import rewrites

    seen = []
    real = rewrites.trusted_parse
    monkeypatch.setattr(rewrites, "trusted_parse", lambda text: seen.append(text) or real(text))
    source = textwrap.dedent(
        """\
        import torch

        def unrelated(model):
            for batch in range(3):
                model.train()

        class Runner:
            def name(self):
                return "runner"

            def validate(self, model, val_loader):
                model.eval()
                for x, y in val_loader:
                    out = model(x)
        """
    )
    only = [rule for rule in RULES if rule.code == "TL202"]
    answers = _answers(source, with_edits=False, rules=only)
    assert [a[0] for a in answers] == ["TL202"] and answers[0][6] is not None
    assert seen == ["import torch\nclass Runner:\n" + source.split("\n\n")[-1]]
    assert answers == _answers(source, with_edits=True, rules=only)
    fixed = fix_source(source, "sample.py", only, Settings(), unsafe=False).source
    assert "    @torch.no_grad()\n    def validate" in fixed and fixed.count("no_grad") == 1


def test_a_file_whose_first_indent_differs_from_the_statements_is_fixed_on_the_whole_file():
    """LibCST writes a new block (TL202's `with`) with the module's default indent, which it takes from
    the first indented block: the file's (two spaces here), not the loop's own (four)."""
    import ast

    from torchlint.fix import rewrites
    from torchlint.facts.index import index_of

    source = ("import torch\n\ndef unrelated(model):\n  return model\n\n"
              "model.eval()\nfor x, y in val_loader:\n    out = model(x)\n")
    assert rewrites._layout(index_of(ast.parse(source), source)) == ("  ", "\n")
    only = [rule for rule in RULES if rule.code == "TL202"]
    fixed = fix_source(source, "sample.py", only, Settings(), unsafe=False).source
    assert fixed.endswith("model.eval()\nwith torch.no_grad():\n  for x, y in val_loader:\n      out = model(x)\n")


def test_block_twins_are_by_place_and_none_where_the_lists_differ():
    import ast

    import libcst as cst

    from torchlint.fix.analysis import FileAnalysis
    from torchlint.facts.index import AstIndex
    from torchlint.fix.rewrites import _block_twins, _loops

    source = "def f():\n    while x:\n        pass\nasync def g():\n    for p in params:\n        p.add_(1)\n"
    analysis = FileAnalysis(cst.parse_module(source), source)
    index = AstIndex(ast.parse(source), source)
    twins = _block_twins(index.functions, _loops(index), analysis)
    assert [twins[id(node)] for node in index.functions] == [info.node for info in analysis.functions]
    assert [twins[id(node)] for node in _loops(index)] == [info.node for info in analysis.loops]
    assert isinstance(twins[id(_loops(index)[1])], cst.For)
    shorter = _block_twins(index.functions, _loops(index)[:1], analysis)
    assert shorter[id(_loops(index)[0])] is None


# --- files LibCST reads otherwise than CPython ---------------------------------------------------------
from torchlint.engine import fix_source  # noqa: E402

TENSOR = "    return torch.tensor(np.zeros(3))\n"
FROM_NUMPY = "    return torch.from_numpy(np.zeros(3))\n"
# 5,000 adjacent string literals: valid Python that LibCST's parser gives up on
UNPARSABLE = "S = (" + " ".join(['"a"'] * 5000) + ")\n"


def test_a_statement_elsewhere_that_libcst_refuses_leaves_the_findings_and_their_fixes():
    source = "import numpy as np\nimport torch\n" + UNPARSABLE + "def load():\n" + TENSOR
    plain = _answers(source, with_edits=False)
    assert [(a[0], a[6] is not None) for a in plain] == [("TL104", True)]
    # the fix is made and written on the statements' tree: every other byte stays
    outcome = fix_source(source, "sample.py", RULES, Settings(), unsafe=False)
    assert outcome.source == source.replace(TENSOR, FROM_NUMPY) and not outcome.errors
    # JSON's edits, where LibCST refuses the whole file, are made on the statements' tree too: what `fix` writes
    # (issue 27: they were refused with LibCST's reason while `check` offered the fix and `fix` wrote it)
    assert _answers(source, with_edits=True) == plain
    diagnostic, = lint_source(source, "sample.py", RULES, Settings(), with_edits=True).diagnostics
    assert apply_edits(source, diagnostic.edits) == outcome.source


@pytest.mark.parametrize("body", [
    "    x = 1\n  \f" + TENSOR,          # the fixed line's own indentation
    "  \f  x = 1\n  " + TENSOR[4:],     # the block's first line: LibCST repeats its indentation below
])
def test_a_fix_libcst_would_not_write_back_is_refused_in_check_and_fix_alike(body):
    source = "import numpy as np\nimport torch\n\ndef load():\n" + body
    for with_edits in (False, True):
        (code, *_, message, fix), = _answers(source, with_edits=with_edits)
        assert code == "TL104" and fix is None and "form feed" in message
    outcome = fix_source(source, "sample.py", RULES, Settings(), unsafe=True)
    assert outcome.source == source and not outcome.errors
    assert [d.code for d in outcome.remaining] == ["TL104"]


def test_a_fix_elsewhere_in_a_file_with_a_form_feed_is_made():
    other = "def other():\n    a = 1\n\f    b = 2\n    return a\n"  # LibCST writes this block back otherwise
    source = "import numpy as np\nimport torch\n\n" + other + "\ndef load():\n" + TENSOR
    (code, *_, fix), = _answers(source, with_edits=False)
    assert code == "TL104" and fix is not None
    outcome = fix_source(source, "sample.py", RULES, Settings(), unsafe=False)
    assert outcome.source == source.replace(TENSOR, FROM_NUMPY) and not outcome.errors


def test_a_call_in_a_match_case_or_an_else_branch_takes_its_whole_statement(monkeypatch):
    """A `match` has no body of its own and an `else:` branch no header of its own in `ast`: the narrowing
    stops there and takes that statement whole."""
    from torchlint.fix import rewrites

    seen = []
    real = rewrites.trusted_parse
    monkeypatch.setattr(rewrites, "trusted_parse", lambda text: seen.append(text) or real(text))
    source = textwrap.dedent(
        """\
        import numpy as np
        import torch

        def load(kind):
            match kind:
                case "ones":
                    return torch.tensor(np.ones(2))
                case _:
                    pass
            if kind:
                pass
            else:
                return torch.tensor(np.zeros(2))
        """
    )
    answers = _answers(source, with_edits=False)
    assert [a[0] for a in answers] == ["TL104", "TL104"] and all(a[6] is not None for a in answers)
    assert answers == _answers(source, with_edits=True)
    assert seen[0] == "import numpy as np\nimport torch\n" + source.split("\n\n", 1)[1].replace("\n\n", "\n")
