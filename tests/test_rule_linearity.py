"""Every rule's work grows linearly with its input (issue 27, item 6): the shapes that were quadratic or worse
(N `.item()` reads in one loop, N accumulators fixed at once, N `zero_grad` calls, N closures in one
function) are checked, and fixed, at N and 2N, and the Python calls made are counted: no timing, so a busy
machine cannot fail it. A linear rule makes about twice the calls at 2N; a pair walk makes four times."""

from __future__ import annotations

import sys

import pytest

from torchlint.config import Settings
from torchlint.engine import fix_source, lint_source
from torchlint.registry import all_rules

LOOP = "import torch\n\ndef train(model, loader, opt):\n{before}    for x, y in loader:\n" \
       "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n{body}"


def reads(n: int) -> str:
    return LOOP.format(before="", body="".join(f"        v{i} = loss.item()\n" for i in range(n)))


def guarded_reads(n: int) -> str:  # load-bearing reads: each is tested against every earlier one
    return LOOP.format(before="", body="".join(f"        if loss.item() > {i}:\n            stop = {i}\n"
                                               for i in range(n)))


def accumulators(n: int) -> str:
    return LOOP.format(before="".join(f"    acc{i} = 0.0\n" for i in range(n)),
                       body="".join(f"        acc{i} += loss.item()\n" for i in range(n)))


def zero_grads(n: int) -> str:
    return LOOP.format(before="", body="        opt.zero_grad(set_to_none=False)\n" * n)


def closures(n: int) -> str:  # each closure is asked whether its function returns it
    inner = "".join(f"    def evaluate{i}(loader):\n        model.eval()\n        for x in loader:\n"
                    f"            out = model(x)\n" for i in range(n))
    return f"import torch\n\ndef build(model):\n{inner}    return evaluate0\n"


def helper_chain(n: int) -> str:  # a step reaches N helpers, each calling the next and reading a value
    helpers = "".join(f"def helper{i}(loss):\n    print(loss.item())\n    helper{i + 1}(loss)\n\n" for i in range(n))
    return helpers + f"def helper{n}(loss):\n    helper0(loss)\n\n" + LOOP.format(before="", body="        helper0(loss)\n")


def synchronized_reads(n: int) -> str:  # each read asks whether a synchronize came just before it
    return LOOP.format(before="", body="        torch.cuda.synchronize()\n" + "".join(
        f"        print(loss.item(), {i})\n" for i in range(n)))


def first_steps(n: int) -> str:  # each branch asks whether it tests the loop's counter
    return LOOP.replace("for x, y in loader", "for i, (x, y) in enumerate(loader)").format(
        before="", body="".join(f"        if i == {i}:\n            print(loss.item())\n" for i in range(n)))


def training_scripts(n: int) -> str:
    """N renamed copies of the shipped training script in one file, as in one long real training file (the
    fuzz report's 676 KB file is 280 of them): the module-level `train_loader` bound N times reaches every
    copy's loops, and `load_split` is defined N times (each loop's loaders, each call's callees)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "examples" / "train_classifier.py").read_text()
    parts = ["import torch\nimport torch.nn as nn\nfrom torch.utils.data import DataLoader, TensorDataset\n"]
    for i in range(n):
        body = re.sub(r"\b(main|train|evaluate|model|loader|optimizer|loss|Net|build_model|dataset)\b",
                      lambda m: f"{m.group(1)}_{i}", text)
        parts.append("\n".join(line for line in body.splitlines() if not line.startswith(("import ", "from "))))
    return "\n\n".join(parts) + "\n"


def _python_calls(run) -> int:
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize("shape, n, fix", [
    (reads, 60, False), (guarded_reads, 60, False), (accumulators, 40, False), (accumulators, 20, True),
    (zero_grads, 60, False), (zero_grads, 30, True), (closures, 60, False),
    (helper_chain, 60, False), (synchronized_reads, 60, False), (first_steps, 60, False),
    (training_scripts, 30, True),
])
def test_work_grows_linearly(shape, n, fix):
    rules, settings = [rule() for rule in all_rules()], Settings()

    def work(size: int) -> int:
        source = shape(size)
        if fix:
            return _python_calls(lambda: fix_source(source, "train.py", rules, settings, unsafe=True))
        return _python_calls(lambda: lint_source(source, "train.py", rules, settings))

    work(n)  # warm: first-use imports and caches are not the rule's work
    small, large = work(n), work(2 * n)
    assert large / small < 2.4, f"{shape.__name__} x{n}: {small} calls, x{2 * n}: {large} ({large / small:.2f}x)"
