"""The chart's NetworkPolicies select the pods eo makes, and their rules follow the values.

The selectors are checked against the labels the code puts on the pods, not against a copy:
the operator's Deployment as the chart renders it, the driver pod as ``driver_pod`` builds it,
and the executor labels as ``spark_conf`` hands them to Spark. A label renamed on one side and
not the other fails here. (Whether the API server accepts the objects: test_install.py. No
network plugin enforces them in the test cluster, so what they let through is not tested.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from eo_jobs.runtime.session import spark_conf
from eo_jobs.spec import parse_pipeline
from eo_operator.resources import DRIVER_POD_SELECTOR, driver_pod
from tests.chart.helm import NAMESPACE, Manifest, find, render, set_values

REPO = Path(__file__).resolve().parents[2]
POD_ENV = {"POD_IP": "10.1.2.3", "POD_NAME": "orders-1a2b3c4d-driver-e1", "POD_NAMESPACE": "shop"}
EXECUTOR_LABEL = "spark.kubernetes.executor.label."
EGRESS = "networkPolicy.egress.enabled=true"


def _pipeline_doc() -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "examples" / "orders-ledger.yaml").read_text())
    doc["spec"]["executors"] = {"instances": 2, "cores": 1, "memory": "512m"}
    doc["spec"].pop("driver", None)
    return dict(doc)


def driver_labels() -> dict[str, str]:
    """The labels of a driver pod the operator creates."""
    pipeline = parse_pipeline(_pipeline_doc())
    pod = driver_pod(pipeline, {"metadata": {"name": "orders", "uid": "u-1"}}, 1, "eo-job:1", "sa")
    return dict(pod["metadata"]["labels"])


def driver_port_names() -> set[str]:
    pipeline = parse_pipeline(_pipeline_doc())
    pod = driver_pod(pipeline, {"metadata": {"name": "orders", "uid": "u-1"}}, 1, "eo-job:1", "sa")
    return {port["name"] for port in pod["spec"]["containers"][0]["ports"]}


def executor_labels() -> dict[str, str]:
    """The labels a driver with executors asks Spark to put on every executor pod, plus the
    ones Spark puts there itself."""
    conf = spark_conf(parse_pipeline(_pipeline_doc()).spec, "app", environ=POD_ENV)
    labels = {
        k.removeprefix(EXECUTOR_LABEL): v for k, v in conf.items() if k.startswith(EXECUTOR_LABEL)
    }
    return {**labels, "spark-role": "executor", "spark-exec-id": "1"}


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes LabelSelector's verdict on ``labels``."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for term in selector.get("matchExpressions", []):
        key, operator = term["key"], term["operator"]
        if operator == "In" and labels.get(key) not in term["values"]:
            return False
        if operator == "NotIn" and labels.get(key) in term["values"]:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
    return True


OLD_EXECUTOR = {"spark-role": "executor", "spark-exec-id": "1"}
"""An executor of a driver pinned to a job image older than eo's executor labels."""


def pipeline_peers_admit(peers: list[dict[str, Any]], labels: dict[str, str]) -> bool:
    """Whether NetworkPolicy peers admit a pod with ``labels`` of the policy's own namespace,
    and only of it (no peer names a namespace)."""
    assert all(set(peer) == {"podSelector"} for peer in peers), peers
    return any(selects(peer["podSelector"], labels) for peer in peers)


def policies(*expressions: str) -> list[Manifest]:
    return [o for o in render(set_values(*expressions)) if o["kind"] == "NetworkPolicy"]


def policy(objects: list[Manifest], name: str, namespace: str = NAMESPACE) -> Manifest:
    return find(objects, "NetworkPolicy", name, namespace)


def port_names(rule: dict[str, Any]) -> set[Any]:
    return {port["port"] for port in rule.get("ports", [])}


