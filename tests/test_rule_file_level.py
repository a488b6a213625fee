"""Focused tests for the file-level and opt-in rules of issue 10 (TL203, TL302, TL503, TL601, TL602, TL701):
what the fixtures do not show: tests and paths, versions, frameworks, one report per file, the default set."""

from __future__ import annotations

import textwrap

import pytest

from fixture_support import lint
from torchlint.registry import get_rule


def src(code: str) -> str:
    return textwrap.dedent(code).lstrip("\n")


CONV_SCRIPT = src(
    """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in loader:
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
        optimizer.step()
    for x, y in other_loader:
        nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
        optimizer.step()
    """
)


@pytest.mark.parametrize(
    "code, default", [("TL203", True), ("TL302", False), ("TL502", True), ("TL503", False),
                      ("TL601", False), ("TL602", False), ("TL701", False)],
)
def test_default_set(code, default):
    assert get_rule(code).default_enabled is default
    assert ("off by default" in get_rule(code).doc()) is (not default)


@pytest.mark.parametrize("code", ["TL601", "TL701"])
def test_file_level_rules_report_once_however_many_loops(code):
    assert len(lint(CONV_SCRIPT, code)) == 1


@pytest.mark.parametrize("code", ["TL601", "TL701", "TL502"])
@pytest.mark.parametrize("path", ["tests/test_train.py", "test_model.py", "conftest.py"])
def test_silent_in_tests(code, path):
    assert lint(CONV_SCRIPT, code) and lint(CONV_SCRIPT, code, path=path) == []


@pytest.mark.parametrize(
    "framework",
    ["import lightning as L", "from pytorch_lightning import Trainer", "from detectron2.engine import default_setup",
     "from mmengine.runner import Runner"],
)
def test_tl601_silent_where_a_framework_sets_benchmark(framework):
    assert lint(framework + "\n" + CONV_SCRIPT, "TL601") == []


def test_tl601_silent_where_the_conv_model_lives_in_another_file():
    source = CONV_SCRIPT.replace("nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(10))", "Net()")
    assert lint("from models import Net\n" + source, "TL601") == []


@pytest.mark.parametrize(
    "marker",
    ["from accelerate import Accelerator\naccelerator = Accelerator()", "use_amp = args.amp", "# TODO: try bf16", "model = model.double()",
     "import gym", "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP"],
)
def test_tl701_silent_where_precision_is_decided(marker):
    assert lint(marker + "\n" + CONV_SCRIPT, "TL701") == []


@pytest.mark.parametrize("version, spelled", [("1.5", None), ("1.9", "torch.cuda.amp.autocast"),
                                              ("2.2", "torch.cuda.amp.GradScaler"), ("2.4", "torch.amp.GradScaler")])
def test_tl701_names_the_apis_of_the_configured_version(version, spelled):
    diagnostics = lint(f"# torchlint-fixture: torch-version={version}\n" + CONV_SCRIPT, "TL701")
    if spelled is None:
        assert diagnostics == []
    else:
        (d,) = diagnostics
        assert spelled in d.message


def test_tl602_follows_a_seed_helper_to_its_conditional_call():
    helper = src(
        """
        import torch

        def seed(s):
            torch.manual_seed(s)
            torch.backends.cudnn.deterministic = True

        """
    )
    assert lint(helper + "seed(0)\n" + CONV_SCRIPT, "TL602")
    assert lint(helper + "if args.seed is not None:\n    seed(args.seed)\n" + CONV_SCRIPT, "TL602") == []


def test_tl302_silent_without_training_or_with_ddp():
    dp = "model = torch.nn.DataParallel(model)\n"
    assert lint(CONV_SCRIPT + dp, "TL302")
    assert lint(CONV_SCRIPT + dp + "# multi-node: see train_ddp.py (DistributedDataParallel)\n", "TL302") == []
    assert lint("import torch\n" + dp, "TL302") == []


@pytest.mark.parametrize(
    "decay, flagged",
    [("1e-4", True), ("0", False), ("0.0", False), ("5 * 1e-4", True), ("1e-4 - 1e-4", False), ("-1e-4", True),
     ("args.wd", False), ("WD", True), ("None", False)],
)
def test_tl503_decay_values(decay, flagged):
    source = f"import torch\nWD = 3e-4\nopt = torch.optim.Adam(model.parameters(), weight_decay={decay})\n"
    assert bool(lint(source, "TL503")) is flagged


def test_tl203_silent_in_files_named_for_profiling():
    source = "import torch\ntorch.autograd.set_detect_anomaly(True)\n" + CONV_SCRIPT
    assert lint(source, "TL203", path="train.py")
    assert lint(source, "TL203", path="profile_train.py") == []
    assert lint(source, "TL203", path="tests/test_train.py") == []


@pytest.mark.parametrize(
    "text, mentions",
    [("use_amp = True", True), ("args.amp", True), ("cfg.SOLVER.AMP.ENABLED", True), ("amp_dtype", True),
     ("x = sample(examples); clamp_(y); timestamp", False), ("MixedPrecision(param_dtype=...)", True),
     ("# bf16 later", True), ("x.half()", True), ("precision = 3", True), ("precision_recall(y)", False)],
)
def test_tl701_words_about_precision(text, mentions):
    from torchlint.rules.tl701_no_mixed_precision import mentions_reduced_precision

    assert mentions_reduced_precision(text) is mentions
