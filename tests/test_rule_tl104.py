"""TL104 tensor-from-numpy-copies: aliasing, fix safety and the cases with nothing to gain."""

from __future__ import annotations

from fixture_support import fix, lint
from torchlint.rule import Applicability

HEADER = "import numpy as np\nimport torch\n"


def _one(source: str):
    diagnostics = lint(source, "TL104")
    assert len(diagnostics) == 1, [d.message for d in diagnostics]
    return diagnostics[0]


def test_fresh_call_is_a_safe_fix():
    source = HEADER + "x = torch.tensor(np.load('a.npy'))\n"
    assert _one(source).fix is Applicability.SAFE
    assert fix(source, "TL104", unsafe=False) == HEADER + "x = torch.from_numpy(np.load('a.npy'))\n"


def test_name_is_an_unsafe_fix():
    source = HEADER + "a = np.zeros(3)\nx = torch.tensor(a)\n"
    assert _one(source).fix is Applicability.UNSAFE
    assert fix(source, "TL104", unsafe=False) == source
    assert fix(source, "TL104", unsafe=True).endswith("x = torch.from_numpy(a)\n")


def test_views_and_numpy_round_trips_are_unsafe():
    for expr in ("np.asarray(a)", "a.reshape(-1)", "np.transpose(a)", "t.numpy()", "np.concatenate([a], out=a)"):
        source = HEADER + f"def f(t):\n    a = np.ones(3)\n    return torch.tensor({expr})\n"
        assert _one(source).fix is Applicability.UNSAFE, expr


def test_copying_methods_are_fresh():
    for expr in ("np.flip(a).copy()", "a.astype(np.float32)", "t.numpy().copy()", "np.array(lst)"):
        source = HEADER + f"def f(t, lst):\n    a = np.ones(3)\n    return torch.tensor({expr})\n"
        assert _one(source).fix is Applicability.SAFE, expr


def test_torch_alias_and_from_import():
    source = "import numpy as np\nimport torch as t\nfrom torch import tensor\nx = tensor(np.ones(2))\n"
    assert fix(source, "TL104").endswith("x = t.from_numpy(np.ones(2))\n")
    source = "import numpy as np\nfrom torch import tensor\nx = tensor(np.ones(2))\n"
    fixed = fix(source, "TL104")
    assert "import torch\n" in fixed and fixed.endswith("x = torch.from_numpy(np.ones(2))\n")


def test_dtype_uses_as_tensor_and_drops_defaults():
    source = (HEADER + "x = torch.tensor(np.zeros(3, dtype=np.float16), dtype=torch.float16, requires_grad=False, "
              "pin_memory=False)\n")
    assert fix(source, "TL104").endswith("x = torch.as_tensor(np.zeros(3, dtype=np.float16), dtype=torch.float16)\n")


def test_dtype_of_an_array_whose_own_dtype_is_unknown_is_silent():
    # `np.load` may give any dtype: `as_tensor(..., dtype=torch.float16)` would convert, and copy, as well
    assert lint(HEADER + "x = torch.tensor(np.load('a'), dtype=torch.float16)\n", "TL104") == []
    assert lint(HEADER + "x = torch.tensor(np.array(obs), dtype=torch.float)\n", "TL104") == []


def test_known_dtype_mismatch_is_silent_but_match_is_flagged():
    assert lint(HEADER + "x = torch.tensor(np.random.rand(3), dtype=torch.float32)\n", "TL104") == []
    assert lint(HEADER + "x = torch.tensor(np.zeros(3, dtype=np.int64), dtype=torch.float)\n", "TL104") == []
    source = HEADER + "x = torch.tensor(np.zeros(3, dtype=np.float32), dtype=torch.float32)\n"
    assert _one(source).fix is Applicability.SAFE


def test_device_other_than_cpu_is_silent():
    for device in ('"cuda"', "dev", "torch.device('cuda:0')", "'mps'"):
        assert lint(HEADER + f"x = torch.tensor(np.ones(3), device={device})\n", "TL104") == [], device
    source = HEADER + "x = torch.tensor(np.ones(3), device=torch.device('cpu'))\n"
    assert fix(source, "TL104").endswith("x = torch.as_tensor(np.ones(3), device=torch.device('cpu'))\n")


def test_report_only_cases():
    for expr, extra in (("np.frombuffer(b, dtype=np.uint8)", ""), ("np.load(p, mmap_mode='r')", ""),
                        ("np.load(p, 'r')", ""), ("np.diag(m)", ""), ("np.ones(3)", ", requires_grad=True")):
        source = HEADER + f"def f(b, p, m):\n    return torch.tensor({expr}{extra})\n"
        assert _one(source).fix is None, expr


def test_silent_on_non_arrays_and_unhelpful_cases():
    for line in ("x = torch.tensor([1, 2])", "x = torch.tensor(np.ones(3).sum())", "x = torch.tensor(np.float32(1))",
                 "x = torch.tensor(np.flip(np.ones(3)))", "x = torch.tensor(np.ones(3), pin_memory=True)",
                 "x = torch.Tensor(np.ones(3))", "x = torch.FloatTensor(np.ones(3))",
                 "x = torch.tensor(np.where(np.ones(3) > 0))", "x = torch.tensor(torch.ones(3))"):
        assert lint(HEADER + line + "\n", "TL104") == [], line


def test_name_rebound_to_a_non_array_is_silent():
    source = HEADER + "def f(items):\n    a = np.ones(3)\n    a = list(items)\n    return torch.tensor(a)\n"
    assert lint(source, "TL104") == []


def test_module_level_array_used_in_function():
    source = HEADER + "TABLE = np.arange(10)\n\ndef f():\n    return torch.tensor(TABLE)\n"
    assert _one(source).fix is Applicability.UNSAFE
