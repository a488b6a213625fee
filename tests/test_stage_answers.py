"""The cheap stages answer from the shared index and literal-first searches, not from walks and regexes of
their own: each still answers exactly what the plain form it replaced answers. The plain forms are kept here
as references and compared on every fixture and on snippets made for the corner cases."""

from __future__ import annotations

import ast
import re
import textwrap

import pytest

from fixture_support import FIXTURES
from torchlint.facts.index import _LEAVES, _children
from torchlint.config import Settings
from torchlint.registry import get_rule
from torchlint.facts.text_gates import CALL_GAP, GAP, finditer_word, search_word

FIXTURE_SOURCES = [path.read_text(encoding="utf-8") for path in sorted(FIXTURES.rglob("*.py"))]

SNIPPETS = [textwrap.dedent(s) for s in (
    # loops: header calls, else blocks, defs, lambdas and classes between a loop and a call
    """\
    for x in train(loader.step()):
        pass
    """,
    """\
    while True:
        pass
    else:
        opt.step()
    """,
    """\
    for x in xs:
        def f():
            loss.backward()
        g = lambda: opt.step()
        class A:
            opt.step()
    """,
    """\
    for x in xs:
        for y in ys:
            [loss(z).backward() for z in y]
    """,
    """\
    async def f():
        async for x in loader:
            opt.step()
    """,
    # moves in loops over loaders, in bodies, else blocks, nested defs and inner loops
    """\
    import torch
    from torch.utils.data import DataLoader
    for epoch in range(3):
        for x, y in loader:
            x = x.to(device)
    """,
    """\
    for epoch in range(3):
        for batch in train_loader:
            pass
        else:
            batch.cuda()
    """,
    """\
    for batch in train_loader:
        def move():
            return batch["x"].to("cuda")
    """,
    """\
    for batch in data:
        batch.to(device, non_blocking=True)
        batch.to(*args)
        f(batch).to(device)
    """,
    """\
    pbar = tqdm(train_dl)
    for batch in pbar:
        batch.x.to(device)
    """,
    """\
    pbar: object = tqdm(train_dl)
    for batch in pbar:
        batch.to(device)
    """,
    """\
    def f():
        pbar = enumerate(val_loader)
    for batch in pbar:
        batch[0].cuda()
    """,
    """\
    try:\n        pass\n    except ImportError:\n        it = iter(test_loader)
    for batch in it:
        batch.to(device)
    """,
    """\
    try:\n        pass\n    finally:\n        it = iter(test_loader)
    for batch in it:
        batch.to(device)
    """,
    """\
    with ctx:\n        if ok:\n            pass\n        else:\n            it = iter(test_loader)
    for batch in it:
        batch.to(device)
    """,
    """\
    match mode:\n        case 'a':\n            it = iter(test_loader)
    for batch in it:
        batch.to(device)
    """,
    """\
    class Holder:\n        it = iter(test_loader)
    for batch in it:
        batch.to(device)
    """,
    """\
    it = [lambda: iter(test_loader)]
    for batch in it:
        batch.to(device)
    """,
    """\
    its = it = other = iter(test_loader)
    for batch in it:
        batch.to(device)
    """,
    """\
    (it := iter(test_loader))
    for batch in it:
        batch.to(device)
    """,
    """\
    it += iter(test_loader)
    for batch in it:
        batch.to(device)
    """,
    # imports, precision, cuda
    """\
    from apex import amp
    from accelerate import *
    import lightning.pytorch as pl
    from . import local
    x = torch.zeros(3, device=dev)
    y = model.half()
    z = model.half(1)
    Trainer(precision=16)
    with torch.autocast("cuda"):
        pass
    """,
    """\
    from accelerate import *
    x.bfloat16()
    """,
    # TL704's regions: methods, defs inside methods, training loops, nested training loops
    """\
    class Net(nn.Module):
        def forward(self, x):
            for i in range(x.shape[0]):
                x[i] = x[i] * 2
            def forward(y):
                for j in range(len(y)):
                    y[j] = y[j] + 1
            return x
    """,
    """\
    def forward(x):
        for i in range(len(x)):
            x[i] = x[i].exp()
    """,
    """\
    for epoch in range(10):
        for i in range(n):
            out[i] = a[i] * b[i]
        for batch in loader:
            loss.backward()
    """,
    """\
    while step < total:
        for i in range(0, len(x)):
            x[i] += 1
        if ok:
            opt.step()
    """,
    """\
    class Model:
        if flag:
            def training_step(self, batch):
                for i in range(batch.size(0)):
                    batch[i] = batch[i] * 2
    """,
    """\
    class Model:
        def train_step(self, batch):
            for i in range(batch.size(0)):
                batch[i] = batch[i] * 2
                print(i)
            for k in range(n):
                pass
            else:
                batch[k] = 0
    """,
    # syntax the walks must enter: match statements, f-strings, decorators, defaults, comprehensions
    """\
    match command:
        case Point(x=0, y=y) if y.to(dev):
            loss.backward()
        case {"a": 1, **rest}:
            opt.step()
        case [1, *others]:
            pass
    for batch in loader:
        print(f"{batch.to(device)!r:>10}")
        @decorate(batch.cuda())
        def g(a=batch.to(device)) -> h(batch.cuda()):
            pass
    """,
)]

