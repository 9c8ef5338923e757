"""``dynamo``: NVIDIA Dynamo's SLA planner (throughput-based scaling), on one aggregated replica pool.

Upstream: ``ai-dynamo/dynamo``, ``components/src/dynamo/planner/`` —
``utils/planner_core.py`` and ``utils/prefill_planner.py`` (commit ``002a7c3130e71d5849540cae64fcba2ed9e2d899``),
``utils/decode_planner.py`` (commit ``0ff5001282458c8804ee72c78a9658e3bf27a011``), ``defaults.py``
(commit ``01127723af550cba4698ac5a875f02dabaa1994a``); the interpolators and predictors are in
:mod:`ebb.sim.peers.dynamo_profile` and :mod:`ebb.sim.peers.dynamo_predictors`.

Every ``adjustment_interval`` (180 s) the planner reads its frontend's metrics over the interval —
request count, mean ISL / OSL, mean TTFT / ITL, mean request duration (here the increase of
``Observation.serving`` since the last adjustment) — feeds count / ISL / OSL to three load predictors
(default ARIMA), skips the adjustment when TTFT, ITL, ISL or OSL is NaN (no traffic), and then
runs steps 1–4. The request count is ``increase(dynamo_frontend_requests_total[180s])``; that counter
carries the request's final status (``lib/llm/src/http/service/metrics.rs`` @ ``0014908a``), so it
counts requests as they finish, as our counters do: under overload the planner sees the served rate.

1. **Correction factors** (unless ``correction=off``, upstream ``--no-correction``):
   prefill ``p = observed TTFT / profile TTFT(observed ISL)``; decode ``d = observed ITL / profile
   ITL(concurrency, ISL + OSL/2)`` with ``concurrency = count / workers × duration / interval``
   (skipped with no workers).
2. **Prefill demand** ``count × ISL / interval × min(1, p)`` tokens/s over the profile's prefill
   tokens/s per GPU at the predicted ISL.
3. **Decode demand** ``count × OSL / interval`` tokens/s over the best profiled decode tokens/s per
   GPU whose ITL meets ``itl / d`` (``itl`` when ``d ≤ 0``) at context ISL + OSL/2.
4. ``max(⌈demand⌉, min_endpoint)``, then the GPU budget: above ``max`` GPUs the count is scaled by
   ``max / required`` and floored (at least ``min_endpoint``).

**Aggregated pool.** Upstream's throughput planner sizes separate prefill and decode pools
(``mode`` disagg / prefill / decode); its aggregated planner of that version is load-based only
(``utils/agg_planner.py`` @ ``0ff50012``), and the newer aggregated throughput mode
(``core/throughput_scaling.py::_throughput_agg``, commit ``0c9050c9145373a09157ded5f64e6784abb1dc3b``)
divides the request rate by one engine's rate with prefill and decode sharing the GPU. Our replicas
do both on one GPU, so we combine the two demands the same way: replicas =
``max(⌈prefill GPU-fraction + decode GPU-fraction⌉, min_endpoint)`` — each request costs its
prefill share plus its decode share of a GPU-second. The disaggregated counts are in the reason.

**TTFT target.** In this planner the TTFT target enters at pre-deployment profiling; at run time it
only sets the latency floor of the newer version (``_compute_prefill_replicas``, same commit):
``⌈profile TTFT / target⌉`` replicas when the profiled TTFT at the predicted ISL exceeds the target.
**ITL target** (``itl``): default ``(e2e SLO − TTFT SLO) / 1,899`` ms — every response up to the
longest Azure 2023 output (1,899 tokens) meets the e2e SLO when each gap meets it (30.5 ms at the
defaults); upstream's default is 50 ms. ``max`` defaults to ``max(4, 2 × oracle peak)`` replicas
(upstream ``max_gpu_budget`` 8; one GPU per replica here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ebb.config.policy_specs import PolicySpecItem, check_keys, param_choice, param_float
from ebb.model.decision import Decision
from ebb.model.observation import Observation, Pipeline, ServingCounters
from ebb.model.spans import NO_SPANS, Spans
from ebb.sim.peers.dynamo_predictors import DEFAULT_PREDICTOR, PREDICTORS, LoadPredictor, make_predictor
from ebb.sim.peers.dynamo_profile import DecodeProfile, PrefillProfile, h200_profile
from ebb.sim.policy import Policy
from ebb.sim.policy_context import PolicyContext

KEYS: tuple[str, ...] = ("predictor", "interval", "ttft", "itl", "min", "max", "correction")
HELP = ("NVIDIA Dynamo SLA planner (throughput mode, aggregated pool) on the bundled H200 profile: "
        "predictor=arima|kalman|constant (arima), interval (180 s), ttft (SLO TTFT, ms), "
        "itl ((e2e-ttft)/1899 ms), min (1), max (2x oracle peak, >=4), correction=on|off (on)")

ADJUSTMENT_INTERVAL_S = 180.0
"""Upstream ``adjustment_interval`` default (``defaults.py``)."""
LONGEST_OSL_TOKENS = 1_899
"""Longest Azure 2023 response, the reference output length for the default ITL target."""


# ---- the formulas (pure; ported upstream cases test these) ----------------------------------------

def prefill_correction(observed_ttft_ms: float, profile_ttft_ms: float) -> float:
    """Upstream ``p_correction_factor``: observed TTFT over the profile's at the observed ISL."""
    return observed_ttft_ms / profile_ttft_ms


