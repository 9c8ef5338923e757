"""The registry of ``ebb lint`` rules: :data:`ALL_RULES` and :func:`rule_by_id`.

Each rule's ``doc`` is the text of ``docs/lint/<ID>.md``. The checks live by family in
:mod:`ebb.lint.rules_python` (EBB101–EBB104: DeepSpeed, PyTorch), :mod:`ebb.lint.rules_k8s`
(EBB201–EBB205: Kubernetes, Prometheus, KEDA) and :mod:`ebb.lint.rules_scalers` (EBB206–EBB208: how
HPAs, ScaledObjects and Ebb share a fleet); this module gives each its id, severity, title,
rationale, fix and document kinds. :data:`ALL_RULES` is ordered by id and ids are unique;
every public name these modules held before the split is still importable from here.
"""

from __future__ import annotations

from ebb.lint.core import Rule
from ebb.lint.rules_k8s import DOWNSCALE_STABILIZATION_S as DOWNSCALE_STABILIZATION_S
from ebb.lint.rules_k8s import HPA_SYNC_S as HPA_SYNC_S
from ebb.lint.rules_k8s import KEDA_POLLING_S as KEDA_POLLING_S
from ebb.lint.rules_k8s import METRIC_RESOLUTION_S as METRIC_RESOLUTION_S
from ebb.lint.rules_k8s import PROM_SCRAPE_S as PROM_SCRAPE_S
from ebb.lint.rules_k8s import AffinityAllNamespaces as AffinityAllNamespaces
from ebb.lint.rules_k8s import ControllerSettings as ControllerSettings
from ebb.lint.rules_k8s import HpaResourceOnly as HpaResourceOnly
from ebb.lint.rules_k8s import HpaScaleDownStabilization as HpaScaleDownStabilization
from ebb.lint.rules_k8s import MetricPipelineMismatch as MetricPipelineMismatch
from ebb.lint.rules_k8s import SpreadWithoutPdb as SpreadWithoutPdb
from ebb.lint.rules_k8s import controller_settings as controller_settings
from ebb.lint.rules_k8s import parse_duration_s as parse_duration_s
from ebb.lint.rules_k8s import query_window_s as query_window_s
from ebb.lint.rules_k8s import selector_matches as selector_matches
from ebb.lint.rules_python import DataLoaderSettings as DataLoaderSettings
from ebb.lint.rules_python import EagerInferenceLoop as EagerInferenceLoop
from ebb.lint.rules_python import Fp16StaticLossScale as Fp16StaticLossScale
from ebb.lint.rules_python import ZeroOffload as ZeroOffload
from ebb.lint.rules_scalers import EbbScalerFallback as EbbScalerFallback
from ebb.lint.rules_scalers import GpuUtilScaler as GpuUtilScaler
from ebb.lint.rules_scalers import TwoScalers as TwoScalers

__all__ = ["ALL_RULES", "rule_by_id", "HPA_SYNC_S", "parse_duration_s", "controller_settings", "ControllerSettings",
           "query_window_s"]


