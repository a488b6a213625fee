"""A small image classifier trained the way many tutorials do it: correct, but slower than it needs to be.

Run `torchlint check examples/` to see what torchlint finds here, and `torchlint fix examples/` for the fixes.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ConvNet(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, kernel_size=3, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(64, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


def load_split(path: str):
    images = torch.tensor(np.load(f"{path}/images.npy"))
    labels = torch.tensor(np.load(f"{path}/labels.npy"))
    return TensorDataset(images.float(), labels.long())


def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> float:
    model.eval()
    correct = 0
    for images, labels in loader:
        logits = model(images.to(device))
        correct += (logits.argmax(1) == labels.to(device)).sum().item()
    return correct / len(loader.dataset)


def train(model, train_loader, val_loader, device, epochs: int = 10) -> None:
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
    for epoch in range(epochs):
        model.train()
        running_loss = 0.0
        for images, labels in train_loader:
            optimizer.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(images.to(device)), labels.to(device))
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
        accuracy = evaluate(model, val_loader, device)
        print(f"epoch {epoch}: loss {running_loss / len(train_loader):.3f}, accuracy {accuracy:.3f}")


if __name__ == "__main__":
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    train_loader = DataLoader(load_split("data/train"), batch_size=128, shuffle=True)
    val_loader = DataLoader(load_split("data/val"), batch_size=256)
    train(ConvNet().to(device), train_loader, val_loader, device)
