"""Observation records (ebb.model.observation): a pod view built for a shared fleet equals the constructor's."""

from __future__ import annotations

import dataclasses

import pytest

from ebb.model.ids import ReplicaId
from ebb.model.observation import PodView


def test_a_view_sharing_the_fleets_values_equals_the_constructors_field_for_field() -> None:
    values = {"util_ratio": 0.5, "inflight": 3.0, "qps": 2.5, "running": 3.0, "waiting": 0.25, "kv_usage_ratio": 0.1}
    built = PodView(ReplicaId(7), 12.0, 72.0, zone="zone-b", **values)
    shared = PodView.sharing(values, ReplicaId(7), 12.0, 72.0, "zone-b")
    assert shared == built and hash(shared) == hash(built) and repr(shared) == repr(built)
    assert {f.name: getattr(shared, f.name) for f in dataclasses.fields(PodView)} == dataclasses.asdict(built)


def test_a_shared_view_is_still_frozen_and_does_not_alias_the_values() -> None:
    values: dict[str, float | None] = {"util_ratio": None, "inflight": None, "qps": None, "running": None,
                                       "waiting": None, "kv_usage_ratio": None}
    view = PodView.sharing(values, ReplicaId(1), 0.0, None, "zone-a")
    values["inflight"] = 9.0
    assert view.inflight is None and view.ready_s is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.inflight = 1.0  # type: ignore[misc]
