"""Validate KEDA objects against KEDA's own CRD schemas (tests/data/keda-crds, v2.17.0, Apache-2.0).

The API server validates a custom resource against its CRD's ``openAPIV3Schema`` and, with strict
field validation (kubectl's default since 1.27), refuses fields the schema does not declare. Here:
the vendored schema, made strict (``additionalProperties: false`` on every object that lists
``properties`` and neither sets ``additionalProperties`` nor preserves unknown fields), checked with
``jsonschema`` (OpenAPI's ``format``, ``x-kubernetes-*`` and ``nullable`` are not enforced: no field
these examples use depends on them). ``metadata`` is checked as the API server does for every
object: a name, and a namespace for a namespaced kind.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

CRDS = Path(__file__).resolve().parents[2] / "data" / "keda-crds"
FILES = {"ScaledObject": "scaledobjects.json", "TriggerAuthentication": "triggerauthentications.json"}


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def crd(kind: str) -> dict[str, Any]:
    crd_doc: dict[str, Any] = json.loads((CRDS / FILES[kind]).read_text(encoding="utf-8"))
    return crd_doc


def validate(doc: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` (or AssertionError) when ``doc`` would be refused."""
    jsonschema = pytest.importorskip("jsonschema")
    spec = crd(doc["kind"])
    assert doc["apiVersion"] == f"{spec['group']}/{spec['version']}", doc["apiVersion"]
    meta = doc["metadata"]
    assert meta.get("name") and (spec["scope"] != "Namespaced" or meta.get("namespace")), meta
    schema = copy.deepcopy(_strict(spec["openAPIV3Schema"]))
    schema["properties"]["metadata"] = {"type": "object"}
    jsonschema.Draft7Validator(schema).validate(doc)
