"""TL105 cuda-synchronize-in-step: which synchronizes run on every step, and which have a reason."""

import textwrap

import pytest

from fixture_support import lint

HEAD = "import time\nimport torch\n"
LOOP = """
for step, (x, y) in enumerate(loader):
    loss = model(x.cuda(), y.cuda())
    loss.backward()
    optimizer.step()
{body}
"""


def _found(body: str, head: str = HEAD):
    return lint(head + LOOP.format(body=textwrap.indent(textwrap.dedent(body), "    ")), "TL105")


@pytest.mark.parametrize("body", [
    "torch.cuda.synchronize()\n",
    "torch.cuda.synchronize(0)\n",
    "torch.accelerator.synchronize()\n",
    "if torch.cuda.is_available():\n    torch.cuda.synchronize()\n",  # the same answer on every step
    "if args.cuda:\n    torch.cuda.synchronize()\n",
    "if step % 10 == 0:\n    print(step)\nelse:\n    torch.cuda.synchronize()\n",  # the other steps
    "for _ in range(2):\n    torch.cuda.synchronize()\n",
    "x.to('cuda', non_blocking=True)\ntorch.cuda.synchronize()\n",  # to the device: no host buffer to wait for
])
def test_reported(body):
    assert len(_found(body)) == 1


@pytest.mark.parametrize("body", [
    "torch.cuda.synchronize()\nt = time.perf_counter()\n",  # timing code
    "torch.cuda.synchronize()\nms = start.elapsed_time(end)\n",
    "if step % 10 == 0:\n    torch.cuda.synchronize()\n",  # a logging interval
    "if step == 0:\n    torch.cuda.synchronize()\n",  # reads what the loop assigns: some steps only
    "if ready(step):\n    torch.cuda.synchronize()\n",
    "try:\n    pass\nexcept RuntimeError:\n    torch.cuda.synchronize()\n",
    "y.to('cpu', non_blocking=True)\ntorch.cuda.synchronize()\n",  # the host reads the copy next
    "torch.cuda.current_stream().synchronize()\n",  # one stream, not the device
    "flag and torch.cuda.synchronize()\n",
])
def test_silent(body):
    assert _found(body) == []


def test_aliases_and_step_functions():
    source = textwrap.dedent("""
        import torch.cuda as tc
        from torch.cuda import synchronize as sync

        def step(model, opt, batch):
            model(batch).sum().backward()
            opt.step()
            sync()

        for batch in loader:
            step(model, opt, batch)
            tc.synchronize()
    """)
    assert [d.line for d in lint(source, "TL105")] == [8, 12]


def test_a_step_function_no_loop_calls_is_not_known_to_run_every_step():
    source = "import torch\ndef step(model, opt):\n    model().backward()\n    opt.step()\n    torch.cuda.synchronize()\n"
    assert lint(source, "TL105") == []


def test_the_clock_of_the_loop_that_calls_the_step_counts():
    source = textwrap.dedent("""
        import time, torch
        def step(model, opt):
            model().backward()
            opt.step()
            torch.cuda.synchronize()
        for _ in range(10):
            t0 = time.time()
            step(model, opt)
            print(time.time() - t0)
    """)
    assert lint(source, "TL105") == []


def test_an_item_right_after_names_the_synchronize_as_the_cost():
    (finding,) = _found("torch.cuda.synchronize()\nvalue = loss.item()\n")
    assert finding.message.endswith("; the `loss.item()` right after it finds its value ready: the wait is paid "
                                    "here, and removing that read alone gains nothing")
    (plain,) = _found("torch.cuda.synchronize()\nvalue = loss.detach()\n")
    assert "right after" not in plain.message


@pytest.mark.parametrize("body, found", [
    ("torch.cuda.synchronize() if torch.cuda.is_available() else None\n", 1),
    ("None if torch.cuda.is_available() else torch.cuda.synchronize()\n", 1),
    ("torch.cuda.synchronize() if step == 0 else None\n", 0),
    ("match mode:\n    case 'sync':\n        torch.cuda.synchronize()\n", 0),
])
def test_conditional_expressions_and_match(body, found):
    assert len(_found(body)) == found