ALL_RULES: tuple[Rule, ...] = (
    ZeroOffload(
        "EBB101", "warning", "DeepSpeed ZeRO stage 2/3 without optimizer CPU offload, or offload without pin_memory",
        "ZeRO 2/3 partitions optimizer state but keeps it on the GPU. When a job is memory-bound, offloading the "
        "optimizer to CPU frees GPU memory (the design note measured -42 % GPU memory for -8 % speed on A100), "
        "which lets a job fit fewer or smaller GPUs. Offload without `pin_memory: true` copies through pageable "
        "memory and loses much of the speed. Stage \"auto\" and stage 0/1 are not checked; the legacy "
        "`cpu_offload: true` counts as offloaded."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): 11 true positives, 0 false positives, 0 false negatives: precision 100 %, recall 100 % (11/11).",
        "Set `zero_optimization.offload_optimizer = {\"device\": \"cpu\", \"pin_memory\": true}` when the job is "
        "memory-bound; suppress with `# ebb: ignore[EBB101]` (YAML) or `.ebb-lint.yaml` when it is not.",
        ("deepspeed",)),
    Fp16StaticLossScale(
        "EBB102", "warning", "fp16 enabled without dynamic loss scaling",
        "With `fp16.enabled: true` a non-zero `loss_scale` fixes the scale: too high overflows and skips steps, "
        "too low underflows gradients. `loss_scale: 0` (the default) enables dynamic scaling."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): no finding and none expected (0 true positives, 0 false positives, 0 false negatives): precision is undefined there; the rule's own cases are in tests/data/lint/EBB102.",
        "Set `fp16.loss_scale: 0` (dynamic) with `loss_scale_window: 1000`, or use bf16 where supported.",
        ("deepspeed",)),
    DataLoaderSettings(
        "EBB103", "warning", "PyTorch DataLoader without workers, pinned memory or prefetching in a GPU script",
        "In a script that trains on a GPU, `num_workers=0` (PyTorch's default) loads batches in the training process "
        "and starves the GPU, and `pin_memory=False` (the default) keeps host-to-device copies synchronous. A "
        "`DataLoader(...)` is reported when `num_workers` is absent or a literal 0, when `pin_memory` is absent or "
        "literal False, or when `prefetch_factor` is given with a literal `num_workers=0` (a ValueError since "
        "PyTorch 2.0). A missing `prefetch_factor` is never reported: PyTorch prefetches 2 batches per worker when "
        "`num_workers > 0` (torch/utils/data/dataloader.py, pytorch/pytorch@0025348e; 1.x also defaulted to 2). "
        "Values that are expressions (`num_workers=args.workers`), settings given by position and calls with "
        "`**kwargs` are not decided by the file and are skipped. A script counts as GPU training when it mentions "
        "`cuda`, `.to(device`, `device=` or `accelerator`."
        "\n\nMeasured (`ebb lint tests/data/lint/heldout --expected tests/data/lint/heldout_expected.json`, 30 real files from pytorch/examples, accelerate, FastChat, nanoGPT, ConvNeXt, DeiT): 13 true positives, 0 false positives, 0 false negatives: precision 100 %, recall 100 % (13/13). The shared config corpus has no Python.",
        "Use `DataLoader(..., num_workers=4, pin_memory=True)` as a starting point (PyTorch then prefetches 2 batches per worker).",
        ("python",)),
    EagerInferenceLoop(
        "EBB104", "info", "Hot inference loop with no torch.compile or CUDA graphs",
        "In a script that never trains (no `.backward()`, `.zero_grad()`, `<optimizer>.step()` or `.train()` call "
        "anywhere: a validation loop inside a training script runs once per epoch and is not the hot path), a "
        "`for`/`while` loop that calls `.generate(...)`, or under `torch.no_grad()`/`torch.inference_mode()` calls "
        "a model, runs eagerly when the file never uses `torch.compile(...)` nor CUDA graphs (`torch.cuda.graph`/"
        "`graphs`, `torch.cuda.CUDAGraph`, `torch.cuda.make_graphed_callables`): every step launches each kernel "
        "from Python, and at small batch that launch overhead, not the GPU math, sets the step time. Our H200 "
        "measurement (`shared/data/gpu/h200-serving`, eager bf16 3.2 B-parameter decoder, no CUDA graphs) shows a "
        "decode step at a median of 3.6-7.4 ms for every batch from 1 to 64, with no upward trend. A model call is "
        "a call of a name or attribute naming a model (`model`, `llm`, `lm`, `net`, `<noun>_model`, `<noun>_net`; "
        "never a helper whose first word is a verb, such as `save_model`, `build_model`, `load_model`), a "
        "model's `.forward(...)`, or a name assigned from `from_pretrained(...)`, `.eval()`, `load(...)` or "
        "`pipeline(...)` (tokenizers and processors excluded). Only the innermost qualifying loop is reported. "
        "Severity is info: the file is read with `ast` only, so compilation done in another module (or a serving "
        "engine that captures graphs itself) cannot be seen, and large-batch offline jobs are compute-bound and "
        "gain little."
        "\n\nMeasured (`ebb lint tests/data/lint/heldout --expected tests/data/lint/heldout_expected.json`, 30 real files from pytorch/examples, accelerate, FastChat, nanoGPT, ConvNeXt, DeiT): 6 true positives, 0 false positives, 0 false negatives: precision 100 %, recall 100 % (6/6). The shared config corpus has no Python.",
        "Compile the step (`model = torch.compile(model, mode=\"reduce-overhead\")`, which uses CUDA graphs), or "
        "capture a fixed-shape decode step with `torch.cuda.graph`/`torch.cuda.make_graphed_callables`; if the "
        "model is compiled elsewhere, suppress with `# ebb: ignore[EBB104]` on the loop line.",
        ("python",)),
    HpaResourceOnly(
        "EBB201", "warning", "HPA scales on CPU/memory averages only",
        "An HPA whose only metrics are `Resource` (CPU/memory utilisation averaged over pods) cannot see "
        "latency or queue depth; averages hide the peaks that break the SLO and make scale-down misjudge load. "
        "`autoscaling/v1` HPAs and v2 HPAs without metrics scale on CPU only."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): 6 true positives, 0 false positives, 0 false negatives: precision 100 %, recall 100 % (6/6).",
        "Add a latency or queue metric (`type: Pods`, `Object` or `External`, e.g. via prometheus-adapter) next "
        "to the resource metric.",
        ("k8s",)),
    HpaScaleDownStabilization(
        "EBB202", "warning", "HPA scale-down stabilization missing or shorter than the metric resolution",
        "The HPA re-evaluates every 15 s but metrics-server resolves usage every 60 s by default. A scale-down "
        "stabilization window shorter than that lets one low sample remove replicas. Without an explicit window "
        "the cluster flag `--horizontal-pod-autoscaler-downscale-stabilization` (300 s upstream) applies; that "
        "case is reported as info. When a linted file runs `kube-controller-manager` (a container whose command "
        "or args contain it, e.g. the static Pod manifest) and sets that flag, its value (Go duration, e.g. "
        "`5m0s`) is used instead: below 60 s the implicit case is a warning, otherwise it is not reported. The "
        "first such container in file order counts, for every file of the run. KEDA `ScaledObject`s "
        "(`keda.sh/v1alpha1`) are checked the same way at "
        "`spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds`, which KEDA "
        "copies into the HPA it creates."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): 12 true positives, 0 false positives, 0 false negatives: precision 100 %, recall 100 % (12/12).",
        "Set `spec.behavior.scaleDown.stabilizationWindowSeconds` (ScaledObject: "
        "`spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.stabilizationWindowSeconds`) to at least "
        "60 (the metric resolution), typically 300.",
        ("k8s",)),
    AffinityAllNamespaces(
        "EBB203", "warning", "Pod (anti-)affinity term with namespaceSelector: {}",
        "In a pod affinity or anti-affinity term an empty `namespaceSelector: {}` selects every namespace "
        "(upstream semantics; a null selector with no `namespaces` means the pod's own namespace). Unrelated "
        "workloads with the same labels then repel or attract the pods, wasting nodes."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): no finding and none expected (0 true positives, 0 false positives, 0 false negatives): precision is undefined there; the rule's own cases are in tests/data/lint/EBB203.",
        "Remove `namespaceSelector: {}` or list the namespaces explicitly under `namespaces:`.",
        ("k8s",)),
    SpreadWithoutPdb(
        "EBB204", "warning", "topologySpreadConstraints with DoNotSchedule and no PodDisruptionBudget",
        "A hard spread constraint (`whenUnsatisfiable: DoNotSchedule`) can leave evicted pods Pending during a "
        "node drain or scale-down; without a PodDisruptionBudget selecting the workload's pods (same namespace, "
        "in the same set of linted files) nothing limits how many are evicted at once."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): 2 true positives, 0 false positives, 0 false negatives: precision 100 %, recall 100 % (2/2).",
        "Add a PodDisruptionBudget whose selector matches the pod template labels, or use "
        "`whenUnsatisfiable: ScheduleAnyway`.",
        ("k8s",)),
    MetricPipelineMismatch(
        "EBB205", "warning", "Metric pipeline resolution vs HPA sync period mismatch",
        "The HPA syncs every 15 s (`--horizontal-pod-autoscaler-sync-period`; when a linted file runs "
        "`kube-controller-manager` with that flag, its value is used instead — first such container in file "
        "order, for the whole run). If metrics-server's `--metric-resolution` (or the Prometheus `scrape_interval` "
        "feeding a custom-metric HPA) is longer, the HPA re-reads one stale value resolution/sync times "
        "(60 s / 15 s = 4) and reacts late. A metrics-server container without the flag uses the 60 s default. "
        "Prometheus files are checked only when the same folder holds an HPA with a Pods/Object/External metric. "
        "A KEDA `ScaledObject` (`keda.sh/v1alpha1`) with a `prometheus` trigger is checked when the same folder "
        "holds a Prometheus config: a `pollingInterval` (default 30 s) shorter than the global `scrape_interval` "
        "(default 1m) re-reads the same value scrape/polling times.\n\n"
        "Each message gives the chain's worst-case lag, the time from a load change to the scaler acting on it: "
        "lag = scrape interval (or metric resolution) + query range/resolution + polling interval (KEDA) or sync "
        "period (HPA). The query range is the longest PromQL range in the trigger's `query` (`[2m]` counts 120 s; "
        "a subquery `[10m:1m]` counts range plus step); for an HPA fed by metrics-server it is 0, and for an HPA "
        "fed by an adapter the query is not visible, so its lag is a lower bound (\"at least\")."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): 5 true positives, 0 false positives, 0 false negatives: precision 100 %, recall 100 % (5/5).",
        "Align the pipeline: `--metric-resolution=15s`, `scrape_interval: 15s`, a KEDA `pollingInterval` no "
        "shorter than the scrape interval, or lengthen the HPA sync period.",
        ("k8s", "prometheus")),
    GpuUtilScaler(
        "EBB206", "warning", "HPA or ScaledObject scales on GPU utilisation",
        "GPU utilisation (`DCGM_FI_DEV_GPU_UTIL`, nvidia-smi's `utilization.gpu`, a duty cycle) is the share of "
        "time any kernel runs. An LLM server runs kernels for every decode step, so one request in flight already "
        "reads near the top of the scale and more load can barely move it: the number says nothing about load (NVIDIA/dcgm-exporter"
        "#301, https://github.com/NVIDIA/dcgm-exporter/issues/301: \"GPU utilization becomes very high if there's "
        "even single request\"). A scaler on it adds replicas at the first requests and rarely removes them while any "
        "traffic is left. Reported: an HPA (`autoscaling/v2`, `v2beta1`, `v2beta2`) `Pods`, `Object` or `External` "
        "metric whose name names a GPU utilisation series, and a KEDA `ScaledObject` (`keda.sh/v1alpha1`) "
        "`prometheus` trigger whose `query` reads one, or another trigger (`external`, `metrics-api`, "
        "`aws-cloudwatch`, `datadog`, ...) with a metadata value that names one (keys ending in `Address` "
        "excluded; a `prometheus` trigger's `metricName` only names its result and is not read). A GPU "
        "utilisation series is `DCGM_FI_DEV_GPU_UTIL` in any case, with a prefix or suffix "
        "(`dcgm_fi_dev_gpu_util_relabelled`, `prometheus.googleapis.com|dcgm_fi_dev_gpu_util|gauge`), "
        "`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, `utilization.gpu`/`utilization_gpu`, a `gpu_util`/`gpu_utilization`/"
        "`GPUUtilization` name, or a GPU/accelerator duty cycle (`nvidia_gpu_duty_cycle`, GKE's "
        "`accelerator/duty_cycle`); `gpu_memory_utilization` and `vllm:gpu_cache_usage_perc` are not. Manifests "
        "do not say whether the target serves an LLM, so every such scaler is reported; on a GPU job whose "
        "kernels stop between requests (small vision models, batch jobs) the measure is less wrong: suppress "
        "with `# ebb: ignore[EBB206]` there."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): no finding and none expected (its one LLM HPA scales on `vllm_num_requests_running`), so precision is undefined there; on `ebb lint tests/data/lint/heldout_scalers --expected tests/data/lint/heldout_scalers_expected.json`, 6 real manifests from kubernetes/examples and GoogleCloudPlatform/accelerated-platforms held out for EBB206-EBB208: 1 true positive, 0 false positives, 0 false negatives: precision 100 %, recall 100 % (1/1). The rule's own cases are in tests/data/lint/EBB206.",
        "Scale on what the engine queues: waiting and running requests or KV-cache use "
        "(`vllm:num_requests_waiting`, `vllm:num_requests_running`, `vllm:kv_cache_usage_perc`; SGLang's "
        "`sglang:num_queue_reqs`), or let Ebb decide (`ebb run --engine vllm`, behind KEDA with `--serve-keda`).",
        ("k8s",)),
    TwoScalers(
        "EBB207", "warning", "Two scalers own one scale target",
        "Across every file of the run, one Deployment (or other scale target, by kind and name, in one "
        "namespace) scaled by two owners: two HPAs, an HPA and a KEDA `ScaledObject`, two ScaledObjects, or "
        "any of them and an Ebb controller that scales the Deployment itself. Since kubernetes/kubernetes#112011 "
        "the HPA controller stops every HPA whose pods another HPA also selects (condition `ScalingActive` "
        "false, reason `AmbiguousSelector`; kedacore/keda#5825 shows a ScaledObject's HPA and a plain HPA both "
        "stopped), so nothing scales; Ebb and an HPA instead overwrite each other's replica count every cycle. "
        "Not a second scaler: the HPA KEDA makes for a ScaledObject (owned by it, or named "
        "`keda-hpa-<name>` or its `advanced.horizontalPodAutoscalerConfig.name`), one object written twice "
        "(same kind, name and namespace, e.g. a base and an overlay), a ScaledObject annotated "
        "`autoscaling.keda.sh/paused: \"true\"`, and an Ebb controller run with `--serve-keda` or `--hand-off` "
        "(it decides, an HPA or KEDA applies). An Ebb controller scales a Deployment itself when a container "
        "(or a JSON-patch list of args) runs `ebb run --mode act --actuator kubernetes --deployment NAME` "
        "(`--namespace`, default `default`; `EBB_RUN_*` variables count as their flags), when an `ebb run "
        "--config` file says the same (`loop.mode`, `actuator.actuator`/`deployment`/`namespace`), or for "
        "every entry of a fleet file (`workloads:` with `deployment:`) when an act-mode controller of the run "
        "reads `--workloads` without `--deployment` (a fleet) or the run holds no Ebb controller; those files count alone or as a string in a "
        "ConfigMap. A namespace left out of a file matches any namespace. Two HPAs/ScaledObjects are compared "
        "only when their files are applied together: one folder, or one folder inside the other (a base and "
        "its overlay); sibling folders (kustomize overlays, a folder per cluster, alternative examples such as "
        "deploy/examples/hpa-external and deploy/examples/keda) are alternatives. An Ebb controller is compared "
        "with every HPA/ScaledObject of the run (one controller serves a cluster; its manifests usually live "
        "apart from the app's). Each HPA/ScaledObject involved is reported at its `scaleTargetRef`, naming the "
        "other owners (at most 3, then \"more\")."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): no finding and none expected (its two `podinfo` HPAs, from two repositories, are one object: same name, no namespace), so precision is undefined there; on `ebb lint tests/data/lint/heldout_scalers --expected tests/data/lint/heldout_scalers_expected.json`, 6 real manifests from kubernetes/examples and GoogleCloudPlatform/accelerated-platforms held out for EBB206-EBB208: 4 true positives (two repositories each ship two alternative HPAs for one vLLM Deployment), 0 false positives, 0 false negatives: precision 100 %, recall 100 % (4/4). The rule's own cases are in tests/data/lint/EBB207.",
        "Keep one owner per target: delete the extra HPA, or move its metrics into the ScaledObject's "
        "triggers. To keep Ebb's decisions with KEDA in front, run `ebb run --mode act --actuator kubernetes "
        "--serve-keda HOST:PORT` and point the ScaledObject's `external` trigger at it (the ScaledObject applies "
        "Ebb's number; deploy/examples/keda); with a plain HPA, `--hand-off` (deploy/examples/hpa-external).",
        ("k8s",)),
    EbbScalerFallback(
        "EBB208", "warning", "ScaledObject on Ebb's external scaler without fallback behavior currentReplicasIfHigher",
        "A KEDA `ScaledObject` whose trigger is Ebb's external scaler (`external` or `external-push` with a "
        "`scalerAddress` whose host has a word starting `ebb`, e.g. `ebb-keda.ebb-system.svc:9090`, or with "
        "the `workloadClass` metadata key only Ebb's scaler documents) hands Ebb's replica count to the HPA. "
        "When Ebb is unreachable (a restart, a network policy, a lost lease) KEDA's scaler fails: without "
        "`spec.fallback` KEDA hands the HPA no metric (its default error behaviour) and nothing follows the "
        "load for the whole outage; with the default `behavior: static` KEDA moves the fleet to "
        "`fallback.replicas` whatever runs, a scale-down when more run, and `currentReplicasIfLower` to the lower "
        "of the two (neither is reported when `fallback.replicas` is at least `maxReplicaCount`, default 100: "
        "the fleet can then only grow); `currentReplicas` holds the fleet's size but never lifts it to "
        "`fallback.replicas` from below (reported as info). With "
        "`behavior: currentReplicasIfHigher` (KEDA 2.17 and later, https://keda.sh/docs/2.17/reference/"
        "scaledobject-spec/#fallback) KEDA keeps the larger of the current count and `fallback.replicas`: an "
        "outage never removes replicas. `failureThreshold` and `replicas` are mandatory in a `fallback` section. "
        "KEDA applies no fallback to a trigger whose `metricType` is not `AverageValue`, and Ebb's metric (its "
        "replicas against a target of 1) is only Ebb's number as an `AverageValue`, so any other `metricType` "
        "on Ebb's trigger is reported too."
        "\n\nMeasured (`ebb lint ../shared/lint-corpus --expected tests/data/lint/corpus_expected.json`, 73 real configuration files from public repositories): no finding and none expected (its one `external` trigger, KEDA's HTTP add-on at `external-scaler:9090`, is not Ebb's), so precision is undefined there; no public manifest uses Ebb's scaler yet, so the rule's cases are its own, in tests/data/lint/EBB208.",
        "Add `spec.fallback: {failureThreshold: 3, replicas: N, behavior: currentReplicasIfHigher}` with N the "
        "fleet's safe size (KEDA 2.17 or later), and leave the trigger's `metricType` out (`AverageValue`).",
        ("k8s",)),
)


def rule_by_id(rule_id: str) -> Rule | None:
    for r in ALL_RULES:
        if r.id == rule_id.upper():
            return r
    return None
