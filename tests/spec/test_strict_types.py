"""Scalars have the types the CRD declares: what the API server refuses, the models refuse too."""

from __future__ import annotations

import pytest

from eo_jobs.spec import Guarantee, parse_pipeline
from tests.support.pipelines import document as _doc
from tests.support.pipelines import problems as _problems


def test_a_quoted_integer_is_refused_with_the_unquoted_spelling() -> None:
    message = _problems(_doc(executors={"instances": "3"}))["spec.executors.instances"]
    assert "'3' is a string" in message and "instances: 3" in message


def test_a_quoted_boolean_is_refused() -> None:
    message = _problems(_doc(suspend="yes"))["spec.suspend"]
    assert "'yes' is a string" in message and "true or false" in message


def test_a_boolean_where_an_integer_belongs_is_refused() -> None:
    message = _problems(_doc(executors={"instances": True}))["spec.executors.instances"]
    assert "an integer" in message and "True" in message


def test_a_number_where_text_belongs_is_refused() -> None:
    doc = _doc(sinks=[{"name": "ledger", "postgres": {"dsn": {"env": "PG"}, "table": 5}}])
    assert "a string" in _problems(doc)["spec.sinks[0].postgres.table"]


def test_a_fractional_number_for_an_integer_is_refused() -> None:
    doc = _doc(checkpoint={"location": "/ckpt", "triggerIntervalSeconds": 2.0})
    assert "an integer" in _problems(doc)["spec.checkpoint.triggerIntervalSeconds"]


def test_an_integer_percentage_and_a_guarantee_spelled_out_are_accepted() -> None:
    pipeline = parse_pipeline(
        _doc(guarantee="at-least-once", alerts={"maxFailureRatePercent": 5}, suspend=True)
    )
    assert pipeline.spec.guarantee is Guarantee.AT_LEAST_ONCE
    assert pipeline.spec.alerts.max_failure_rate_percent == 5.0


@pytest.mark.parametrize("name", ["Orders_Ledger!!", "-orders", "orders-", "UPPER"])
def test_a_name_that_is_not_a_dns_subdomain_is_refused(name: str) -> None:
    message = _problems(_doc({"name": name}))["metadata.name"]
    assert repr(name) in message and "lowercase letters, digits, '-' and '.'" in message


def test_an_over_long_name_says_how_long_and_why() -> None:
    message = _problems(_doc({"name": "x" * 250}))["metadata.name"]
    assert "250 characters" in message and "at most 63" in message and "label" in message


def test_an_invalid_namespace_is_refused() -> None:
    assert (
        "DNS label"
        in _problems(_doc({"name": "p", "namespace": "Pay.Ments"}))["metadata.namespace"]
    )
