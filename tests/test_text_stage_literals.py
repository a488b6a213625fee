"""Rules whose `may_fire` puts literal tests before their `required_patterns` must answer exactly as the
patterns do: the literals only save running the patterns where they cannot match."""

from __future__ import annotations

import re

import pytest

from fixture_support import FIXTURES
from torchlint.config import Settings
from torchlint.registry import rules_by_code

TRICKY = [
    "import torch\nfor p in model.parameters(): p.add_(1)\n",
    "x = [p for p in params]\n",  # the loop word after the first `param` of the line
    "params = 1\nfor i in range(3): pass\nstate_dict = {}\n",  # `for ... in` and `param` on different lines
    "for x inparams: y.add_(x)\n",  # no word boundary after `in`
    "opt = torch.optim.SGD(ps, foreach = False)\n",
    "for p in params:\n    p.data = p.data - 0.1\n",
    "for p in params:\n    p //= 2\n",
    "for p in params:\r    p.mul_(2)\n",


    "import torch\nfor x in data:\n    loss.backward()\n    x.cuda()\n",
    "import torch\r\nwhile True:\r\n    opt.step ()\r\n    x.to(dev)\n",  # `^` after `\r` only: no match
    "if __name__ == '__main__':\n    loss.backward()\n    x.to(device)\n",
    "if __name__ == '__main__':\n    loss.backward()\n    x.to(device)\n# allow_tf32 left as it is\n",
    "if __name__ == '__main__':\n    loss.backward()\n    x.to(device)\n    use_TF32 = 1\n",
    "for_each = 1\nwhile_x = 2\nloss.backward(); device\n",
]


def _by_patterns(rule, text: str, settings: Settings) -> bool:
    if code_of(rule) == "TL702" and re.search(r"allow_tf32|float32_matmul_precision|fp32_precision|\b[tT][fF]32\b", text):
        return False
    return all(re.search(p, text) for p in rule.patterns_for(settings))


def code_of(rule) -> str:
    return rule.code


@pytest.mark.parametrize("code", ["TL501", "TL702"])
def test_literal_gates_answer_as_the_patterns(code):
    rule = rules_by_code()[code]
    settings = Settings()
    texts = TRICKY + [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.rglob("*.py"))]
    assert any(rule.may_fire(t, settings) for t in texts)
    for text in texts:
        assert rule.may_fire(text, settings) == _by_patterns(rule, text, settings), text[:200]
