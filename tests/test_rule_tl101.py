"""Focused tests for TL101 sync-in-training-loop: what counts as a tensor, load-bearing syncs, the fix."""

from __future__ import annotations

import textwrap

import pytest

from fixture_support import fix, fixture_text, lint
from torchlint.rule import Applicability


def src(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


def loop(body: str, before: str = "", after: str = "") -> str:
    """A training function whose batch loop runs ``body`` after the step."""
    indent = lambda text, n: textwrap.indent(textwrap.dedent(text).strip("\n"), " " * n) + "\n" if text else ""
    return (
        "import numpy as np\nimport torch as t\nimport torch.nn.functional as F\n\n"
        "def train(model, loader, opt, lr, epochs):\n"
        + indent(before, 4)
        + "    for x, y in loader:\n"
        "        out = model(x)\n"
        "        loss = F.cross_entropy(out, y)\n"
        "        opt.zero_grad()\n"
        "        loss.backward()\n"
        "        opt.step()\n"
        + indent(body, 8)
        + indent(after, 4)
    )


@pytest.mark.parametrize(
    "body",
    [
        "log.append(loss.item())",
        "log.append(out.argmax(1).tolist())",
        "log.append(out.cpu())",
        "print(loss)",
        "print(f'{loss:.3f}')",
        "writer.add_scalar('loss', float(loss), 0)",
        "loss.item()",
        "acc = (out.argmax(1) == y).float().mean().item()\nprint(acc)",
    ],
)
def test_every_step_syncs_are_reported(body):
    diagnostics = lint(loop(body), "TL101")
    assert len(diagnostics) == 1, diagnostics
    assert diagnostics[0].fix is None


@pytest.mark.parametrize(
    "body",
    [
        "for k, v in stats.items():\n    print(k, v)",   # dict.items() is not .item()
        "print(float(lr))",
        "print(epochs)",
        "a = np.zeros(3)\nprint(a.item(0), a.tolist())",
        "if loss < 1e-3:\n    break",
        "if not t.isfinite(loss).all().item():\n    raise RuntimeError('diverged')",
        "v = loss.item()\nif v > 10:\n    break",
        "state = env.step(out.argmax().item())",
        "labels.extend(y.tolist())",           # the loader's batch is still on the CPU
        "if step % 50 == 0:\n    print(loss.item())",
        "if (step + 1) % 50 == 0:\n    writer.add_scalar('loss', loss.item(), step)",
    ],
)
def test_load_bearing_guarded_and_non_tensor_calls_are_silent(body):
    assert lint(loop(body), "TL101") == []


def test_else_branch_of_a_logging_guard_is_reported():
    body = "if step % 50 == 0:\n    print(loss.item())\nelse:\n    log.append(loss.item())"
    assert [d.line for d in lint(loop(body), "TL101")] == [15]


def test_per_epoch_item_after_the_batch_loop_is_silent():
    code = src(
        """
        import torch
        def train(model, loader, opt, crit):
            for epoch in range(3):
                total = torch.zeros(())
                for x, y in loader:
                    loss = crit(model(x), y)
                    loss.backward()
                    opt.step()
                    total += loss.detach()
                print(total.item())
        """
    )
    assert lint(code, "TL101") == []


def test_accumulation_fix_uses_the_alias_and_float_conversion():
    code = loop("total += loss.item()", before="total = 0.0", after="return total")
    [d] = lint(code, "TL101")
    assert d.fix is Applicability.UNSAFE
    fixed = fix(code, "TL101")
    assert "        total += loss.detach()\n    total = float(total)\n    return total\n" in fixed
    assert fix(code, "TL101", unsafe=False) == code


def test_integer_start_keeps_the_type_and_imports_torch_when_missing():
    code = src(
        """
        from torch import nn

        def train(model, loader, opt, criterion):
            correct = 0
            for x, y in loader:
                out = model(x)
                criterion(out, y).backward()
                opt.step()
                correct += (out.argmax(1) == y).sum().item()
            return correct
        """
    )
    fixed = fix(code, "TL101")
    assert fixed.startswith("import torch\n") or "\nimport torch\n" in fixed
    assert "    correct = torch.as_tensor(correct).item()\n    return correct" in fixed


@pytest.mark.parametrize(
    "before, body",
    [
        ("total = 0.0", "total += loss.item()\nprint(total)"),      # read inside the loop
        ("total = start", "total += loss.item()"),                  # not a number literal
        ("total = 0.0\ntotal = reset(total)", "total += loss.item()"),  # last binding is not the literal
        ("", "total += loss.item()"),                               # no start at all
        ("total = 0.0", "total -= loss.item()"),
    ],
)
def test_accumulation_without_a_provable_start_is_report_only(before, body):
    diagnostics = lint(loop(body, before=before), "TL101")
    assert diagnostics and all(d.fix is None for d in diagnostics)


def _run(code: str):
    torch = pytest.importorskip("torch")

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = [(torch.randn(5, 4), torch.randint(0, 3, (5,))) for _ in range(4)]
    scope: dict = {}
    exec(compile(code, "train", "exec"), scope)
    return scope["train"](model, loader, opt, torch.nn.functional.cross_entropy)


@pytest.mark.parametrize("empty", [False, True])
def test_fixed_accumulation_returns_the_same_python_numbers(empty):
    code = src(
        """
        def train(model, loader, opt, criterion):
            total, correct = 0.0, 0
            loss_sum = 0.0
            count = 0
            for x, y in loader:
                out = model(x)
                loss = criterion(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                loss_sum += loss.item()
                count += (out.argmax(1) == y).sum().item()
            return loss_sum, count
        """
    )
    if empty:
        code = code.replace("for x, y in loader:", "for x, y in loader[:0]:")
    fixed = fix(code, "TL101")
    assert "loss_sum = float(loss_sum)" in fixed and "as_tensor(count).item()" in fixed
    before, after = _run(code), _run(fixed)
    assert [type(v) for v in after] == [type(v) for v in before] == [float, int]
    assert after[0] == pytest.approx(before[0], rel=1e-6) and after[1] == before[1]


def test_start_before_an_epoch_loop_and_tuple_start_are_recognised():
    code = src(
        """
        import torch

        def fit(model, data, loss_fn):
            optimizer = torch.optim.Adam(model.parameters(), lr=0.001)
            train_loss, correct, total = 0, 0, 0
            for _ in range(10):
                model.train()
                for x, target in data:
                    optimizer.zero_grad()
                    output = model(x)
                    loss = loss_fn(output, target)
                    loss.backward()
                    optimizer.step()
                    train_loss += loss.item()
                    total += target.size(0)
            return train_loss, total
        """
    )
    fixed = fix(code, "TL101")
    assert "            train_loss += loss.detach()\n" in fixed
    assert "        train_loss = torch.as_tensor(train_loss).item()\n    return" in fixed


def test_epoch_loop_that_reads_the_sum_blocks_the_climb():
    code = src(
        """
        import torch

        def fit(model, data, loss_fn, opt):
            total = 0.0
            for epoch in range(10):
                print(total)
                for x, y in data:
                    loss = loss_fn(model(x), y)
                    loss.backward()
                    opt.step()
                    total += loss.item()
        """
    )
    [d] = lint(code, "TL101")
    assert d.fix is None


def test_elif_and_one_line_bodies_do_not_crash():
    code = src(
        """
        import torch

        def fit(model, data, loss_fn, opt, mode):
            total = 0.0
            if mode == 1:
                pass
            elif mode == 2:
                for x, y in data:
                    loss = loss_fn(model(x), y); loss.backward(); opt.step()
                    total += loss.item()
            return total
        """
    )
    [d] = lint(code, "TL101")
    assert d.fix is None


@pytest.mark.parametrize(
    "code",
    [
        # a class named Net builds a module; printing it is not a sync
        "net = Net()\nfor x, y in loader:\n    F.mse_loss(net(x), y).backward()\n    opt.step()\n    print(net)\n",
        # `loss` rebound to a Python float before it is printed
        "for x, y in loader:\n    loss = F.mse_loss(model(x), y)\n    loss.backward()\n    opt.step()\n"
        "    loss = 1.0 if x is None else 2.0\n    loss = float(3)\n    print(loss)\n",
        # a loss-scale getter returns a float
        "for x, y in loader:\n    F.mse_loss(model(x), y).backward()\n    opt.step()\n    print(float(scaler.get_loss_scale()))\n",
        "for x, y in loader:\n    F.mse_loss(model(x), y).backward()\n    opt.step()\n    print(int(x.size(0)), x.shape)\n",
    ],
)
def test_host_values_are_not_tensors(code):
    assert lint("import torch.nn.functional as F\n" + code, "TL101") == []


@pytest.mark.parametrize("body, reported", [
    # the read sits in an `if` that follows the synchronize, and nothing between queues GPU work
    ("t.cuda.synchronize()\ndt = time.perf_counter() - t0\nrate = 8 / dt\nif master:\n    print(loss.item(), rate)", False),
    ("t.cuda.synchronize()\nif master:\n    if verbose:\n        print(loss.item())", False),
    # GPU work before the read inside the if, or in its test: the read waits for that work
    ("t.cuda.synchronize()\nif master:\n    extra = model(x)\n    print(loss.item())", True),
    ("t.cuda.synchronize()\nif model(x).sum() > 0:\n    print(loss.item())", True),
    ("t.cuda.synchronize()\nextra = model(x)\nif master:\n    print(loss.item())", True),
])
def test_a_read_in_an_if_after_a_synchronize(body, reported):
    assert bool(lint(loop(body), "TL101")) is reported


@pytest.mark.parametrize("body, reported", [
    # a synchronize run only on CUDA (`if device_type == "cuda":`), and reads under `with open(...)`
    ("if kind == 'cuda':\n    t.cuda.synchronize()\nif master:\n    with open(path, 'a') as f:\n"
     "        f.write(str(loss.item()))", False),
    ("if kind == 'cuda':\n    t.cuda.synchronize()\nelse:\n    pass\nprint(loss.item())", True),
    ("t.cuda.synchronize()\nwith t.autocast('cuda'):\n    extra = model(x)\n    print(loss.item())", True),
])
def test_a_synchronize_under_a_device_test_and_reads_in_a_with(body, reported):
    assert bool(lint(loop(body), "TL101")) is reported


@pytest.mark.parametrize("imports, build", [
    ("from torch.utils.tensorboard import SummaryWriter", "SummaryWriter()"),
    ("from torch.utils.tensorboard import SummaryWriter as TB", "TB('runs')"),
    ("import torch.utils.tensorboard as tbd", "tbd.SummaryWriter()"),
    ("from torch.utils.tensorboard.writer import SummaryWriter", "SummaryWriter()"),
    ("import tensorboardX", "tensorboardX.SummaryWriter()"),
])
def test_summary_writer_of_a_tensor_every_step_is_a_sync_by_what_builds_it(imports, build):
    source = imports + "\n" + loop("board.add_scalar('loss', loss, 0)", before=f"board = {build}")
    (finding,) = lint(source, "TL101")
    assert "`board.add_scalar(..., loss)` copies the tensor `loss` to the host" in finding.message
    assert finding.fix is None


@pytest.mark.parametrize("body, before", [
    ("board.add_scalar('loss', loss, 0)", "board = Board()"),  # the file's own class, not TensorBoard's
    ("board.add_scalar('lr', lr, 0)", "board = SummaryWriter()"),  # a host number
    ("board.add_scalar('loss', loss.item(), 0)", "board = SummaryWriter()"),  # reported at `.item()`, once
    ("if step % 10 == 0:\n    board.add_scalar('loss', loss, step)", "board = SummaryWriter()"),  # an interval
    ("board.add_histogram('y', y, 0)", "board = SummaryWriter()"),  # the raw batch: on the CPU
])
def test_summary_writer_near_misses(body, before):
    source = ("from torch.utils.tensorboard import SummaryWriter\nclass Board:\n    pass\n"
              + loop(body, before=before + "\nstep = 0"))
    assert [f.message for f in lint(source, "TL101") if "add_" in f.message] == []


def test_grad_of_a_parameter_drawn_from_parameters_is_a_tensor():
    body = "for name, p in model.named_parameters():\n    print(p.grad.norm())"
    (finding,) = lint(loop(body), "TL101")
    assert "`p.grad.norm()`" in finding.message
    # `p` bound otherwise too: not known to be a parameter
    assert lint(loop(body + "\n    p = lr"), "TL101") == []


@pytest.mark.parametrize(
    "body, reported",
    [
        # the collective works on the tensor the step made; the host value bound after it is only stored
        ("if distributed:\n    dist.all_reduce(loss)\nloss = loss.item()\nlog.append(loss)", 1),
        # an unpacking rebinds the name (a binding, not a use of the host value)
        ("a, b = out.max(1)\na = a.sum().item()\nlog.append(a)", 1),
        # the next step reads the host value before anything binds the name again: load-bearing
        ("loss = loss.item()\nlog.append(loss)", 1),
    ],
)
def test_a_later_host_binding_does_not_hide_the_step(body, reported):
    code = loop(body).replace("import numpy as np\n", "import numpy as np\nimport torch.distributed as dist\n")
    assert len(lint(code, "TL101")) == reported


def test_a_host_value_read_by_the_next_step_before_its_rebinding_stays_silent():
    head = src("""
        import torch.nn.functional as F

        def train(model, loader, opt, target, log):
            loss = float("inf")
            for x, y in loader:
        """)
    step = ["loss = F.cross_entropy(model(x), y)", "opt.zero_grad()", "loss.backward()", "opt.step()"]
    tail = ["if loss < target:", "    break", "loss = loss.item()", "log.append(loss)"]
    lines = lambda block, n: "".join(" " * n + line + "\n" for line in block)
    # the step only runs for some batches: the test may read the previous step's Python number
    under_a_condition = head + "        if x.size(0) > 1:\n" + lines(step, 12) + lines(tail, 8)
    assert lint(under_a_condition, "TL101") == []
    # the test comes before the step's binding: it reads the previous step's Python number
    test_first = head + lines(tail[:2] + step + tail[2:], 8)
    assert lint(test_first, "TL101") == []
    # every step binds the tensor first: the test reads the tensor, the host value is only stored
    every_step = head + lines(step + tail, 8)
    assert len(lint(every_step, "TL101")) == 1


_DRAINED = fixture_text("TL101", "clean_after_an_update_that_ends_drained.py")


@pytest.mark.parametrize("change, lines", [
    ((), []),  # the update's own read is needed and comes last: the loss read after it waits for nothing
    # only printed: both reads are reported (dropping the first makes the second the one that waits)
    (("        self.memory.update_priorities(indices, priorities)\n", "        print(priorities)\n"), [32, 40]),
    # GPU work after the update's read: the loss read waits for it
    (("        return loss.detach()\n", "        self.critic.weight.data.mul_(0.99)\n        return loss.detach()\n"), [41]),
    # a buffer that computes with torch may queue GPU work after the read
    (("            self.priorities[i] = p\n", "            self.priorities[i] = torch.as_tensor(p)\n"), [40]),
])
def test_a_read_right_after_an_update_that_ends_with_a_needed_read(change, lines):
    source = _DRAINED.replace(*change) if change else _DRAINED
    assert [d.line for d in lint(source, "TL101")] == lines


_SHARED = fixture_text("TL101", "clean_validation_branch_of_a_shared_loop.py")


@pytest.mark.parametrize("change, lines", [
    ((), []),
    # the read in the branch that trains: every training step
    (("            step += 1\n", "            step += 1\n            writer.add_scalar('loss', loss.item(), step)\n"), [16]),
    # another test than the one around the step: the else may run in a training iteration
    (("        if is_train:\n            step += 1\n", "        if step > 10:\n            step += 1\n"), [17]),
    # the test's name rebound in the loop: the two tests may differ within one iteration
    (("            step += 1\n", "            step += 1\n            is_train = step < 1000\n"), [18]),
])
def test_a_read_in_the_else_of_the_test_that_guards_every_step(change, lines):
    source = _SHARED.replace(*change) if change else _SHARED
    assert [d.line for d in lint(source, "TL101")] == lines


_TOP_LEVEL = fixture_text("TL101", "clean_top_level_loop_on_the_cpu.py")


@pytest.mark.parametrize("change", [
    ("net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))",
     "net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)).cuda()"),  # the model goes first
    ("optimizer = torch.optim.SGD", "net.cuda()\noptimizer = torch.optim.SGD"),  # moved after its binding
    ("    optimizer.zero_grad()\n", "    inputs = inputs.cuda()\n    optimizer.zero_grad()\n"),  # the batch moves
    ('torch.set_default_tensor_type("torch.DoubleTensor")', 'torch.set_default_device("cuda")'),  # a GPU default
])
def test_a_top_level_loop_that_may_compute_on_the_gpu_is_reported(change):
    assert lint(_TOP_LEVEL, "TL101") == []
    assert [d.code for d in lint(_TOP_LEVEL.replace(*change), "TL101")] == ["TL101"]