def decode_concurrency(num_req: float, num_workers: int, request_duration_s: float, interval_s: float) -> float:
    """Requests in flight per worker by Little's law, as upstream feeds the ITL interpolator."""
    return num_req / num_workers * request_duration_s / interval_s


def decode_correction(observed_itl_ms: float, profile_itl_ms: float) -> float:
    """Upstream ``d_correction_factor``: observed ITL over the profile's at the observed load."""
    return observed_itl_ms / profile_itl_ms


def corrected_itl_ms(itl_target_ms: float, d_correction: float) -> float:
    """The ITL the decode profile must meet: ``target / d``, the target itself when ``d ≤ 0``."""
    return itl_target_ms if d_correction <= 0 else itl_target_ms / d_correction


def prefill_gpu_demand(num_req: float, isl: float, interval_s: float, p_correction: float,
                       thpt_per_gpu: float, engine_num_gpu: int = 1) -> float:
    """Prefill engines needed (fractional): tokens/s × min(1, p) over one engine's tokens/s."""
    load = num_req * isl / interval_s * min(1.0, p_correction)
    return load / thpt_per_gpu / engine_num_gpu


def decode_gpu_demand(num_req: float, osl: float, interval_s: float, thpt_per_gpu: float,
                      engine_num_gpu: int = 1) -> float:
    """Decode engines needed (fractional); 0 when no profiled throughput (upstream then answers
    ``min_endpoint``)."""
    if thpt_per_gpu <= 0:
        return 0.0
    return num_req * osl / interval_s / thpt_per_gpu / engine_num_gpu


def replicas_from_demand(demand: float, min_endpoint: int) -> int:
    """``max(⌈demand⌉, min_endpoint)``, the upstream rounding of either component."""
    return max(math.ceil(demand), min_endpoint)


def component_gpu_budget(desired: int, engine_num_gpu: int, max_gpu_budget: int, min_endpoint: int) -> int:
    """Upstream ``_apply_component_gpu_budget``: over budget → ``⌊desired × budget / required⌋`` (at
    least ``min_endpoint``); 0 when even ``min_endpoint`` does not fit; a negative budget = none."""
    if max_gpu_budget < 0:
        return desired
    required = desired * engine_num_gpu
    if required <= max_gpu_budget:
        return desired
    if max_gpu_budget < min_endpoint * engine_num_gpu:
        return 0
    return max(min_endpoint, math.floor(desired * (max_gpu_budget / required)))


def global_gpu_budget(num_p: int, num_d: int, p_gpu: int, d_gpu: int, max_gpu_budget: int,
                      min_endpoint: int) -> tuple[int, int]:
    """Upstream ``_apply_global_gpu_budget`` (disaggregated): scale both by ``budget / required``,
    prefill within ``[min_endpoint, budget less min_endpoint decode]``, the rest to decode."""
    if max_gpu_budget < 0:
        return num_p, num_d
    required = num_p * p_gpu + num_d * d_gpu
    if required <= max_gpu_budget:
        return num_p, num_d
    if max_gpu_budget < min_endpoint * (p_gpu + d_gpu):
        return 0, 0
    scale = max_gpu_budget / required
    max_prefill = math.floor((max_gpu_budget - min_endpoint * d_gpu) / p_gpu)
    num_p = max(min_endpoint, min(max_prefill, math.floor(num_p * scale)))
    num_d = max(min_endpoint, math.floor((max_gpu_budget - num_p * p_gpu) / d_gpu))
    return num_p, num_d


# ---- the policy -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class DynamoConfig:
    """The planner's knobs (upstream flag in brackets)."""

    predictor: str = DEFAULT_PREDICTOR
    """[--load-predictor] constant | arima | kalman."""
    interval_s: float = ADJUSTMENT_INTERVAL_S
    """[--adjustment-interval] seconds between adjustments."""
    ttft_ms: float = 2000.0
    """[--ttft] TTFT target (ms); default the run's SLO."""
    itl_ms: float = 30.5
    """[--itl] ITL target (ms)."""
    min_replicas: int = 1
    """[--min-endpoint]."""
    max_replicas: int = 8
    """[--max-gpu-budget] with one GPU per replica."""
    correction: bool = True
    """not [--no-correction]."""


