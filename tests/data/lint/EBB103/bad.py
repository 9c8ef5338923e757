import torch
from torch.utils.data import DataLoader

device = torch.device("cuda")


def train(dataset: object) -> None:
    loader = DataLoader(dataset, batch_size=32, num_workers=0)
    for batch in loader:
        batch.to(device)
