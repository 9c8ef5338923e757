"""Sweeps: policies × knobs × scenarios, expanded into independent jobs, run on any backend.

Spec format (YAML, one mapping; unknown keys are errors so a typo never silently drops a grid axis)::

    scenarios:                 # required, non-empty list
      - azure-conv             #   a bundled trace (azure-conv, azure-code; ``bundled:NAME`` also works), or
      - traces/day1.csv.gz     #   a trace file or folder (format detected as ``--format auto`` does), or
      - cluster.yaml           #   a cluster scenario: a YAML file whose top-level mapping has ``services:``
    policies:                  # required, non-empty list; one policy per entry, as ``--policy`` spells it
      - hpa:target=0.7
      - keda:threshold=40
      - ebb
    knobs:                     # optional; knob name -> list of values (a bare value is a list of one)
      cold_start_s: [30, 60, 120]
      minutes: [5]
    seed: 0                    # optional (default 0): seed for every random choice of every job
    fidelity: auto             # optional: auto (default: as ``ebb simulate`` picks) | request | fluid

Relative scenario paths are read relative to the spec file's folder. The grid is the cartesian
product of the knob lists; the sweep runs every scenario × policy × grid point, one
:class:`SweepJob` each. Knobs (:data:`KNOBS`) are ``ebb simulate``'s simulation settings, under
the option's name with ``_`` for ``-``, plus ``minutes``:

* ``minutes`` — simulate only the first N minutes of the trace (default: all of it);
* ``load_scale``, ``peak_replicas`` — as ``--load-scale`` / ``--peak-replicas``. With neither
  knob the load is calibrated to a peak of 20 replicas (``ebb simulate``'s default). A swept
  ``load_scale`` *without* ``peak_replicas`` turns that calibration off, so each value really
  multiplies the load (in ``ebb simulate`` the default calibration overrides ``--load-scale``);
* ``slo_ttft_ms``, ``slo_e2e_ms``, ``cold_start_s``, ``gpu_hour_usd``, ``metric_resolution_s``,
  ``scrape_interval_s``, ``hpa_sync_s``, ``kubelet_resolution_s``, ``fluid_bin_ms``,
  ``fault_slowdown``, ``fault_after_s`` — as the ``ebb simulate`` option of the same name;
* cluster scenarios only: ``duration_s``, ``disruption_budget``, ``writes_per_100ms`` — as the
  scenario file's keys. A knob must apply to every scenario of the spec (sweep trace and cluster
  scenarios in separate specs);
* both kinds: ``warmup_s`` — as ``--warmup-s`` (trace scenarios) or the scenario file's
  ``warmup_s`` (cluster scenarios, whole seconds rounded up): the first S seconds feed every policy
  but are not scored (:mod:`ebb.sim.warmup`); it must end before the trace (or ``minutes``) does.

Guarantees:

* Parsing (:func:`load_sweep_spec`, :func:`parse_sweep_spec`) raises one single-line
  :class:`~ebb.errors.ConfigError` naming the spec file, the key path (``knobs.cold_start_s[2]``,
  ``policies[1]``, ``scenarios[0]``) and the fix, for broken YAML, unknown keys, bad values,
  duplicates, missing scenario files and grids over :data:`MAX_JOBS` jobs.
* A job's :attr:`SweepJob.id` is the first 12 hex digits of the SHA-256 of its canonical JSON
  (:meth:`SweepJob.canonical`: scenario as written, kind, canonical policy text, knobs with their
  canonical types, seed, fidelity; sorted keys, no whitespace). It names the configuration, not
  where the spec file sits, so it is the same on every machine and in every run.
* :func:`run_job` is deterministic: the same job gives a byte-identical :func:`canonical_json` of
  its scorecard in any process, on any backend. The scorecard carries no wall-clock field
  (``wall_s`` is dropped) and NaN becomes ``null``.
* :func:`run_sweep` returns the outcomes sorted by job id, whatever the completion order; a job
  that raises becomes an outcome with a one-line ``error`` (never a traceback), and the others
  still run. Seconds per job are measured around the job and reported only in the outcome's
  ``seconds`` (progress), never in a scorecard.

Trace loading lives in :mod:`ebb.sources`, which the simulator may not import (import contract
"sim-offline"), and the cluster job (:func:`ebb.sim.cluster.sweep_job.cluster_job`) reads its traces
through a seam the CLI fills, so :func:`run_job` takes the trace loader and the cluster runner as arguments and
the backends take the job function: the CLI passes ``ebb.cli.sweep.run_job`` (a module-level
function: picklable by reference for the process pool and Ray).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, cast

import numpy as np

from ebb.config.policy_specs import MAX_KNOB, PolicySpecItem, parse_policies
from ebb.config.yamlio import (
    config_error,
    describe,
    finite_number,
    load_mapping,
    load_yaml,
    read_config_text,
)
from ebb.errors import ConfigError
from ebb.gates.pareto import pareto_mask
from ebb.model.trace import CountSeries, RequestTrace
from ebb.model.trace_ops import window
from ebb.sim.compare import FIDELITIES, compare
from ebb.sim.policies import KNOWN_POLICIES, build_policy
from ebb.sim.policy_context import PolicyContext
from ebb.sim.settings import (
    ClusterSettings,
    FaultSettings,
    MetricPipelineSettings,
    SimSettings,
    SloSettings,
)

__all__ = [
    "BUNDLED_SCENARIOS", "CHOICE_KNOBS", "ENVIRONMENT_KNOBS", "KNOBS", "MAX_JOBS", "WORKLOAD_KNOBS", "ClusterFn",
    "JobFn", "JobOutcome", "Knob", "SweepJob", "SweepSpec", "TraceLoader", "canonical_json", "comparable_group",
    "expand_jobs", "load_sweep_spec", "pareto_groups", "pareto_ids", "parse_sweep_spec", "results_json", "run_job",
    "sim_settings", "trace_job", "violation_pct",
]

MAX_JOBS: Final = 10_000
"""Most jobs one sweep may expand to: a typo'd knob list (``range`` pasted as 10⁶ values) is refused
at parse time instead of queueing days of work."""
BUNDLED_SCENARIOS: Final = ("azure-code", "azure-conv")
"""Bundled trace names a scenario may use (``ebb.sources.traces.BUNDLED_TRACES``; repeated here
because the simulator may not import the sources package — a unit test keeps them equal)."""
_DEFAULT_PEAK_REPLICAS: Final = 20
_SPEC_KEYS: Final = ("scenarios", "policies", "knobs", "seed", "fidelity")
_SPEC_FIX: Final = "see the format in docs/sweep.md"

Kind = Literal["trace", "cluster"]
KnobValue = int | float
TraceLoader = Callable[[str], RequestTrace | CountSeries]
"""Opens a trace scenario (a bundled name or an absolute path) as ``ebb simulate --trace`` does."""
ClusterFn = Callable[[str, str, Mapping[str, float], int], dict[str, Any]]
"""Runs one cluster job: ``(scenario path, policy, knobs, seed) -> scorecard`` (``cluster_job`` with the CLI's trace reader)."""
JobFn = Callable[["SweepJob"], dict[str, Any]]
"""A job runner: module-level (picklable by reference), deterministic, returns a plain JSON-able dict."""


@dataclass(frozen=True)
class Knob:
    """One sweepable simulation setting: its type, bounds and meaning."""

    kind: type[int] | type[float]
    lo: float
    hi: float = MAX_KNOB
    lo_open: bool = False
    """True: the value must be strictly above ``lo``."""
    help: str = ""
    applies: Kind | Literal["any"] = "trace"
    """The scenarios it means something for: ``trace`` (``ebb simulate``'s settings), ``cluster``, or ``any``."""

    def check(self, value: Any) -> KnobValue | None:
        """``value`` in canonical type (int or float), or None when it is not a valid value."""
        x = finite_number(value)
        if x is None or x > self.hi or x < self.lo or (self.lo_open and x == self.lo):
            return None
        if self.kind is int:
            return int(x) if x == int(x) else None
        return float(x)

    def describe_range(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        lo = f"> {self.lo:g}" if self.lo_open else f">= {self.lo:g}"
        return f"{what} {lo} and <= {self.hi:g}"


KNOBS: Final[Mapping[str, Knob]] = {
    "minutes": Knob(float, 0.0, lo_open=True, help="simulate the first N minutes of the trace"),
    "load_scale": Knob(float, 0.0, lo_open=True, help="multiply load by K (no peak calibration unless "
                                                      "peak_replicas is a knob too)"),
    "peak_replicas": Knob(int, 1.0, help="scale load so the oracle's peak is N replicas"),
    "slo_ttft_ms": Knob(float, 0.0, lo_open=True, help="TTFT SLO (ms)"),
    "slo_e2e_ms": Knob(float, 0.0, lo_open=True, help="end-to-end SLO (ms)"),
    "cold_start_s": Knob(float, 0.0, help="replica cold start (s)"),
    "gpu_hour_usd": Knob(float, 0.0, help="price per replica hour (USD)"),
    "metric_resolution_s": Knob(int, 1.0, help="metrics-server --metric-resolution (s)"),
    "scrape_interval_s": Knob(int, 1.0, help="Prometheus scrape_interval (s)"),
    "hpa_sync_s": Knob(int, 1.0, help="HPA sync period (s)"),
    "kubelet_resolution_s": Knob(int, 1.0, help="kubelet/cAdvisor resolution (s)"),
    "fluid_bin_ms": Knob(float, 100.0, 1000.0, help="fluid bin width (ms)"),
    "fault_slowdown": Knob(float, 1.0, help="injected slowdown after the first scale-down"),
    "fault_after_s": Knob(float, 0.0, help="the injected fault arms at this time (s); needs fault_slowdown"),
    "duration_s": Knob(int, 1.0, 90 * 86_400.0, help="simulated span (s) of a cluster scenario", applies="cluster"),
    "disruption_budget": Knob(int, 0.0, help="replicas L3 may remove per cycle across the cluster", applies="cluster"),
    "writes_per_100ms": Knob(int, 1.0, help="state writes (scale patches) per 100 ms", applies="cluster"),
    "warmup_s": Knob(float, 0.0, help="the first S seconds feed every policy but are not scored", applies="any"),
}
"""Every knob a sweep may vary; a knob left out keeps ``ebb simulate``'s default (trace scenarios) or
the scenario file's value (cluster scenarios). Every knob of a spec must apply to all its scenarios."""

WORKLOAD_KNOBS: Final = frozenset({"minutes", "load_scale", "peak_replicas", "slo_ttft_ms", "slo_e2e_ms",
                                   "fluid_bin_ms", "fault_slowdown", "fault_after_s", "duration_s", "warmup_s"})
"""Knobs that change what is served or how it is judged: results are comparable (one Pareto set)
only among jobs of one scenario with the same values of these."""
ENVIRONMENT_KNOBS: Final = frozenset({"cold_start_s", "gpu_hour_usd", "metric_resolution_s", "scrape_interval_s",
                                      "hpa_sync_s", "kubelet_resolution_s", "writes_per_100ms"})
"""Knobs that describe the cluster a policy runs in, not a choice between policies: how long a replica
takes to start, the price, the metric pipeline, the HPA controller's period (a kube-controller-manager
flag, one per cluster), the API server's write rate. A policy at ``cold_start_s=30`` does not beat one
at ``cold_start_s=120``: they ran in different clusters, so each value is its own Pareto set."""
CHOICE_KNOBS: Final = frozenset({"disruption_budget"})
"""Knobs a team chooses along with the policy (Ebb's L3 removals per cycle): configurations differing
only in these compete in one Pareto set. Every knob of :data:`KNOBS` is in exactly one of the three sets."""


@dataclass(frozen=True)
class SweepJob:
    """One simulation: a scenario, one policy, one grid point, a seed. Frozen and picklable."""

    scenario: str
    """The scenario as written in the spec (a bundled name or a path)."""
    kind: Kind
    policy: str
    """Canonical policy text (``hpa:target=0.7``)."""
    knobs: tuple[tuple[str, KnobValue], ...]
    """Knob values in canonical type, sorted by name."""
    seed: int
    fidelity: str
    """``auto``, ``request`` or ``fluid``."""
    path: str
    """Where the scenario is read: a bundled name, or the absolute path. Not part of :meth:`canonical`
    nor of the id (the same spec in another folder is the same sweep)."""

    def canonical(self) -> str:
        """Canonical JSON of what defines the job (sorted keys, no whitespace)."""
        return canonical_json({"scenario": self.scenario, "kind": self.kind, "policy": self.policy,
                               "knobs": dict(self.knobs), "seed": self.seed, "fidelity": self.fidelity})

    @property
    def id(self) -> str:
        """First 12 hex digits of the SHA-256 of :meth:`canonical`."""
        return hashlib.sha256(self.canonical().encode("utf-8")).hexdigest()[:12]

    def knob(self, name: str) -> KnobValue | None:
        return dict(self.knobs).get(name)

    def describe(self) -> dict[str, Any]:
        """The job as it appears in the results file (plus its id)."""
        return {"id": self.id, "scenario": self.scenario, "kind": self.kind, "policy": self.policy,
                "knobs": dict(self.knobs), "seed": self.seed, "fidelity": self.fidelity}


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep spec (see the module docstring); :func:`expand_jobs` makes its jobs."""

    source: str
    scenarios: tuple[tuple[str, Kind, str], ...]
    """(as written, kind, resolved path or bundled name) per scenario, in spec order."""
    policies: tuple[str, ...]
    knobs: tuple[tuple[str, tuple[KnobValue, ...]], ...]
    """Knob name and its values, in spec order."""
    seed: int = 0
    fidelity: str = "auto"

    @property
    def size(self) -> int:
        """Number of jobs: scenarios × policies × the product of the knob list lengths."""
        return len(self.scenarios) * len(self.policies) * math.prod(len(v) for _, v in self.knobs)


@dataclass(frozen=True)
class JobOutcome:
    """What a backend reports for one job: its scorecard, or a one-line error; and its seconds."""

    job: SweepJob
    result: dict[str, Any] | None
    error: str | None
    seconds: float
    """Wall seconds the job took where it ran (progress only; never written into a scorecard)."""
    attempts: int = 1
    """Times the job was started: 2 when its process-pool worker died and it ran once more
    (progress only; never in the results file, which stays byte-identical across backends)."""


def canonical_json(value: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, NaN/±inf as ``null``; byte-identical for equal values."""
    return json.dumps(_json_clean(value), sort_keys=True, separators=(",", ":"), allow_nan=False,
                      ensure_ascii=False)


def _json_clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, np.generic):
        return _json_clean(value.item())
    if isinstance(value, Mapping):
        return {str(k): _json_clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_clean(v) for v in value]
    return value


# --- parsing -------------------------------------------------------------------------------------


def load_sweep_spec(path: Path) -> SweepSpec:
    """Read and parse the sweep spec at ``path``; relative scenarios resolve against its folder."""
    text = read_config_text(path, "sweep spec")
    return parse_sweep_spec(text, str(path), base_dir=path.parent)


def parse_sweep_spec(text: str, source: str, *, base_dir: Path | None = None) -> SweepSpec:
    """Parse a sweep spec (module docstring); ConfigError names ``source``, the key path and the fix."""
    doc = load_mapping(text, source, "write a mapping with scenarios:, policies: and optionally knobs:, seed:")
    unknown = [k for k in doc if k not in _SPEC_KEYS]
    if unknown:
        raise config_error(source, str(unknown[0])[:60], "unknown key", f"use only {', '.join(_SPEC_KEYS)}")
    for key in ("scenarios", "policies"):
        if key not in doc:
            raise config_error(source, key, "missing", f"list at least one entry under {key}: ({_SPEC_FIX})")
    base = base_dir if base_dir is not None else Path.cwd()
    seed = doc.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise config_error(source, "seed", f"{describe(seed)} is not a non-negative integer", "write e.g. seed: 0")
    fidelity = doc.get("fidelity", "auto")
    if fidelity not in ("auto", *FIDELITIES):
        raise config_error(source, "fidelity", f"{describe(fidelity)} is not a fidelity",
                           f"choose one of auto, {', '.join(FIDELITIES)}")
    scenarios = _parse_scenarios(doc["scenarios"], source, base)
    # Trace scenarios run ebb simulate's policies: check every spec against them now. A sweep of
    # cluster scenarios only checks the grammar; the cluster simulator judges its own policies.
    policies = _parse_policies(doc["policies"], source, validate=any(k == "trace" for _, k, _ in scenarios))
    knobs = _parse_knobs(doc.get("knobs") or {}, source)
    kinds = {k for _, k, _ in scenarios}
    for name, _ in knobs:
        if KNOBS[name].applies != "any" and (KNOBS[name].applies not in kinds or len(kinds) > 1):
            raise config_error(source, f"knobs.{name}", f"applies to {KNOBS[name].applies} scenarios only, and this "
                               f"spec has {' and '.join(sorted(kinds))} scenarios",
                               "sweep trace and cluster scenarios in separate specs, each with its own knobs")
    spec = SweepSpec(source, scenarios, policies, knobs, seed, str(fidelity))
    if spec.size > MAX_JOBS:
        raise config_error(source, "knobs", f"the grid expands to {spec.size:,} jobs, more than {MAX_JOBS:,}",
                           "sweep fewer values, or split the sweep into several specs")
    return spec


def _string_list(value: Any, source: str, key: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise config_error(source, key, f"expected a non-empty list, got {describe(value)}", _SPEC_FIX)
    out: list[str] = []
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise config_error(source, f"{key}[{i}]", f"expected a non-empty string, got {describe(item)}", _SPEC_FIX)
        out.append(item.strip())
    return out


def _parse_scenarios(value: Any, source: str, base: Path) -> tuple[tuple[str, Kind, str], ...]:
    out: list[tuple[str, Kind, str]] = []
    seen: set[str] = set()
    for i, text in enumerate(_string_list(value, source, "scenarios")):
        key = f"scenarios[{i}]"
        if text in seen:
            raise config_error(source, key, f"{describe(text)} is listed twice", "list each scenario once")
        seen.add(text)
        bundled = text.removeprefix("bundled:")
        if bundled in BUNDLED_SCENARIOS:  # always the bundled slice (write ./azure-conv for a file so named)
            out.append((text, "trace", f"bundled:{bundled}"))
            continue
        p = Path(text).expanduser()
        p = p if p.is_absolute() else base / p
        if not p.exists():
            raise config_error(source, key, f"{describe(text)} does not exist ({p})",
                               "give a trace file or folder, a cluster scenario YAML, or one of "
                               + ", ".join(BUNDLED_SCENARIOS))
        out.append((text, _scenario_kind(p, source, key), str(p.resolve())))
    return tuple(out)


def _scenario_kind(path: Path, source: str, key: str) -> Kind:
    """``cluster`` for a YAML file whose top-level mapping has ``services:`` or ``generate:``; ``trace`` otherwise."""
    if not path.is_file() or path.suffix.lower() not in (".yaml", ".yml"):
        return "trace"
    doc = load_yaml(read_config_text(path, "cluster scenario"), str(path))
    if isinstance(doc, dict) and ("services" in doc or "generate" in doc):
        return "cluster"
    raise config_error(source, key, f"{path} is YAML without a top-level services: or generate: key",
                       "a YAML scenario must be a cluster scenario (services: or generate: ...); traces are CSV, "
                       "JSONL or counts")


def _parse_policies(value: Any, source: str, *, validate: bool) -> tuple[str, ...]:
    out: list[str] = []
    probe = PolicyContext(settings=SimSettings(), oracle_schedule=np.ones(1, dtype=np.int64))
    for i, text in enumerate(_string_list(value, source, "policies")):
        key = f"policies[{i}]"
        known = KNOWN_POLICIES if validate else (text.split(":", 1)[0].split(",", 1)[0].strip(),)
        try:
            items = parse_policies(text, known)
        except ConfigError as exc:
            raise config_error(source, key, str(exc), "one policy per entry, e.g. hpa:target=0.7") from exc
        if len(items) != 1:
            raise config_error(source, key, f"{describe(text)} names {len(items)} policies",
                               "write one policy per list entry")
        item: PolicySpecItem = items[0]
        if validate:
            try:  # unknown or malformed parameters fail here, before any job runs
                build_policy(item, probe)
            except ConfigError as exc:
                raise config_error(source, key, str(exc), "fix the policy's parameters (ebb simulate --help)") from exc
        if item.text in out:
            raise config_error(source, key, f"{item.text!r} is listed twice", "list each policy once")
        out.append(item.text)
    return tuple(out)


def _parse_knobs(value: Any, source: str) -> tuple[tuple[str, tuple[KnobValue, ...]], ...]:
    if not isinstance(value, dict):
        raise config_error(source, "knobs", f"expected a mapping of knob name to values, got {describe(value)}",
                           "write e.g. knobs: {cold_start_s: [30, 60]}")
    out: list[tuple[str, tuple[KnobValue, ...]]] = []
    for name, raw in value.items():
        if name not in KNOBS:
            raise config_error(source, f"knobs.{str(name)[:60]}", "unknown knob", f"use {', '.join(KNOBS)}")
        knob = KNOBS[name]
        values = raw if isinstance(raw, list) else [raw]
        if not values:
            raise config_error(source, f"knobs.{name}", "empty list", "give at least one value")
        checked: list[KnobValue] = []
        for i, v in enumerate(values):
            c = knob.check(v)
            if c is None:
                raise config_error(source, f"knobs.{name}[{i}]", f"{describe(v)} is not {knob.describe_range()}",
                                   f"{name}: {knob.help}")
            if c in checked:
                raise config_error(source, f"knobs.{name}[{i}]", f"{describe(v)} is listed twice",
                                   "list each value once")
            checked.append(c)
        out.append((str(name), tuple(checked)))
    names = {n for n, _ in out}
    if "fault_after_s" in names and "fault_slowdown" not in names:
        raise config_error(source, "knobs.fault_after_s", "without fault_slowdown there is no fault to arm",
                           "add fault_slowdown, or drop fault_after_s")
    return tuple(out)


def expand_jobs(spec: SweepSpec) -> list[SweepJob]:
    """Every scenario × policy × grid point, sorted by job id (``spec.size`` jobs, distinct ids)."""
    names = [n for n, _ in spec.knobs]
    jobs: dict[str, SweepJob] = {}
    for scenario, kind, path in spec.scenarios:
        for policy in spec.policies:
            for values in itertools.product(*(v for _, v in spec.knobs)):
                knobs = tuple(sorted(zip(names, values)))
                job = SweepJob(scenario, kind, policy, knobs, spec.seed, spec.fidelity, path)
                if job.id in jobs:  # 48-bit ids: a collision is astronomically unlikely, but never silent
                    raise ConfigError(f"{spec.source}: jobs {jobs[job.id].canonical()} and {job.canonical()} "
                                      f"share the id {job.id} (fix: change the seed)")
                jobs[job.id] = job
    return [jobs[k] for k in sorted(jobs)]


# --- one job -------------------------------------------------------------------------------------


def sim_settings(job: SweepJob) -> SimSettings:
    """The simulation settings of a trace job: ``ebb simulate``'s defaults with the job's knobs."""
    def get(name: str, default: float) -> float:
        v = job.knob(name)
        return default if v is None else float(v)

    def geti(name: str, default: int) -> int:
        v = job.knob(name)
        return default if v is None else int(v)

    slowdown = job.knob("fault_slowdown")
    return SimSettings(
        slo=SloSettings(get("slo_ttft_ms", SloSettings.ttft_ms), get("slo_e2e_ms", SloSettings.e2e_ms)),
        cluster=ClusterSettings(cold_start_s=get("cold_start_s", ClusterSettings.cold_start_s),
                                gpu_hour_usd=get("gpu_hour_usd", ClusterSettings.gpu_hour_usd)),
        pipeline=MetricPipelineSettings(
            kubelet_resolution_s=geti("kubelet_resolution_s", MetricPipelineSettings.kubelet_resolution_s),
            metrics_server_resolution_s=geti("metric_resolution_s",
                                             MetricPipelineSettings.metrics_server_resolution_s),
            scrape_interval_s=geti("scrape_interval_s", MetricPipelineSettings.scrape_interval_s),
            hpa_sync_s=geti("hpa_sync_s", MetricPipelineSettings.hpa_sync_s)),
        seed=job.seed,
        fault=None if slowdown is None else FaultSettings(float(slowdown), get("fault_after_s", 0.0)),
        warmup_s=get("warmup_s", 0.0),
    )


def run_job(job: SweepJob, load_trace: TraceLoader, run_cluster: ClusterFn | None = None) -> dict[str, Any]:
    """The scorecard of one job as a plain dict (no ``wall_s``; NaN as None): deterministic.

    Trace scenarios run ``ebb simulate``'s comparison for this one policy (same fidelity choice,
    load calibration and oracle search); ``load_trace`` opens the scenario. Cluster scenarios go
    to ``run_cluster(path, policy, knobs as floats, seed)``; without one they are a ConfigError.
    """
    if job.kind == "cluster":
        if run_cluster is None:
            raise ConfigError(f"{job.scenario}: this build of Ebb cannot run cluster scenarios "
                              "(fix: sweep trace scenarios)")
        card = dict(run_cluster(job.path, job.policy, {k: float(v) for k, v in job.knobs}, job.seed))
        card.pop("wall_s", None)
        return cast(dict[str, Any], _json_clean(card))
    trace, items, kw = trace_job(job, load_trace)
    cmp = compare(trace, items, sim_settings(job), **kw)
    card = cmp.runs[0].scorecard.as_dict()
    card.pop("wall_s", None)
    card["load_scale"] = cmp.load_scale
    return cast(dict[str, Any], _json_clean(card))


def trace_job(job: SweepJob, load_trace: TraceLoader) -> tuple[RequestTrace | CountSeries, list[PolicySpecItem],
                                                                  dict[str, Any]]:
    """A trace job's trace (cut to ``minutes``), policy and :func:`~ebb.sim.compare.compare` keywords:
    fidelity as ``ebb simulate`` picks it, the load multiple or calibration, the fluid bin."""
    trace = load_trace(job.path)
    minutes = job.knob("minutes")
    if minutes is not None:
        trace = window(trace, 0.0, float(minutes) * 60.0)
    fid = job.fidelity if job.fidelity != "auto" else ("fluid" if isinstance(trace, CountSeries) else "request")
    load_scale, peak = job.knob("load_scale"), job.knob("peak_replicas")
    peak_replicas = int(peak) if peak is not None else None if load_scale is not None else _DEFAULT_PEAK_REPLICAS
    bin_ms = job.knob("fluid_bin_ms")
    return trace, parse_policies(job.policy, KNOWN_POLICIES), {
        "fidelity": fid, "load_scale": 1.0 if load_scale is None else float(load_scale),
        "peak_replicas": peak_replicas, "fluid_bin_s": None if bin_ms is None else float(bin_ms) / 1000.0}


def violation_pct(card: Mapping[str, Any]) -> float | None:
    """A scorecard's SLO violation %: ``slo_violation_pct``, or for a cluster scorecard the violations
    over the requests of ``violations_by_class``; None when neither gives a finite number."""
    v = finite_number(card.get("slo_violation_pct"))
    if v is not None:
        return v
    by_class = card.get("violations_by_class")
    if isinstance(by_class, Mapping):
        req = sum(finite_number(c.get("requests")) or 0.0 for c in by_class.values() if isinstance(c, Mapping))
        bad = sum(finite_number(c.get("violations")) or 0.0 for c in by_class.values() if isinstance(c, Mapping))
        return 100.0 * bad / req if req > 0 else None
    return None


GroupKey = tuple[str, tuple[tuple[str, KnobValue], ...]]
"""(scenario, the workload and environment knobs as (name, value) sorted by name): jobs with equal keys
are comparable. Tuples sort readably: by scenario, then by knob values as numbers (30 before 120)."""


def comparable_group(job: SweepJob) -> GroupKey:
    """The group ``job`` is compared within: its scenario and its :data:`WORKLOAD_KNOBS` and
    :data:`ENVIRONMENT_KNOBS` values (the same demand, judged the same way, in the same cluster)."""
    return job.scenario, tuple(kv for kv in job.knobs if kv[0] not in CHOICE_KNOBS)


def pareto_groups(outcomes: Sequence[JobOutcome]) -> list[tuple[GroupKey, list[str]]]:
    """Each comparable group (:func:`comparable_group`) with the ids of its Pareto set: the jobs no
    other job of the group beats on both GPU-hours and SLO violation %.

    Failed jobs and NaN violations are left out (a group with none left is too). Within a group the
    set is the cheapest configuration at each violation level (ties all kept), by violation %; the
    groups come in :data:`GroupKey` order (scenario, then knob values as numbers).
    """
    groups: dict[GroupKey, list[tuple[float, float, str]]] = {}
    for o in outcomes:
        r = o.result
        if r is None:
            continue
        viol, gpu = violation_pct(r), finite_number(r.get("gpu_hours"))
        if viol is None or gpu is None:
            continue
        groups.setdefault(comparable_group(o.job), []).append((viol, gpu, o.job.id))
    out: list[tuple[GroupKey, list[str]]] = []
    for key in sorted(groups):
        pts = sorted(groups[key])
        mask = pareto_mask(np.array([(v, g) for v, g, _ in pts], dtype=np.float64))
        out.append((key, [i for (_, _, i), keep in zip(pts, mask) if keep]))
    return out


def pareto_ids(outcomes: Sequence[JobOutcome]) -> list[str]:
    """Ids of every group's Pareto set (:func:`pareto_groups`), group after group."""
    return [i for _, ids in pareto_groups(outcomes) for i in ids]


def _describe_outcome(o: JobOutcome) -> dict[str, Any]:
    d = o.job.describe()
    d["scorecard"] = o.result
    if o.error is not None:
        d["error"] = o.error
    return d


def results_json(outcomes: Sequence[JobOutcome]) -> str:
    """The results file: a JSON list sorted by job id, each the job (:meth:`SweepJob.describe`), its
    ``scorecard`` (None when it failed) and ``error`` when it failed. No timing: byte-identical
    for the same spec whatever the backend."""
    items = [_describe_outcome(o) for o in sorted(outcomes, key=lambda o: o.job.id)]
    return json.dumps(_json_clean(items), indent=2, sort_keys=True, allow_nan=False, ensure_ascii=False) + "\n"
