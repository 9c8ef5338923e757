"""``ebb lint`` rules EBB101 and EBB102: DeepSpeed configs (EBB103/EBB104, PyTorch scripts, live in
:mod:`ebb.lint.rules_torch` and are re-exported here).

* EBB101 ZeRO stage 2/3 without optimizer offload (or offload without pinned memory) and EBB102
  static fp16 loss scale read the parsed DeepSpeed JSON; a key the file leaves out takes DeepSpeed's
  default from :data:`ebb.lint.defaults.DEEPSPEED_DEFAULTS` (file and commit recorded there).
* Every check is a generator of :class:`~ebb.lint.core.Finding` and stays silent where the file
  does not decide the question (ZeRO stage ``"auto"`` or 0/1) rather than guess.

The rule instances, with their texts, are registered in :mod:`ebb.lint.rules`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ebb.lint.core import Document, Finding
from ebb.lint.core import RuleBase as _Base
from ebb.lint.defaults import DEEPSPEED_DEFAULTS, default_of
from ebb.lint.rules_torch import DataLoaderSettings as DataLoaderSettings
from ebb.lint.rules_torch import EagerInferenceLoop as EagerInferenceLoop

__all__ = ["DataLoaderSettings", "EagerInferenceLoop", "Fp16StaticLossScale", "ZeroOffload"]


# ------------------------------------------------------------------------------------ DeepSpeed
def _ds_default(key: str) -> object:
    return default_of(DEEPSPEED_DEFAULTS, key)


class ZeroOffload(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        zero = document.get("zero_optimization")
        if not isinstance(zero, dict):
            return
        stage = zero.get("stage")
        if isinstance(stage, bool) or not isinstance(stage, int) or stage < 2:
            return  # "auto" or stage 0/1: not decided by this file
        if zero.get("cpu_offload") is True:
            return  # legacy flag: offloads the optimizer state to pinned CPU memory
        off = zero.get("offload_optimizer")
        device = off.get("device", _ds_default("zero_optimization.offload_optimizer.device")) \
            if isinstance(off, dict) else _ds_default("zero_optimization.offload_optimizer.device")
        if device not in ("cpu", "nvme"):
            yield self.finding(document, ("zero_optimization", "stage"),
                               f"ZeRO stage {stage} without optimizer offload (offload_optimizer.device is "
                               f"{device!r}): optimizer state stays in GPU memory")
        elif isinstance(off, dict) and off.get("pin_memory", _ds_default(
                "zero_optimization.offload_optimizer.pin_memory")) is not True:
            yield self.finding(document, ("zero_optimization", "offload_optimizer"),
                               f"optimizer offloaded to {device} without pin_memory: true "
                               "(pageable copies are slower)")


class Fp16StaticLossScale(_Base):
    def check(self, document: Document) -> Iterator[Finding]:
        fp16 = document.get("fp16")
        if not isinstance(fp16, dict) or fp16.get("enabled") is not True:
            return
        scale = fp16.get("loss_scale", _ds_default("fp16.loss_scale"))
        if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale != 0:
            yield self.finding(document, ("fp16", "loss_scale"),
                               f"fp16 with a static loss_scale of {scale:g}: overflows skip steps or "
                               "gradients underflow; use dynamic scaling (loss_scale 0)")