@dataclass
class DynamoPolicy:
    """The planner as a :class:`~ebb.sim.policy.Policy`: one adjustment every ``interval_s``."""

    spec: str
    cfg: DynamoConfig
    pipeline: Pipeline
    initial: int
    prefill: PrefillProfile
    decode: DecodeProfile
    _num_req: LoadPredictor = field(init=False)
    _isl: LoadPredictor = field(init=False)
    _osl: LoadPredictor = field(init=False)
    _last: ServingCounters = field(default_factory=ServingCounters)
    p_correction: float = 1.0
    d_correction: float = 1.0

    def __post_init__(self) -> None:
        self._num_req, self._isl, self._osl = (make_predictor(self.cfg.predictor) for _ in range(3))

    @property
    def interval_s(self) -> float:
        return self.cfg.interval_s

    def decide(self, obs: Observation, *, spans: Spans = NO_SPANS) -> Decision:
        if obs.t_s == 0.0 and not obs.pods:
            return Decision.change(0.0, 0, self.initial, policy=self.spec,
                                   reasons=(f"{self.spec}: initial fleet",))
        n, why = self._adjust(obs)
        return Decision.change(obs.t_s, obs.spec_replicas, n, policy=self.spec, reasons=(f"dynamo: {why}",))

    def _adjust(self, obs: Observation) -> tuple[int, str]:
        cur = obs.spec_replicas
        if obs.serving is None:
            return cur, "no frontend metrics yet"
        m = obs.serving.minus(self._last)
        self._last = obs.serving
        num_req = m.requests_total
        isl, osl = m.mean_isl, m.mean_osl
        ttft_ms, itl_ms = m.mean_ttft_s * 1000.0, m.mean_itl_s * 1000.0
        for pred, v in ((self._num_req, num_req), (self._isl, isl), (self._osl, osl)):
            pred.add_data_point(v)
        if any(math.isnan(v) for v in (ttft_ms, itl_ms, isl, osl)):
            return cur, "no traffic in the interval (NaN metrics), adjustment skipped"
        if self.cfg.correction:
            self.p_correction = prefill_correction(ttft_ms, self.prefill.interpolate_ttft_ms(isl))
            if obs.ready_replicas > 0:
                conc = decode_concurrency(num_req, obs.ready_replicas, m.e2e_sum_s / num_req, self.cfg.interval_s)
                self.d_correction = decode_correction(itl_ms, self.decode.interpolate_itl_ms(conc, isl + osl / 2))
        return self.plan(self._num_req.predict_next(), self._isl.predict_next(), self._osl.predict_next())

    def plan(self, num_req: float, isl: float, osl: float) -> tuple[int, str]:
        """Replicas for the predicted interval (count, ISL, OSL) with the current correction factors."""
        c = self.cfg
        p_thpt = self.prefill.interpolate_thpt_per_gpu(isl)
        p_frac = prefill_gpu_demand(num_req, isl, c.interval_s, self.p_correction, p_thpt)
        p_ttft = self.prefill.interpolate_ttft_ms(isl)
        sla_floor = math.ceil(p_ttft / c.ttft_ms) if p_ttft > c.ttft_ms else 1
        itl = corrected_itl_ms(c.itl_ms, self.d_correction)
        d_thpt, _, _ = self.decode.find_best_throughput_per_gpu(itl, isl + osl / 2)
        d_frac = decode_gpu_demand(num_req, osl, c.interval_s, d_thpt)
        want = max(replicas_from_demand(p_frac + d_frac, c.min_replicas), sla_floor)
        n = component_gpu_budget(want, 1, c.max_replicas, c.min_replicas)
        why = (f"predicted {num_req:.0f} req, ISL {isl:.0f}, OSL {osl:.0f}; prefill {p_frac:.2f} GPU "
               f"(p={self.p_correction:.2f}), decode {d_frac:.2f} GPU at ITL {itl:.1f} ms "
               f"(d={self.d_correction:.2f}) -> {n} (disagg would be "
               f"{replicas_from_demand(p_frac, c.min_replicas)}P+{replicas_from_demand(d_frac, c.min_replicas)}D)")
        return n, why

    def observe(self, obs: Observation) -> None:
        """Nothing between adjustments: the planner reads interval totals at each adjustment."""

    def gate_queries(self) -> tuple[str, ...]:
        return ()


def build(item: PolicySpecItem, ctx: PolicyContext) -> Policy:
    """``dynamo`` from its spec; ConfigError names the spec and the bad knob."""
    check_keys(item, KEYS)
    slo = ctx.settings.slo
    mn, mx = ctx.bounds(item, min_lo=1)
    default_itl = max(1.0, (slo.e2e_ms - slo.ttft_ms) / LONGEST_OSL_TOKENS)
    cfg = DynamoConfig(
        predictor=param_choice(item, "predictor", DEFAULT_PREDICTOR, PREDICTORS),
        interval_s=param_float(item, "interval", ADJUSTMENT_INTERVAL_S, lo=1.0),
        ttft_ms=param_float(item, "ttft", slo.ttft_ms, lo=0.1),
        itl_ms=param_float(item, "itl", default_itl, lo=0.1),
        min_replicas=mn, max_replicas=mx,
        correction=param_choice(item, "correction", "on", ("on", "off")) == "on",
    )
    prefill, decode = h200_profile()
    scrape = ctx.settings.pipeline.scrape_interval_s
    # Counters from the frontend's /metrics at each Prometheus scrape; no per-pod values needed.
    pipe = Pipeline(scrape, 1, per_pod=False, serving=True)
    return DynamoPolicy(item.text, cfg, pipe, min(mx, ctx.initial_replicas), prefill, decode)