SOURCES = FIXTURE_SOURCES + SNIPPETS


def trees():
    for source in SOURCES:
        try:
            yield source, ast.parse(source)
        except SyntaxError:  # a fixture may hold syntax newer than this interpreter's
            continue


# --- the stages against the references -----------------------------------------------------------------

def test_the_index_walk_enters_every_child_that_is_not_a_leaf():
    for _, tree in trees():
        for node in ast.walk(tree):
            expected = [c for c in ast.iter_child_nodes(node) if type(c) not in _LEAVES]
            assert _children(node) == expected, ast.dump(node)[:200]


def test_the_index_walk_finds_children_of_a_field_first_seen_empty():
    # A node built by hand may leave out a field: the first node of its type does not fix the field's form.
    class Probe(ast.AST):
        _fields = ("items", "child", "label")

    first = Probe()
    first.child = None
    assert _children(first) == []
    call = ast.Call(func=ast.Name(id="f", ctx=ast.Load()), args=[], keywords=[])
    second = Probe(items=[call, None, "text"], child=call, label="name")
    assert _children(second) == [call, call]


# --- text stages -----------------------------------------------------------------------------------------

WORD_TEXTS = ["range(3)", "xrange(3)", "_range (3)", "a.range(", "(range\t(", "érange(", "range(range(",
              "for i in range(n)", "xfor i in range(n)", "before for j in range(len(x))", "for", ""]


@pytest.mark.parametrize("pattern", [r"range\s*\(", r"for\s+(\w+)\s+in\s+range\s*\(", r"Linear\b", r"len\s*\("])
def test_search_word_is_a_leading_word_boundary(pattern):
    compiled = re.compile(pattern)
    for text in WORD_TEXTS + FIXTURE_SOURCES:
        reference = re.search(r"\b" + pattern, text)
        found = search_word(compiled, text)
        assert (found and found.span()) == (reference and reference.span())
        expected = [m.span() for m in re.finditer(r"\b" + pattern, text)]
        assert [m.span() for m in finditer_word(compiled, text)] == expected


# The text stages, rule by rule, in plain form: all of the regexes must match (then the rule's own extra
# tests, unchanged, which both forms share). Tokens may stand apart as Python allows (see text_prefilter):
# `DOT` is a `.` and what may follow it, `call(name)` a call's name up to its `(`.
DOT = r"\." + GAP


def call(name: str) -> str:
    return name + CALL_GAP + r"\("


