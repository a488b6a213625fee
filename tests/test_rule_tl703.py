"""TL703 unaligned-fp16-matmul-dims: how sizes are read, which ones count, and what counts as fp16/bf16."""

from fixture_support import lint
from torchlint.registry import get_rule

AUTOCAST = "with torch.autocast('cuda', dtype=torch.bfloat16):\n    y = model(x)\n"


def _sizes(source):
    return [d.message.split(" with ", 1)[1].split(", not a multiple")[0] for d in lint(source, "TL703")]


def test_threshold_and_alignment():
    source = "import torch\nfrom torch import nn\n" + AUTOCAST + (
        "a = nn.Linear(63, 65)\n"      # 63 is below the size that matters; 65 is reported
        "b = nn.Linear(64, 72)\n"      # aligned
    )
    assert _sizes(source) == ["out_features=65 (pad to 72)"]


def test_module_constant_and_reassigned_config_fields():
    source = "import torch\nfrom torch import nn\n" + AUTOCAST + (
        "VOCAB = 50257\n"
        "class Config:\n    vocab_size = 50257\n    width = 1030\n"
        "def build(config):\n"
        "    config.vocab_size = tokenizer_size()\n"   # reassigned somewhere: the default is not the value
        "    return nn.Linear(config.width, VOCAB), nn.Linear(768, config.vocab_size)\n"
    )
    assert _sizes(source) == ["in_features=1030 (pad to 1032, or 1088, a multiple of 64) and out_features=50257 "
                              "(pad to 50264, or 50304, a multiple of 64)"]


def test_a_framework_import_is_not_evidence_of_reduced_precision():
    source = "import accelerate\nfrom torch import nn\nhead = nn.Linear(768, 50257)\n"
    assert lint(source, "TL703") == []
    assert len(lint(source + "model = head.half()\n", "TL703")) == 1


def test_untied_vocabulary_embedding_is_a_lookup_not_a_matmul():
    source = "import torch\nfrom torch import nn\n" + AUTOCAST + "self_emb = nn.Embedding(50257, 768)\n"
    assert lint(source, "TL703") == []


def test_opt_in_by_default():
    assert get_rule("TL703").default_enabled is False
