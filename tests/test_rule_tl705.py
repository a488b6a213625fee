"""TL705 attention-not-fused: the torch version it needs, and what the causal-mask fix writes."""

from fixture_support import fix, lint

HAND = ("import torch\n\n\ndef attention(q, k, v):\n"
        "    return torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5, dim=-1) @ v\n")


def test_silent_before_torch_2_0_where_there_is_no_sdpa():
    assert lint("# torchlint-fixture: torch-version=1.13\n" + HAND, "TL705") == []
    assert len(lint("# torchlint-fixture: torch-version=2.0\n" + HAND, "TL705")) == 1


CAUSAL = '''import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, n):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.register_buffer("tril", torch.tril(torch.ones(n, n, dtype=torch.bool)))

    def forward(self, x):
        T = x.size(1)
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, dim=-1)
        return F.scaled_dot_product_attention({args})
'''


def test_the_mask_gives_way_to_is_causal_wherever_it_is_passed():
    cases = {
        "q, k, v, attn_mask=self.tril[:T, :T]": "q, k, v, is_causal=True",
        "q, k, v, self.tril[:T, :T]": "q, k, v, is_causal=True",
        "q, k, v, self.tril[:T, :T], 0.0": "q, k, v, None, 0.0, is_causal=True",
        "q, k, v, attn_mask=self.tril[:T, :T], is_causal=False": "q, k, v, is_causal=True",
        "q, k, v, is_causal=False, attn_mask=self.tril[:T, :T]": "q, k, v, is_causal=True",
        "q, k, v, self.tril[:T, :T], is_causal=False": "q, k, v, None, is_causal=True",
    }
    for before, after in cases.items():
        fixed = fix(CAUSAL.format(args=before), "TL705")
        assert fixed == CAUSAL.format(args=after), before
        assert fix(fixed, "TL705") == fixed  # fixing twice changes nothing


def test_a_mask_of_another_size_or_not_boolean_is_left_alone():
    assert lint(CAUSAL.format(args="q, k, v, attn_mask=self.tril[:T, :T - 1]"), "TL705") == []
    float_tril = CAUSAL.replace(", dtype=torch.bool", "").format(args="q, k, v, attn_mask=self.tril[:T, :T]")
    assert lint(float_tril, "TL705") == []  # a float 0/1 mask is added to the scores: not causal
