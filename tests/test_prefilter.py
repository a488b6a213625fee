"""A rule's pre-filter may skip a file only where the rule would find nothing in it."""

from __future__ import annotations

import pytest

from fixture_support import FIXTURES, fixture_settings
from torchlint.engine import reports_without_stages, rules_that_may_fire
from torchlint.registry import all_rules

SAMPLES = sorted(p for p in FIXTURES.rglob("*.py"))


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_prefilter_never_hides_a_finding(rule):
    assert len(SAMPLES) > 50
    for path in SAMPLES:
        source = path.read_text(encoding="utf-8")
        settings = fixture_settings(source, rule.code)
        crashes: list = []
        found = reports_without_stages([rule()], source, settings, crashes)
        assert not crashes
        if found:
            kept = rules_that_may_fire([rule()], source, settings)
            assert kept, f"{rule.code}'s pre-filter skips {path}, where it finds {len(found)}"


def test_the_pipeline_reports_exactly_what_every_rule_finds_without_prefilters():
    """With every rule on, the text gates change nothing on any fixture: the same diagnostics as running
    every rule on every file."""
    from dataclasses import replace

    from torchlint.engine import _run_rules, lint_source, parse

    rules = [rule() for rule in all_rules()]
    for path in SAMPLES:
        source = path.read_text(encoding="utf-8")
        settings = replace(fixture_settings(source, "TL000"), select=("ALL",))
        piped = lint_source(source, str(path), rules, settings).diagnostics
        _, _, unfiltered = _run_rules(parse(source, str(path)), source, str(path), rules, settings)
        assert piped == unfiltered, path


# Spellings each rule's text gate must keep, one per snippet. Each was once ruled out by a stage while the
# rule reported it.
_LOADER_HEAD = "import torch\nfrom torch.utils.data import DataLoader\nfrom tqdm import tqdm\n"
_STEP = "        model(x).sum().backward()\n        optimizer.step()\n"
AST_STAGE_KEEPS = [
    ("TL103", "import torch\ndef train(model, optimizer, train_loader):\n    for x, y in train_loader:\n"
              "        x = x.to(torch.device(type='cuda'))\n" + _STEP),
    ("TL103", _LOADER_HEAD + "def train(model, optimizer, ds):\n    data = DataLoader(ds, pin_memory=True)\n    bar: tqdm = tqdm(data)\n"
              "    for x, y in bar:\n        x = x.to('cuda')\n" + _STEP),
    ("TL103", "import torch\nfrom tqdm import tqdm\ndef train(model, optimizer, train_loader):\n"
              "    bar: tqdm = tqdm(train_loader)\n    for x, y in bar:\n        x = x.to('cuda')\n" + _STEP),
    ("TL103", "import torch\ng = 'cuda'\nwhere = g\ndef train(model, optimizer, train_loader):\n    g = 'cpu'\n"
              "    for x, y in train_loader:\n        x = x.to(where)\n" + _STEP),
    ("TL103", "import torch\nasync def train(model, optimizer, train_loader):\n"
              "    async for x, y in train_loader:\n        x = x.cuda()\n" + _STEP),
]


@pytest.mark.parametrize("code,source", AST_STAGE_KEEPS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(AST_STAGE_KEEPS)])
def test_the_stages_keep_a_spelling_the_check_reports(code, source):
    from torchlint.registry import rules_by_code

    rule = rules_by_code()[code]
    settings = fixture_settings(source, code)
    assert reports_without_stages([rule()], source, settings, []), "the check must report the snippet"
    assert rules_that_may_fire([rule()], source, settings), f"{code}'s stages rule out a file it reports on"
