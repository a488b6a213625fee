"""TL702 fp32-matmul-without-tf32: versions, entry points, where the fix goes, and when it is withheld."""

from fixture_support import fix, fixture_text, lint
from torchlint.config import Settings
from torchlint.engine import lint_source
from torchlint.registry import get_rule

LOOP = (
    "model = Net().cuda()\n"
    "for x, y in loader:\n"
    "    loss = crit(model(x.cuda()), y.cuda())\n"
    "    loss.backward()\n"
    "    optimizer.step()\n"
)


def _found(source, path="train.py", version=(2, 13)):
    settings = Settings(select=("TL702",), torch_version=version)
    return lint_source(source, path, [get_rule("TL702")()], settings).diagnostics


def test_module_level_script_gets_the_setting_after_its_imports_and_a_second_fix_changes_nothing():
    source = "import torch\n\n" + LOOP
    fixed = fix(source, "TL702")
    assert fixed.startswith('import torch\n\ntorch.set_float32_matmul_precision("high")\n\nmodel =')
    assert fix(fixed, "TL702") == fixed and lint(fixed, "TL702") == []


def test_missing_torch_import_is_added():
    fixed = fix("from torch import nn\n\n" + LOOP, "TL702")
    assert "import torch\n" in fixed and 'torch.set_float32_matmul_precision("high")' in fixed
    compile(fixed, "fixed.py", "exec")


def test_torch_imported_after_the_first_statements_gets_no_fix():
    source = "from torch import nn\nSEED = 0\nimport torch\n" + LOOP
    [finding] = lint(source, "TL702")
    assert finding.fix is None and "imported after" in finding.message


def test_one_line_main_guard_gets_no_fix():
    source = "import torch\n\ndef main():\n" + "".join("    " + line + "\n" for line in LOOP.splitlines())
    source += 'if __name__ == "__main__": main()\n'
    [finding] = lint(source, "TL702")
    assert finding.fix is None and finding.line == source.splitlines().index('if __name__ == "__main__": main()') + 1


def test_silent_before_torch_1_12_when_matmuls_defaulted_to_tf32():
    assert _found("import torch\n" + LOOP, version=(1, 11)) == []
    assert len(_found("import torch\n" + LOOP, version=(1, 12))) == 1


def test_silent_in_test_files_and_where_the_code_sets_any_precision():
    assert _found("import torch\n" + LOOP, path="tests/test_train.py") == []
    for setting in ('torch.backends.cuda.matmul.fp32_precision = "ieee"\n',
                    "torch.backends.fp32_precision = cfg.precision\n"):
        assert _found("import torch\n" + setting + LOOP) == []


def test_mixed_precision_or_a_precision_framework_keeps_it_silent():
    assert _found("import torch\nmodel = model.half()\n" + LOOP) == []
    assert _found("import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n" + LOOP) == []


def test_inference_only_scripts_are_not_training():
    source = "import torch\nmodel = Net().cuda()\nfor x in loader:\n    print(model(x.cuda()))\n"
    assert _found(source) == []


_CONV_ONLY = fixture_text("TL702", "clean_convolutions_only.py")


def test_a_program_of_convolutions_only_gets_no_finding():
    assert _found(_CONV_ONLY) == []
    # a scheduler takes the optimizer, not a module: still convolutions only
    scheduled = _CONV_ONLY.replace(
        "    for epoch in range(epochs):\n",
        "    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 5)\n    for epoch in range(epochs):\n", 1)
    assert "StepLR" in scheduled and _found(scheduled) == []


import pytest  # noqa: E402


@pytest.mark.parametrize("before, after", [
    # a model the file does not show (torchvision's resnets end in a Linear)
    ('Denoiser(1, width=int("64"))', "torchvision.models.resnet18()"),
    # a module of another file of the project, whose layers the file does not show
    ('Denoiser(1, width=int("64"))', "UNet(1)"),
    # a matmul layer in the file: the old finding, without the note on convolutions
    ("nn.Conv2d(width, channels, 1))", "nn.Conv2d(width, channels, 1), nn.Flatten(), nn.Linear(4, 4))"),
    # a pickled model
    ('NoisePredictor(Denoiser(1, width=int("64")), sigma=0.25)', 'torch.load("model.pt")'),
    # a call of another package in the step
    ("loss = model(x)", "loss = model(x) + lpips.LPIPS()(x, x).mean()"),
    # a module handed in from outside: its value is not in the file
    ('def main(epochs=10, device="cuda"):\n    model = NoisePredictor(Denoiser(1, width=int("64")), sigma=0.25)',
     'def main(model, epochs=10, device="cuda"):\n    model = model'),
    # the model's class derives from a class of another package
    ("class Denoiser(nn.Module):", "class Denoiser(timm.models.ResNet):"),
])
def test_conv_programs_that_may_run_matmuls_keep_the_finding(before, after):
    assert before in _CONV_ONLY
    source = ("import torchvision\nimport lpips\nimport timm\nfrom unet import UNet\n"
              + _CONV_ONLY.replace(before, after))
    [finding] = _found(source)
    assert finding.code == "TL702"


@pytest.mark.parametrize("mention, decided", [
    ("# TODO: try TF32 here\n", False),  # prose decides nothing
    ('"""Trains fp32; see the TF32 notes."""\n', False),
    ("torch.backends.cuda.matmul.allow_tf32 = args.tf32\n", True),
    ('os.environ["NVIDIA_TF32_OVERRIDE"] = "0"\n', True),
])
def test_a_tf32_setting_is_read_off_the_code_not_its_prose(mention, decided):
    source = mention + _TF32_SCRIPT
    assert bool(lint(source, "TL702")) is not decided


_TF32_SCRIPT = """\
import os
import torch

model = torch.nn.Linear(512, 512).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.randn(100, 8, 512):
    loss = model(x.cuda()).sum()
    loss.backward()
    opt.step()
"""