@pytest.mark.parametrize("body", [
    "torch.cuda.current_stream().synchronize()\n",
    "torch.cuda.default_stream(0).synchronize()\n",
    "torch.cuda.current_stream(torch.device('cuda')).synchronize()\n",
    "stream = torch.cuda.current_stream()\nstream.synchronize()\n",
    "done = torch.cuda.Event()\ndone.record()\ndone.synchronize()\n",  # not a timing event: no clock read
    "torch.cuda.Event.synchronize(done)\n",
    "torch.cuda.Stream.synchronize(stream)\n",
])
def test_a_stream_or_event_synchronize_is_not_the_device(body):
    assert _found(body) == []


def test_the_same_loop_with_a_device_synchronize_is_reported():
    """The near miss above differs only in what it waits for: the device's synchronize is found there."""
    assert len(_found("done = torch.cuda.Event()\ndone.record()\ntorch.cuda.synchronize()\n")) == 1


IMPORTED_STEP = """
import torch
from engine_utils import scaled_backward_and_step

for x, y in loader:
    loss = criterion(model(x.cuda()), y.cuda())
    optimizer.zero_grad()
    scaled_backward_and_step(loss, optimizer, parameters=model.parameters())
    torch.cuda.synchronize()
"""


def test_a_step_run_by_another_files_helper_is_not_known_to_train():
    assert lint(textwrap.dedent(IMPORTED_STEP), "TL105") == []
    scaler = IMPORTED_STEP.replace("from engine_utils import scaled_backward_and_step",
                                   "from engine_utils import GradScaler\nloss_scaler = GradScaler()") \
                          .replace("scaled_backward_and_step(", "loss_scaler(")
    assert lint(textwrap.dedent(scaler), "TL105") == []


def test_the_same_helper_defined_in_the_file_is_a_step():
    local = IMPORTED_STEP.replace(
        "from engine_utils import scaled_backward_and_step",
        "def scaled_backward_and_step(loss, optimizer, parameters):\n    loss.backward()\n    optimizer.step()\n")
    assert [d.line for d in lint(textwrap.dedent(local), "TL105")] == [12]
    shown = IMPORTED_STEP.replace("scaled_backward_and_step(loss,", "loss.backward()\n    scaled_backward_and_step(loss,")
    assert [d.line for d in lint(textwrap.dedent(shown), "TL105")] == [10]


TIMED_STEP = """\
import torch

from tools.timer import Timer


def benchmark(model, loss_fun, inputs, labels, iters):
    fw_timer, bw_timer = Timer(), Timer()
    for _ in range(iters):
        fw_timer.tic()
        loss = loss_fun(model(inputs), labels)
        torch.cuda.synchronize()
        fw_timer.toc()
        bw_timer.tic()
        loss.backward()
        torch.cuda.synchronize()
        bw_timer.toc()
"""


def test_a_timer_class_of_another_file_times_the_step(tmp_path):
    from torchlint.config import Settings
    from torchlint.run.job import Job
    from torchlint.run.runner import process_file

    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "__init__.py").write_text("")
    timer = tmp_path / "tools" / "timer.py"
    timer.write_text("import time\n\n\nclass Timer:\n    def tic(self):\n        self.start = time.time()\n\n"
                     "    def toc(self):\n        self.diff = time.time() - self.start\n")
    (tmp_path / "bench.py").write_text(TIMED_STEP)

    def found():
        job = Job(settings=Settings(root=tmp_path, select=frozenset({"TL105"})), mode="check")
        return [d.line for d in process_file(tmp_path / "bench.py", job).diagnostics]

    assert found() == []
    # a class of that name whose methods read no clock: nothing times the step
    timer.write_text("class Timer:\n    def tic(self):\n        self.n = 0\n\n    def toc(self):\n        self.n += 1\n")
    assert found() == [11, 15]
