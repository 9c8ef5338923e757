import torch
from torch.utils.data import DataLoader

device = torch.device("cuda")
loader = DataLoader([1, 2], batch_size=2)  # ebb: ignore[EBB103]
