"""Library defaults the lint rules rely on when a config or call leaves a setting out.

Each :class:`LibraryDefault` names the library file and the commit it was read at, so a rule's
verdict on an absent key can be traced to the library version that decides it: EBB101/EBB102 read
:data:`DEEPSPEED_DEFAULTS`, EBB103 reads :data:`TORCH_DATALOADER_DEFAULTS`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEEPSPEED_DEFAULTS", "TORCH_DATALOADER_DEFAULTS", "LibraryDefault", "default_of"]


@dataclass(frozen=True)
class LibraryDefault:
    """A value a library uses when a config leaves the key out, and where that was read."""

    key: str
    value: object
    source: str  # repository, file and the commit (or release) the value was read at


DEEPSPEED_DEFAULTS: dict[str, LibraryDefault] = {d.key: d for d in (
    # Read in deepspeedai/DeepSpeed at commit 1978617c691b2c992a17902975187ef8d61176fa (master, 2025;
    # the pydantic offload config with `super_offload`). Older releases that only know the legacy
    # `cpu_offload: true` flag are handled in ZeroOffload.check before these defaults are consulted.
    LibraryDefault("zero_optimization.offload_optimizer.device", "none",
                   "deepspeedai/DeepSpeed deepspeed/runtime/zero/offload_config.py@1978617c "
                   "(DeepSpeedZeroOffloadOptimizerConfig.device = \"none\")"),
    LibraryDefault("zero_optimization.offload_optimizer.pin_memory", False,
                   "deepspeedai/DeepSpeed deepspeed/runtime/zero/offload_config.py@1978617c "
                   "(DeepSpeedZeroOffloadOptimizerConfig.pin_memory = False)"),
    LibraryDefault("fp16.loss_scale", 0,
                   "deepspeedai/DeepSpeed deepspeed/runtime/constants.py (FP16_LOSS_SCALE_DEFAULT = 0, "
                   "\"zero means using dynamic scaling\"; same in every release read)"),
)}
"""The DeepSpeed defaults EBB101/EBB102 rely on when a key is absent, with their provenance."""




TORCH_DATALOADER_DEFAULTS: dict[str, LibraryDefault] = {d.key: d for d in (
    # Read in pytorch/pytorch torch/utils/data/dataloader.py at commit
    # 0025348e03d0307b815c0043b702e2a64c2ef752 (main, 2025). PyTorch 2.0 made prefetch_factor
    # Optional[int] = None (2 filled in when num_workers > 0; a value with num_workers == 0 raises
    # ValueError); 1.x had prefetch_factor=2 always. Either way a loader with workers prefetches 2.
    LibraryDefault("num_workers", 0, "pytorch/pytorch torch/utils/data/dataloader.py@0025348e (num_workers: int = 0)"),
    LibraryDefault("pin_memory", False, "pytorch/pytorch torch/utils/data/dataloader.py@0025348e (pin_memory: bool = False)"),
    LibraryDefault("prefetch_factor", 2, "pytorch/pytorch torch/utils/data/dataloader.py@0025348e "
                   "(None, set to 2 when num_workers > 0; ValueError when given with num_workers == 0)"),
)}
"""PyTorch ``DataLoader`` defaults EBB103 relies on, with their provenance."""


def default_of(table: dict[str, LibraryDefault], key: str) -> object:
    """The default value of ``key``; a key missing from ``table`` is a programming error (KeyError)."""
    return table[key].value
