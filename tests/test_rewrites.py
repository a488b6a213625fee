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
    # each statement with the blank lines above it (its leading lines in LibCST's tree)
    assert seen == ["import numpy as np\nimport torch as t\n\n@t.no_grad()\ndef load(a):\n"
                    "    return t.tensor(np.zeros(3))\nx = 1; y = t.tensor(np.ones(2))\n"]
    assert answers == _answers(source, with_edits=True)


def test_a_statement_libcst_cannot_parse_alone_falls_back_to_the_file(monkeypatch):
    from torchlint.fix import rewrites

    calls = []
    real = rewrites.make_rewrites
    monkeypatch.setattr(rewrites, "make_rewrites", lambda *a: calls.append(1) or real(*a))
    import torchlint.engine as engine

    monkeypatch.setattr(engine, "make_rewrites", rewrites.make_rewrites)
    # line 3 starts inside the statement of line 2: alone it is no Python
    source = "import numpy as np, torch\nz = (1,\n 2); y = torch.tensor(np.ones(2))\n"
    answers = _answers(source, with_edits=False)
    assert [a[0] for a in answers] == ["TL104"] and answers[0][6] is not None and calls == [1]


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
        """
    )
    only = [rule for rule in RULES if rule.code == "TL702"]
    answers = _answers(source, with_edits=False, rules=only)
    assert [a[0] for a in answers] == ["TL702"] and answers[0][6] is not None
    assert seen == ['import torch\nimport torch.nn as nn\n\nif __name__ == "__main__":\n    main()\n']
    assert answers == _answers(source, with_edits=True, rules=only)


def test_a_rewrite_of_a_def_or_loop_reads_only_its_statement(monkeypatch):
    """TL202's decorator and `with` block are made on LibCST's tree of the def's or loop's top-level
    statement (with the imports), the twin found by its place among that tree's defs or loops."""
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
            def validate(self, model, val_loader):
                model.eval()
                for x, y in val_loader:
                    out = model(x)
        """
    )
    only = [rule for rule in RULES if rule.code == "TL202"]
    answers = _answers(source, with_edits=False, rules=only)
    assert [a[0] for a in answers] == ["TL202"] and answers[0][6] is not None
    assert seen == ["import torch\n\nclass Runner:\n" + source.split("class Runner:\n")[1]]
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