def test_the_policies_select_the_operator_driver_and_executor_pods_and_nothing_else() -> None:
    objects = render()
    operator_pod = find(objects, "Deployment", "eo-operator")["spec"]["template"]
    operator_labels = operator_pod["metadata"]["labels"]
    driver, executor = driver_labels(), executor_labels()
    selectors = {
        name: policy(objects, f"eo-{name}")["spec"]["podSelector"]
        for name in ("operator", "driver", "executor")
    }
    verdicts = {
        name: [selects(selector, labels) for labels in (operator_labels, driver, executor)]
        for name, selector in selectors.items()
    }
    assert verdicts == {
        "operator": [True, False, False],
        "driver": [False, True, False],
        "executor": [False, False, True],
    }
    # The operator watches driver pods only: executors must stay out of its selector.
    watched = dict(term.split("=") for term in DRIVER_POD_SELECTOR.split(","))
    assert selects({"matchLabels": watched}, driver)
    assert not selects({"matchLabels": watched}, executor)


def test_a_driver_admits_its_executors_at_the_spark_ports_and_the_operator_at_metrics() -> None:
    objects = render()
    operator_labels = find(objects, "Deployment", "eo-operator")["spec"]["template"]["metadata"][
        "labels"
    ]
    spec = policy(objects, "eo-driver")["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    from_executors, from_operator, from_scrapers = spec["ingress"]
    assert pipeline_peers_admit(from_executors["from"], executor_labels())
    assert pipeline_peers_admit(from_executors["from"], OLD_EXECUTOR)
    assert not pipeline_peers_admit(from_executors["from"], driver_labels())
    assert port_names(from_executors) == {"driver", "blockmanager"}
    [operator] = from_operator["from"]
    assert selects(operator["podSelector"], operator_labels)
    assert operator["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": NAMESPACE
    }
    assert port_names(from_operator) == port_names(from_scrapers) == {"metrics"}
    assert "from" not in from_scrapers  # any scraper by default
    # Every port a rule names is one the driver container declares; the UI is not among them.
    named = set().union(*(port_names(rule) for rule in spec["ingress"]))
    assert named <= driver_port_names()
    assert "ui" in driver_port_names() - named


def test_an_executor_admits_the_driver_and_executor_pods_of_its_namespace_only() -> None:
    objects = render()
    spec = policy(objects, "eo-executor")["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    [rule] = spec["ingress"]
    assert pipeline_peers_admit(rule["from"], driver_labels())
    assert pipeline_peers_admit(rule["from"], executor_labels())
    assert pipeline_peers_admit(rule["from"], OLD_EXECUTOR)
    operator = find(objects, "Deployment", "eo-operator")["spec"]["template"]["metadata"]
    assert not pipeline_peers_admit(rule["from"], operator["labels"])
    assert "ports" not in rule  # executors serve blocks on ports they pick


def test_the_operator_admits_scrapers_at_its_metrics_port_only() -> None:
    objects = render()
    spec = policy(objects, "eo-operator")["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    [rule] = spec["ingress"]
    assert port_names(rule) == {"metrics"}
    container = find(objects, "Deployment", "eo-operator")["spec"]["template"]["spec"][
        "containers"
    ][0]
    assert "metrics" in {port["name"] for port in container["ports"]}


def test_policies_go_to_every_pipeline_namespace_and_the_operators_to_the_release_one() -> None:
    def where(*expressions: str) -> set[tuple[str, str]]:
        return {(p["metadata"]["name"], p["metadata"]["namespace"]) for p in policies(*expressions)}

    assert where() == {
        ("eo-operator", NAMESPACE),
        ("eo-driver", NAMESPACE),
        ("eo-executor", NAMESPACE),
    }
    assert where("operator.watchNamespaces={a,b}") == {
        ("eo-operator", NAMESPACE),
        ("eo-driver", "a"),
        ("eo-executor", "a"),
        ("eo-driver", "b"),
        ("eo-executor", "b"),
    }
    assert where("driver.namespaces={c}") == {
        ("eo-operator", NAMESPACE),
        ("eo-driver", "c"),
        ("eo-executor", "c"),
    }
    assert where("networkPolicy.enabled=false") == set()


def test_metrics_selectors_name_the_scrapers_of_the_operator_and_the_drivers() -> None:
    objects = policies(
        "networkPolicy.metrics.namespaceSelector.kubernetes\\.io/metadata\\.name=monitoring",
        "networkPolicy.metrics.podSelector.app\\.kubernetes\\.io/name=prometheus",
    )
    expected = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]
    assert policy(objects, "eo-operator")["spec"]["ingress"][0]["from"] == expected
    assert policy(objects, "eo-driver")["spec"]["ingress"][2]["from"] == expected
    # A pod selector alone means Prometheus pods in any namespace, not in the policy's own.
    alone = policies("networkPolicy.metrics.podSelector.app=prometheus")
    assert policy(alone, "eo-operator")["spec"]["ingress"][0]["from"] == [
        {"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "prometheus"}}}
    ]


def _rule_to(rules: list[dict[str, Any]], port: int) -> list[dict[str, Any]]:
    return [rule for rule in rules if port in {p["port"] for p in rule.get("ports", [])}]


def test_without_addresses_egress_opens_the_well_known_ports_to_any_address() -> None:
    objects = policies(EGRESS)
    operator = policy(objects, "eo-operator")["spec"]
    assert operator["policyTypes"] == ["Ingress", "Egress"]
    egress = operator["egress"]
    assert _rule_to(egress, 6443) == [
        {"ports": [{"port": 443, "protocol": "TCP"}, {"port": 6443, "protocol": "TCP"}]}
    ]
    assert _rule_to(egress, 53) == [
        {"ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]}
    ]
    assert _rule_to(egress, 3306) == [
        {"ports": [{"port": 5432, "protocol": "TCP"}, {"port": 3306, "protocol": "TCP"}]}
    ]
    # The operator reads no Kafka; drivers and executors do. No object store by default.
    assert _rule_to(egress, 9092) == []
    for name in ("eo-driver", "eo-executor"):
        assert _rule_to(policy(objects, name)["spec"]["egress"], 9092) == [
            {"ports": [{"port": 9092, "protocol": "TCP"}]}
        ]
    # Every rule names its ports, except those to the pipeline's own pods and the drivers'.
    for obj in objects:
        for rule in obj["spec"]["egress"]:
            assert "ports" in rule or "to" in rule, (obj["metadata"]["name"], rule)


def test_egress_reaches_the_databases_the_api_server_and_dns_the_values_name() -> None:
    values = {
        "networkPolicy": {
            "egress": {
                "enabled": True,
                "apiServer": {"cidrs": ["10.0.0.1/32", "10.0.0.2/32"], "ports": [6443]},
                "dns": {
                    "namespaceSelector": {"kubernetes.io/metadata.name": "kube-system"},
                    "podSelector": {"k8s-app": "kube-dns"},
                },
                "databases": [
                    {"cidrs": ["10.20.0.5/32"], "ports": [5432]},
                    {
                        "namespaceSelector": {"kubernetes.io/metadata.name": "shop"},
                        "podSelector": {"app.kubernetes.io/name": "mariadb"},
                        "ports": [3306],
                    },
                ],
                "kafka": [{"cidrs": ["10.30.0.0/24"], "ports": [9093]}],
                "objectStorage": [{"cidrs": ["10.40.0.10/32"], "ports": [9000]}],
            },
            "driver": {"extraEgress": [{"ports": [{"port": 4317}]}]},
        }
    }
    objects = [o for o in render(values) if o["kind"] == "NetworkPolicy"]
    operator = policy(objects, "eo-operator")["spec"]["egress"]
    driver = policy(objects, "eo-driver")["spec"]["egress"]
    executor = policy(objects, "eo-executor")["spec"]["egress"]

    api = [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "10.0.0.2/32"}}]
    assert [r["to"] for r in _rule_to(operator, 6443)] == [api]
    assert [r["to"] for r in _rule_to(driver, 6443)] == [api]
    assert _rule_to(executor, 6443) == []  # executors never call the API server
    dns = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    mariadb = [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "shop"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "mariadb"}},
        }
    ]
    for rules in (operator, driver, executor):
        assert [r["to"] for r in _rule_to(rules, 53)] == [dns]
        assert [r["to"] for r in _rule_to(rules, 5432)] == [[{"ipBlock": {"cidr": "10.20.0.5/32"}}]]
        assert [r["to"] for r in _rule_to(rules, 3306)] == [mariadb]
    for rules in (driver, executor):
        assert [r["to"] for r in _rule_to(rules, 9093)] == [[{"ipBlock": {"cidr": "10.30.0.0/24"}}]]
        assert [r["to"] for r in _rule_to(rules, 9000)] == [
            [{"ipBlock": {"cidr": "10.40.0.10/32"}}]
        ]
    assert _rule_to(operator, 9093) == _rule_to(operator, 9000) == []
    assert driver[-1] == {"ports": [{"port": 4317}]}
    assert _rule_to(executor, 4317) == []


