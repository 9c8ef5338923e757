"""``ebb sweep``'s table reads in order: by scenario and environment, then policy, then knobs (#35)."""

from __future__ import annotations

from ebb.cli.sweep import _table
from ebb.sim.sweep import JobOutcome, SweepJob


def outcome(policy: str, cold_start_s: int, target: int, viol: float, gpu: float) -> JobOutcome:
    job = SweepJob("azure-conv", "trace", policy if policy == "static" else f"{policy}:target={target}",
                   (("cold_start_s", cold_start_s), ("minutes", 5.0)), 0, "auto", "bundled:azure-conv")
    return JobOutcome(job, {"slo_violation_pct": viol, "gpu_hours": gpu}, None, 0.0)


def test_rows_go_by_cold_start_then_policy_and_each_cold_start_has_its_own_pareto_set() -> None:
    jobs = [outcome(p, cs, t, viol, gpu) for p, cs, t, viol, gpu in (
        ("static", 120, 0, 0.0, 9.0), ("hpa", 30, 10, 0.2, 4.0), ("hpa", 120, 5, 0.1, 8.0),
        ("static", 30, 0, 0.0, 6.0), ("hpa", 30, 5, 0.1, 5.0), ("hpa", 120, 10, 0.3, 7.5))]
    jobs.sort(key=lambda o: o.job.id)  # as run_sweep returns them: by hash id
    lines = _table(jobs)
    assert all(len(line) <= 80 for line in lines)
    split = lines.index("")
    rows = [line.split() for line in lines[1:split] if line.split()[0] in {o.job.id for o in jobs}]
    assert [(r[3], r[2]) for r in rows] == [  # (knobs column: cold start, policy)
        ("css=30", "hpa:target=5"), ("css=30", "hpa:target=10"), ("css=30", "static"),
        ("css=120", "hpa:target=5"), ("css=120", "hpa:target=10"), ("css=120", "static")]
    pareto = lines[split + 1:]
    assert pareto[0].startswith("Pareto sets") and "-- azure-conv, css=30:" in pareto
    first, second = pareto.index("-- azure-conv, css=30:"), pareto.index("-- azure-conv, css=120:")
    assert first < second
    # At css=120, static (0 %, 9.0) and hpa:target=5 (0.1 %, 8.0) and hpa:target=10 (0.3 %, 7.5) are all
    # on the front: none is beaten by a css=30 job, whose cluster is another one.
    assert [line.split()[2] for line in pareto[second + 1:]] == ["static", "hpa:target=5", "hpa:target=10"]
    assert [line.split()[2] for line in pareto[first + 1:second]] == ["static", "hpa:target=5", "hpa:target=10"]