# A training loop's text (``text_prefilter.may_train``): a `backward(` call or a `.step(` method call.
TRAINING = r"\b" + call("backward") + "|" + DOT + call("step")
PLAIN_TEXT_STAGES = {
    "TL103": ([DOT + call("(?:to|cuda)")], "may_name_a_loader"),
    "TL104": ([r"numpy", r"\b" + call("tensor")], None),
    "TL401": ([r"DataLoader", TRAINING], None),
    "TL402": ([r"DataLoader", DOT + call("(?:to|cuda)"), TRAINING], None),
}

TEXT_SNIPPETS = [
    "x.to (dev)\nfor b in train_dl: pass", "x.cuda(\n", "numpy\nt = torch.tensor(a)", "numpy\nt = mytensor(a)",
    "DataLoader(ds, 4, True, None, 2, x)\nloss.backward", "DataLoader(ds)\nopt.step ()\nx.to(d)",
    "torch.cuda.amp.autocast\nnn.Linear(100, 50257)", "nn.Linear(100, 50257)\nfrom torch import half as h",
    "nn.Linear(100, 50257)\nx.half()", "xLinear(100, 50257)\nx.half()", "nn.Embedding(50257, 100)\nbfloat16",
    "opt.zero_grad(set_to_none=False)", "p.grad.data.zero_()", "p.grad = torch.zeros_like(p)",
    "opt.zero_grad()", "complex", "sparse = True", "x.cfloat()", "torch.cdouble", "cfloatx",
    "torch.backends.CUDNN", "Benchmark = True", "benchmark=1", "xbenchmark = 1",
    "float64", "x.double()", "torch.double", "torch.doubles", "FSDP", "DeviceMesh",
    # tokens apart, as Python allows
    "x . to (dev)\nfor b in train_dl: pass", "(x\n .cuda())", "(x.  # note\n cuda())", "x.cudax()",
    "numpy\nt = torch.tensor (a)", "numpy\nt = (torch.tensor)(a)", "DataLoader(ds)\nopt \\\n .step ()\nx.to(d)",
    "opt.zero_grad(  # see f()\n    set_to_none=False)", "opt.zero_grad (False)", "p . grad . zero_ ()",
    "(p.grad).data.zero_()", "p.grad = (torch.zeros_like(p))", "p.grad == torch.zeros_like(p)",
    "p.grads = torch.zeros_like(p)", "nn.Linear(100, 50257)\nx. half()",
    "from torch import (\n    float32,\n    half)\nnn.Linear(100, 50257)", "half = 2\nnn.Linear(100, 50257)",
]


@pytest.mark.parametrize("code", sorted(PLAIN_TEXT_STAGES))
def test_literal_first_text_stages_answer_as_their_plain_regexes(code):
    from torchlint.facts.text_gates import may_name_a_loader

    rule = get_rule(code)
    patterns, extra = PLAIN_TEXT_STAGES[code]
    settings = Settings()
    for text in TEXT_SNIPPETS + FIXTURE_SOURCES:
        expected = all(re.search(p, text) for p in patterns) and (extra is None or may_name_a_loader(text))
        assert rule.may_fire(text, settings) == bool(expected), text[:200]


@pytest.mark.parametrize("old_torch", [False, True])
def test_tl201_text_stage_answers_as_its_plain_regexes(old_torch):
    settings = Settings(torch_version=(1, 13) if old_torch else (2, 5))
    zero_grad = call("zero_grad") + ("" if old_torch else r"(?:[^)#]|#[^\r\n]*)*False")
    in_place = DOT + r"grad" + CALL_GAP + r"(?:" + DOT + r"data" + CALL_GAP + r")?" + DOT + call("zero_")
    for text in TEXT_SNIPPETS + FIXTURE_SOURCES:
        expected = re.search(zero_grad + "|" + in_place, text) or (
            "zeros_like" in text and re.search(DOT + r"grad" + CALL_GAP + r"=(?!=)", text))
        assert get_rule("TL201").may_fire(text, settings) == bool(expected), text[:200]


