"""The text stages of TL501 and TL702 began as regexes (`required_patterns`). They now search literals first
and accept every spacing Python allows (`tests/test_text_stage_spacing.py`): wherever the plain patterns
matched, they must still say "maybe" (they only add the spellings the patterns missed), and they still rule
files out."""

from __future__ import annotations

import re

import pytest

from fixture_support import FIXTURES
from torchlint.config import Settings
from torchlint.registry import rules_by_code

# The former `required_patterns`, kept as the reference. TL501's now leave out what `check` never reads: a
# comprehension's `for` (a loop statement starts its line) and a comparison `p.data == x`; and, as `check`
# does, they ignore the case of `param`.
PLAIN_PATTERNS = {
    "TL501": (
        r"(?i:param)|state_dict|foreach",
        r"foreach\s*=\s*False|(?m:^[ \t]*for\b[^\n]*\bin\b[^\n]*(?:(?i:param)|state_dict))",
        r"foreach|[a-z0-9]_\(|[-+*/]=|\.data\s*=(?!=)",
    ),
    "TL702": (r"\.(?:backward|step)\s*\(", r"__main__|(?m:^(?:for|while|if|try|with|match)\b)", r"cuda|device|\.to\("),
}

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


def _by_patterns(code: str, text: str) -> bool:
    if code == "TL702" and re.search(r"allow_tf32|float32_matmul_precision|fp32_precision|\b[tT][fF]32\b", text):
        return False
    return all(re.search(p, text) for p in PLAIN_PATTERNS[code])


@pytest.mark.parametrize("code", ["TL501", "TL702"])
def test_literal_gates_keep_what_the_patterns_matched(code):
    rule = rules_by_code()[code]
    settings = Settings()
    texts = TRICKY + [p.read_text(encoding="utf-8") for p in sorted(FIXTURES.rglob("*.py"))]
    answers = [rule.may_fire(t, settings) for t in texts]
    assert True in answers and False in answers
    for text, answer in zip(texts, answers):
        if _by_patterns(code, text):
            assert answer, text[:200]
