"""TL706 convnet-not-channels-last: the spellings of a torchvision convnet, and the ones that are not."""

import pytest

from fixture_support import lint

SCRIPT = '''import torch
{imports}

model = {build}.cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for images, labels in torch.load("batches.pt"):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(model(images.cuda()), labels.cuda())
    loss.backward()
    optimizer.step()
'''


@pytest.mark.parametrize("imports, build", [
    ("import torchvision", "torchvision.models.resnet50()"),
    ("from torchvision import models", "models.efficientnet_b0()"),
    ("import torchvision.models as tvm", "tvm.convnext_tiny()"),
    ("from torchvision.models import wide_resnet50_2", "wide_resnet50_2()"),
    ("from torchvision.models.resnet import resnext50_32x4d", "resnext50_32x4d()"),
    ("from torchvision.models.segmentation import deeplabv3_resnet50", "deeplabv3_resnet50()"),
    ("import torchvision", "torchvision.models.mobilenet_v3_large()"),
])
def test_a_torchvision_convnet_is_a_convolutional_model(imports, build):
    assert len(lint(SCRIPT.format(imports=imports, build=build), "TL706")) == 1


@pytest.mark.parametrize("imports, build", [
    ("import torchvision", "torchvision.models.swin_t()"),
    ("from torchvision.models import detection", "detection.retinanet_resnet50_fpn()"),
    ("from torchvision.models.video import r2plus1d_18", "r2plus1d_18()"),
    ("import torchvision", "torchvision.models.get_model('resnet50')"),
    ("import mylib as torchvision_like", "torchvision_like.models.resnet50()"),
])
def test_other_models_are_not_known_convnets(imports, build):
    assert lint(SCRIPT.format(imports=imports, build=build), "TL706") == []
