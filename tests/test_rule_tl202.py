"""TL202 eval-without-no-grad: aliases, callers, generators and the fix's shape."""

from __future__ import annotations

import textwrap

import pytest

from fixture_support import fix, lint
from torchlint.rule import Applicability


def _src(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


EVALUATE = """
def evaluate(model, val_loader):
    model.eval()
    return [model(x) for x, _ in val_loader]
"""


def test_decorator_uses_the_file_alias():
    source = _src("import torch as t\n" + EVALUATE)
    fixed = fix(source, "TL202", unsafe=False)
    assert "@t.no_grad()\ndef evaluate" in fixed and "import torch\n" not in fixed


def test_decorator_adds_import_torch_when_missing():
    source = _src("from torch import nn\n" + EVALUATE)
    [d] = lint(source, "TL202")
    assert d.fix is Applicability.SAFE
    fixed = fix(source, "TL202")
    assert "import torch\n" in fixed and "@torch.no_grad()\ndef evaluate" in fixed


def test_decorator_is_innermost():
    source = _src("""
        import torch
        class Runner:
            @staticmethod
            # keep me
            def evaluate(model, val_loader):
                model.eval()
                return [model(x) for x, _ in val_loader]
        """)
    assert "    @staticmethod\n    @torch.no_grad()\n    # keep me\n    def evaluate" in fix(source, "TL202")


def test_called_under_no_grad_is_silent():
    for caller in ("with torch.no_grad():\n    evaluate(m, l)\n",
                   "@torch.inference_mode()\ndef run(m, l):\n    return evaluate(m, l)\n",
                   "evaluate = torch.no_grad()(evaluate)\n"):
        assert lint(_src("import torch\n" + EVALUATE) + caller, "TL202") == [], caller


def test_global_set_grad_enabled_false_is_silent():
    source = _src("import torch\ntorch.set_grad_enabled(False)\n" + EVALUATE)
    assert lint(source, "TL202") == []


def test_output_used_by_a_training_step_is_silent():
    source = _src("""
        import torch
        def predict(model, x):
            return model(x)
        def train_step(model, x, y, opt):
            loss = (predict(model, x) - y).pow(2).mean()
            loss.backward()
            opt.step()
        """)
    assert lint(source, "TL202") == []


def test_method_named_predict_needs_more_than_its_name():
    source = _src("""
        import torch
        class Wrapper:
            def predict(self, x):
                return self.model(x)
        """)
    assert lint(source, "TL202") == []
    assert len(lint(source.replace("return self.model", "self.model.eval()\n        return self.model"), "TL202")) == 1


def test_loop_after_train_mode_is_silent():
    source = _src("""
        import torch
        def main(model, val_loader):
            model.eval()
            model.train()
            for x in val_loader:
                model(x)
        """)
    assert lint(source, "TL202") == []


def test_loop_wrap_keeps_comments_and_indentation():
    source = _src("""
        import torch
        def fit(model, train_loader, val_loader, opt):
            for x in train_loader:
                model(x).sum().backward()
                opt.step()
            model.eval()

            # validation
            for x in val_loader:
                if x is None:
                    continue
                model(x)  # forward
        """)
    expected = _src("""
        import torch
        def fit(model, train_loader, val_loader, opt):
            for x in train_loader:
                model(x).sum().backward()
                opt.step()
            model.eval()

            # validation
            with torch.no_grad():
                for x in val_loader:
                    if x is None:
                        continue
                    model(x)  # forward
        """)
    assert fix(source, "TL202", unsafe=False) == expected


def test_nested_function_reported_once():
    source = _src("""
        import torch
        def evaluate(model, val_loader):
            model.eval()
            def predict(x):
                return model(x)
            return [predict(x) for x in val_loader] + [model(x) for x in val_loader]
        """)
    assert [d.line for d in lint(source, "TL202")] == [2]


def test_generators_depend_on_torch_version():
    source = _src("""
        import torch
        def evaluate(model, val_loader):
            model.eval()
            for x in val_loader:
                yield model(x)
        """)
    [new] = lint(source, "TL202")
    assert new.fix is Applicability.SAFE
    [old] = lint("# torchlint-fixture: torch-version=1.13\n" + source, "TL202")
    assert old.fix is None and "PyTorch 2.0" in old.message


def test_loop_that_yields_is_report_only():
    source = _src("""
        import torch
        def batches(model, train_loader, val_loader, opt):
            for x in train_loader:
                model(x).sum().backward()
                opt.step()
            model.eval()
            for x in val_loader:
                yield model(x)
        """)
    [d] = lint(source, "TL202")
    assert d.fix is None


def test_pytest_functions_are_silent():
    source = _src("""
        import torch
        def test_eval():
            model = torch.nn.Linear(2, 2)
            model.eval()
            assert model(torch.zeros(2)).shape == (2,)
        """)
    assert lint(source, "TL202") == []
    assert lint(source.replace("def test_eval():", "def test_eval(model_fixture):"), "TL202", path="test_model.py") == []


@pytest.mark.parametrize("text", [
    "val_loader", "valid_dl", "validation_dataset", "test_batches", "testing_loader", "eval_ds", "evaluation_dl",
    "dev_loader", "holdout_ds", "my_val_loader", "interval_loader", "train_loader", "values = ds", "val loader",
    "evaldata_batches", "retest_dataset", "devices_ds", "", "holdou_loader",
])
def test_the_fast_eval_loader_search_equals_the_regex(text):
    from torchlint.rules.tl202_eval_without_no_grad import _EVAL_LOADER_TEXT, _may_name_eval_loader

    assert _may_name_eval_loader(text) == bool(_EVAL_LOADER_TEXT.search(text))


def test_detects_on_the_index_and_fixes_the_def_and_the_loop_it_reports():
    """TL202 finds on the stdlib index with no LibCST parse in `check`; it points at the def's name and at
    the loop's iterable, and its fixes are made on the LibCST twins of that def and that loop."""
    from torchlint.config import Settings
    from torchlint.engine import needs_libcst, reports_without_stages
    from torchlint.registry import rules_by_code

    code = _src("""
        import torch
        async  def \\
          evaluate(model, val_loader):
            model.eval()
            return [await model(x) for x, _ in val_loader]
        def predict(net, val_loader):
            net.eval()
            return [net(x) for x, _ in val_loader]
        model.eval()
        for x, _ in val_loader:
            model(x)
    """)
    rule = rules_by_code()["TL202"]
    assert not needs_libcst(code)
    reports = reports_without_stages([rule()], code, Settings(select=("TL202",)), [])
    assert [r.span for r in reports] == [(3, 2, 3, 10), (6, 4, 6, 11), (10, 12, 10, 22)]
    assert [r.rewrite is not None for r in reports] == [False, True, True]  # an async def is report only
    fixed = fix(code, "TL202")
    assert "@torch.no_grad()\ndef predict" in fixed
    assert "model.eval()\nwith torch.no_grad():\n    for x, _ in val_loader:\n        model(x)\n" in fixed
    assert "async  def \\\n  evaluate" in fixed


def test_a_file_libcst_refuses_keeps_its_finding_and_its_fix_on_the_defs_statements():
    """Valid Python that LibCST's parser gives up on (5,000 adjacent string literals) hides no finding: the
    def's fix is made on LibCST's tree of the def alone, in `check`, `fix` and the JSON edits alike (issue 27:
    the edits refused it with LibCST's reason)."""
    from torchlint.config import Settings
    from torchlint.engine import lint_source
    from torchlint.registry import rules_by_code
    from torchlint.rule import Edit

    source = _src("import torch\n" + "S = (" + " ".join(['"a"'] * 5000) + ")\n" + EVALUATE)
    [diagnostic] = lint(source, "TL202")
    assert diagnostic.code == "TL202" and diagnostic.fix is not None
    assert diagnostic.message.startswith("`evaluate()` evaluates `model(...)` with autograd on; decorate it with")
    fixed = fix(source, "TL202")
    assert fixed == source.replace("def evaluate", "@torch.no_grad()\ndef evaluate")
    [edited] = lint_source(source, "fixture.py", [rules_by_code()["TL202"]()], Settings(select=("TL202",)),
                           with_edits=True).diagnostics
    assert edited.fix is not None and edited.message == diagnostic.message
    line = source.splitlines().index(next(x for x in source.splitlines() if x.startswith("def evaluate"))) + 1
    assert edited.edits == (Edit(line, 1, line, 1, "@torch.no_grad()\n"),)  # before the def: what `fix` writes