def test_pipeline_pods_reach_each_other_and_the_operator_reaches_driver_metrics() -> None:
    objects = policies(EGRESS)
    for name in ("eo-driver", "eo-executor"):
        [own] = [r for r in policy(objects, name)["spec"]["egress"] if "ports" not in r]
        for labels in (driver_labels(), executor_labels(), OLD_EXECUTOR):
            assert pipeline_peers_admit(own["to"], labels)
    [to_drivers] = _rule_to_named(policy(objects, "eo-operator")["spec"]["egress"], "metrics")
    [peer] = to_drivers["to"]
    assert peer["namespaceSelector"] == {}  # a pipeline may run in any namespace
    assert selects(peer["podSelector"], driver_labels())
    assert not selects(peer["podSelector"], executor_labels())


def _rule_to_named(rules: list[dict[str, Any]], port: str) -> list[dict[str, Any]]:
    return [rule for rule in rules if port in port_names(rule)]


def test_extra_ingress_rules_are_appended_for_each_kind_of_pod() -> None:
    extra = {"ports": [{"port": 15090}]}
    values = {
        "networkPolicy": {
            kind: {"extraIngress": [extra]} for kind in ("operator", "driver", "executor")
        }
    }
    objects = [o for o in render(values) if o["kind"] == "NetworkPolicy"]
    for name in ("eo-operator", "eo-driver", "eo-executor"):
        assert policy(objects, name)["spec"]["ingress"][-1] == extra
        assert "egress" not in policy(objects, name)["spec"]  # extraEgress waits for egress


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [
        ("networkPolicy.egress.databases[0].cidrs={10.0.0.0/24}", "missing property 'ports'"),
        (
            "networkPolicy.egress.databases[0].ports={70000}",
            "/networkPolicy/egress/databases/0/ports/0",
        ),
        ("networkPolicy.egress.kafka[0].ports={}", "/networkPolicy/egress/kafka/0/ports"),
        (
            "networkPolicy.egress.apiServer.cidrs={10.0.0.1}",
            "/networkPolicy/egress/apiServer/cidrs/0",
        ),
        ("networkPolicy.egress.dns.port=53", "additional properties 'port' not allowed"),
        ("networkPolicy.driver.extraIngress[0].form=x", "additional properties 'form' not allowed"),
    ],
)
def test_a_malformed_network_value_is_refused(expression: str, complaint: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as failure:
        render(set_values(expression))
    assert complaint in str(failure.value)


def test_the_install_guides_mysql_example_renders_what_it_says() -> None:
    guide = (REPO / "docs" / "install.md").read_text()
    [block] = re.findall(r"```yaml netpol-values\n(.*?)```", guide, flags=re.DOTALL)
    objects = [o for o in render(yaml.safe_load(block)) if o["kind"] == "NetworkPolicy"]
    operator = policy(objects, "eo-operator")["spec"]
    driver = policy(objects, "eo-driver")["spec"]["egress"]
    executor = policy(objects, "eo-executor")["spec"]["egress"]
    for rules in (operator["egress"], driver, executor):
        mysql = [r["to"] for r in _rule_to(rules, 3306)]
        assert [{"ipBlock": {"cidr": "10.20.0.0/28"}}] in mysql
        assert any("podSelector" in peer for to in mysql for peer in to)  # the in-cluster MariaDB
        assert [r["to"] for r in _rule_to(rules, 5432)] == [[{"ipBlock": {"cidr": "10.20.1.5/32"}}]]
    assert _rule_to(operator["egress"], 9093) == _rule_to(operator["egress"], 9000) == []
    for rules in (driver, executor):
        assert len(_rule_to(rules, 9093)) == len(_rule_to(rules, 9000)) == 1
    assert operator["ingress"][0]["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


def test_a_destination_set_to_null_opens_nothing_for_it() -> None:
    objects = policies(EGRESS, "networkPolicy.egress.kafka=null", "networkPolicy.egress.dns=null")
    driver = policy(objects, "eo-driver")["spec"]["egress"]
    assert _rule_to(driver, 9092) == _rule_to(driver, 53) == []
    assert len(_rule_to(driver, 5432)) == 1
