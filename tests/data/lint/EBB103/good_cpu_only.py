from torch.utils.data import DataLoader


def evaluate(dataset: object) -> None:
    for batch in DataLoader(dataset):
        print(batch)
