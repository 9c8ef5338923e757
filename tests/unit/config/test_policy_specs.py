"""The ``--policy`` grammar and its parameter validators."""

from __future__ import annotations

import pytest

from ebb.errors import ConfigError
from ebb.config.policy_specs import PolicySpecItem, check_keys, param_choice, param_float, param_int, parse_policies

KNOWN = ("hpa", "keda", "static", "oracle")


def test_a_bare_name_is_one_policy_without_parameters() -> None:
    assert parse_policies("oracle", KNOWN) == [PolicySpecItem("oracle", ())]


def test_several_policies_are_parsed_in_order_with_their_parameters() -> None:
    items = parse_policies("hpa:target=0.5,max=40,hpa:target=0.8,keda:threshold=40,oracle", KNOWN)
    assert [i.name for i in items] == ["hpa", "hpa", "keda", "oracle"]
    assert items[0].params == (("target", "0.5"), ("max", "40"))
    assert items[1].params == (("target", "0.8"),)
    assert items[2].params == (("threshold", "40"),)
    assert items[3].params == ()


def test_continuation_parameters_attach_to_the_policy_before_them() -> None:
    items = parse_policies("static,replicas=3,hpa,metric=qps,target=12", KNOWN)
    assert items == [PolicySpecItem("static", (("replicas", "3"),)),
                     PolicySpecItem("hpa", (("metric", "qps"), ("target", "12")))]


def test_whitespace_and_empty_tokens_are_ignored() -> None:
    items = parse_policies(" hpa : target = 0.5 , , max=4 ,oracle,", KNOWN)
    assert items == [PolicySpecItem("hpa", (("target", "0.5"), ("max", "4"))), PolicySpecItem("oracle", ())]


def test_the_canonical_text_joins_name_and_parameters() -> None:
    items = parse_policies("hpa:target=0.5, max=40 ,oracle", KNOWN)
    assert [i.text for i in items] == ["hpa:target=0.5,max=40", "oracle"]


def test_the_canonical_text_parses_back_to_the_same_item() -> None:
    for text in ("hpa:target=0.5,max=40", "keda:metric=qps,threshold=9,min=0", "static:replicas=7", "oracle"):
        (item,) = parse_policies(text, KNOWN)
        assert item.text == text
        assert parse_policies(item.text, KNOWN) == [item]


def test_get_returns_the_first_value_of_a_key_or_none() -> None:
    item = PolicySpecItem("hpa", (("target", "0.5"), ("target", "0.7")))
    assert item.get("target") == "0.5"
    assert item.get("max") is None


def test_an_unknown_policy_name_is_rejected_with_the_known_names() -> None:
    with pytest.raises(ConfigError, match=r"unknown policy 'vpa'.*hpa, keda, static, oracle"):
        parse_policies("hpa,vpa:target=1", KNOWN)


def test_a_parameter_before_any_policy_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"parameter 'target=0.5' comes before any policy"):
        parse_policies("target=0.5,hpa", KNOWN)


@pytest.mark.parametrize("text", ["hpa:target", "hpa:target=", "hpa:=0.5", "hpa,max= ", "hpa:=", "hpa: =3"])
def test_a_malformed_key_value_is_rejected(text: str) -> None:
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_policies(text, KNOWN)


@pytest.mark.parametrize("text", ["", "  ", ",", " , ,"])
def test_an_empty_spec_names_no_policy(text: str) -> None:
    with pytest.raises(ConfigError, match="names no policy"):
        parse_policies(text, KNOWN)


def _item(**params: str) -> PolicySpecItem:
    return PolicySpecItem("hpa", tuple(params.items()))


def test_param_float_returns_the_default_when_absent_and_the_value_when_given() -> None:
    assert param_float(_item(), "target", 0.6) == 0.6
    assert param_float(_item(target="0.75"), "target", 0.6, lo=0.0, hi=1.0) == 0.75


@pytest.mark.parametrize("raw", ["abc", "nan", "-0.1", "1.5"])
def test_param_float_rejects_non_numbers_and_out_of_range_values_naming_the_policy(raw: str) -> None:
    with pytest.raises(ConfigError, match=r"policy 'hpa:target=.*': target="):
        param_float(_item(target=raw), "target", 0.6, lo=0.0, hi=1.0)


def test_param_float_bounds_are_inclusive() -> None:
    assert param_float(_item(target="0"), "target", 0.6, lo=0.0, hi=1.0) == 0.0
    assert param_float(_item(target="1"), "target", 0.6, lo=0.0, hi=1.0) == 1.0


def test_param_int_returns_the_default_when_absent_and_parses_integers() -> None:
    assert param_int(_item(), "max", 7) == 7
    assert param_int(_item(max="40"), "max", 7, lo=1) == 40


@pytest.mark.parametrize(("raw", "why"), [("4.5", "not an integer"), ("x", "not an integer"), ("0", ">= 1")])
def test_param_int_rejects_non_integers_and_values_below_the_bound(raw: str, why: str) -> None:
    with pytest.raises(ConfigError, match=rf"policy 'hpa:max={raw}': max='{raw}'.*{why}"):
        param_int(_item(max=raw), "max", 7, lo=1)


def test_param_choice_accepts_a_listed_value_and_rejects_others_listing_the_choices() -> None:
    assert param_choice(_item(), "metric", "gpu", ("gpu", "qps")) == "gpu"
    assert param_choice(_item(metric="qps"), "metric", "gpu", ("gpu", "qps")) == "qps"
    with pytest.raises(ConfigError, match=r"policy 'hpa:metric=cpu'.*choose one of gpu, qps"):
        param_choice(_item(metric="cpu"), "metric", "gpu", ("gpu", "qps"))


def test_check_keys_rejects_an_unknown_parameter_naming_the_policy_and_the_allowed_ones() -> None:
    check_keys(_item(target="1", max="3"), ("target", "max"))
    with pytest.raises(ConfigError, match=r"policy 'hpa:targt=1': unknown parameter 'targt'; allowed: target, max"):
        check_keys(_item(targt="1"), ("target", "max"))


@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "1e308", "1e13"])
def test_a_knob_must_be_a_finite_number_of_sane_size(raw: str) -> None:
    (item,) = parse_policies(f"kpa:target={raw}", ("kpa",))
    with pytest.raises(ConfigError, match="target"):
        param_float(item, "target", 1.0, lo=0.0)


def test_an_integer_knob_is_capped_too() -> None:
    (item,) = parse_policies("static:replicas=10000000000000", ("static",))
    with pytest.raises(ConfigError, match="at most"):
        param_int(item, "replicas", 1, lo=1)