def test_tl403_text_stage_keeps_what_its_plain_regexes_matched():
    """A loader's worker count as its sixth positional argument is found by following the call's brackets
    (no regex can): it keeps every text the plain regexes matched, and adds nested calls and aliases."""
    plain = [r"DataLoader", r"num_workers|DataLoader\([^)]*,[^)]*,[^)]*,[^)]*,[^)]*,", TRAINING]
    rule = get_rule("TL403")
    for text in TEXT_SNIPPETS + FIXTURE_SOURCES:
        if all(re.search(p, text) for p in plain):
            assert rule.may_fire(text, Settings()), text[:200]
    step = "\nloss.backward()\n"
    assert rule.may_fire("DataLoader(Subset(ds, idx), 64, True, None, None, 4)" + step, Settings())
    assert rule.may_fire("DataLoader (ds, 64, True,  # sampler next\n None, None, 4)" + step, Settings())
    assert rule.may_fire("from torch.utils.data import DataLoader as DL\nDL(ds, 64, True, None, None, 4)" + step,
                         Settings())
    assert not rule.may_fire("DataLoader(ds, collate(a, b, c, d, e), True)" + step, Settings())
    assert not rule.may_fire("DataLoader(ds, '(,,,,,', True)" + step, Settings())


def test_text_helpers_answer_as_their_plain_regexes():
    from torchlint.rules.tl601_cudnn_benchmark_off import _decided
    from torchlint.rules.tl701_no_mixed_precision import _requires_double, decided_elsewhere
    from torchlint.rules.tl703_unaligned_fp16_matmul_dims import _LAYER_TEXTS, _may_be_reduced

    plain = [
        (_decided, r"cudnn|\bbenchmark\s*=", re.IGNORECASE),
        (_requires_double, r"float64|\.double\(\)|torch\.double\b|set_default_dtype|set_default_tensor_type", 0),
        (_may_be_reduced, r"autocast|GradScaler|bfloat16|float16|" + DOT + r"half\b|\bhalf\b(?=[\s\S]*\bfrom"
         + GAP + r"torch\b[\w.\s\\]*import\b)|\bfrom" + GAP + r"torch\b[\w.\s\\]*import\b[\s\S]*\bhalf\b", 0),
        (lambda text: any(search_word(p, text) for p in _LAYER_TEXTS), r"\b(?:Linear|Embedding)\b", 0),
    ]
    for helper, pattern, flags in plain:
        for text in TEXT_SNIPPETS + FIXTURE_SOURCES:
            assert helper(text) == bool(re.search(pattern, text, flags)), (pattern, text[:200])
    sharded = r"FSDP|FullyShardedDataParallel|fully_shard|parallelize_module|init_device_mesh|DeviceMesh"
    for text in TEXT_SNIPPETS:  # no gym import in these: the sharding test alone decides
        assert decided_elsewhere(text) == bool(re.search(sharded, text))


def test_tl704_text_stage_answers_as_its_plain_regexes():
    patterns = [r"range", DOT + r"shape\b|" + DOT + call("size") + r"|\b" + call("len"),
                r"def[\s\\]+(?:forward|training_step|train_step|train_one_step|compute_loss)\b|backward|"
                + DOT + call("step")]
    from torchlint.rules.tl704_python_loop_over_tensor_elements import _FOR_RANGE_TEXT

    # the loop header, with its word boundary tested by `finditer_word`: the plain regex with `\b` in front
    header = re.compile(r"\b" + _FOR_RANGE_TEXT.pattern)
    rule = get_rule("TL704")
    answers = set()
    for text in SNIPPETS + FIXTURE_SOURCES:
        plain = all(re.search(p, text) for p in patterns) and bool(header.search(text.replace("\r\n", "\n").replace("\r", "\n")))
        answers.add(plain)
        assert rule.may_fire(text, Settings()) is plain, text[:200]
    assert answers == {True, False}
