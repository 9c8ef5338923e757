"""Per-replica latency model of a continuous-batching LLM server, calibrated on a real H200.

Calibration data: ``shared/data/gpu/h200-serving`` (one NVIDIA H200, a 3.2 B-parameter bf16
decoder served by an eager-PyTorch continuous-batching loop, max batch 64). How each number was
fitted (``tests/unit/sim/test_latency.py`` refits them from the shared files when present):

* **Prefill** (``pareto.csv``, kind=prefill, B requests of ``seq`` tokens one after another):
  per-request time = latency / B. For 512 and 896 tokens it grows linearly at 11.9 µs/token
  (84 k tokens/s; the README's 82–93 k tokens/s); at 128 tokens it is flat at 2.7–5.3 ms,
  i.e. launch-bound. Model: ``prefill_ms(n) = max(prefill_floor_ms, n × prefill_ms_per_token)``
  with floor 4.0 ms and 0.0119 ms/token: within 12 % of every sweep point at 512/896 tokens
  and inside the 128-token spread.
* **Decode step** (``iterations.csv``, iterations with no prefill): the median step per batch
  size, weighted least squares over batch 1…64: ``step_ms(b) = 3.79 + 0.0425 × b`` — the loop is
  launch-bound (no CUDA graphs), so batching is almost free up to the 64-slot cap.
* **Prefill interference**: the loop prefills admitted requests before decoding, so decode of
  running requests stalls while others prefill. The simulator stretches a request's decode by
  ``1 / (1 − u_prefill)`` where ``u_prefill`` is the replica's recent prefill share (capped at
  ``max_prefill_share``). On the real replay this reproduces the measured per-token time going
  from 5.3 ms (Azure conversation phase, light prefill) to 12.6 ms (bursts phase).

Guarantee: all functions are pure and vectorised (numpy arrays in, arrays out).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class LatencyModel:
    """Calibrated service-time model of one replica (one GPU). Defaults: the H200 fit above."""

    prefill_floor_ms: float = 4.0
    """Minimum prefill time of one request (ms): kernel-launch bound below ~330 tokens."""
    prefill_ms_per_token: float = 0.0119
    """Prefill cost per prompt token (ms/token) = 84 k tokens/s on the H200."""
    decode_base_ms: float = 3.79
    """Decode step time at batch 0 (ms): the launch-bound floor of one iteration."""
    decode_ms_per_seq: float = 0.0425
    """Extra decode step time per active sequence (ms)."""
    max_batch: int = 64
    """Concurrent sequences per replica (KV-cache slots); more requests wait in a queue."""
    max_prefill_share: float = 0.9
    kv_capacity_tokens: int = 65_536
    """KV-cache capacity of one replica (tokens): the H200 run preallocated 64 slots × 1,024
    positions (``h200-serving/README.md``). The simulator reports usage against it
    (:attr:`~ebb.model.observation.PodView.kv_usage_ratio`); admission stays slot-bound."""
    """Cap on the prefill share used to stretch decode, so decode always progresses."""

    def prefill_ms(self, tokens_in: FloatArray | float) -> FloatArray:
        """Prefill time (ms) of requests with ``tokens_in`` prompt tokens."""
        t = np.asarray(tokens_in, dtype=np.float64)
        return np.maximum(self.prefill_floor_ms, t * self.prefill_ms_per_token)

    def step_ms(self, batch: FloatArray | float) -> FloatArray:
        """Decode iteration time (ms) with ``batch`` active sequences (clipped to [1, max_batch])."""
        b = np.clip(np.asarray(batch, dtype=np.float64), 1.0, float(self.max_batch))
        return self.decode_base_ms + self.decode_ms_per_seq * b

    def prefill_ms_scalar(self, tokens_in: float) -> float:
        """Scalar fast path of :meth:`prefill_ms` for the event loop."""
        v = tokens_in * self.prefill_ms_per_token
        return v if v > self.prefill_floor_ms else self.prefill_floor_ms

    def step_ms_scalar(self, batch: float) -> float:
        """Scalar fast path of :meth:`step_ms` for the event loop."""
        b = 1.0 if batch < 1.0 else (float(self.max_batch) if batch > self.max_batch else batch)
        return self.decode_base_ms + self.decode_ms_per_seq * b


H200_DEFAULT = LatencyModel()
"""The calibrated default (see the module docstring for the fit)."""
