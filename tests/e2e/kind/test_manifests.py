"""The kind run's manifests and Helm values, checked here without Docker.

A typo in a manifest, a pipeline the CRD rejects, or two files naming different volumes would
only surface minutes into a kind run; these tests catch them on any machine. A real API server
(the ``cluster`` control plane) judges every manifest with a server-side dry run, which applies
the same schemas, defaulting and CEL rules as kind's API server does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from eo_jobs.cli import main as eo
from tests.chart.helm import find, render
from tests.cluster.plugin import KubeCluster

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
MANIFESTS = HERE / "manifests"
NAMESPACE = "eo-e2e"
CRD = ROOT / "crds" / "exactlyoncepipelines.eo.dev.yaml"
CRD_NAME = "exactlyoncepipelines.eo.dev"

Manifest = dict[str, Any]


def load(name: str) -> list[Manifest]:
    """The objects of one manifest file."""
    return [doc for doc in yaml.safe_load_all((MANIFESTS / name).read_text()) if doc]


def one(name: str, kind: str) -> Manifest:
    """The only object of ``kind`` in manifest file ``name``."""
    matches = [doc for doc in load(name) if doc["kind"] == kind]
    assert len(matches) == 1, f"{len(matches)} {kind} in {name}"
    return matches[0]


def generator_args() -> dict[str, str]:
    """The generator Job's ``--flag=value`` arguments."""
    job = one("gen-orders-job.yaml", "Job")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    return dict(arg.removeprefix("--").split("=", 1) for arg in args)


def test_the_kind_pipeline_passes_eo_validate(capsys: pytest.CaptureFixture[str]) -> None:
    assert eo(["validate", str(MANIFESTS / "pipeline.yaml")]) == 0
    assert f"OK {MANIFESTS / 'pipeline.yaml'}: {NAMESPACE}/orders-ledger" in capsys.readouterr().out


def test_the_pipeline_reads_the_volume_and_secret_the_other_manifests_provide() -> None:
    spec = one("pipeline.yaml", "ExactlyOncePipeline")["spec"]
    claim = one("data-pvc.yaml", "PersistentVolumeClaim")["metadata"]["name"]
    job_pod = one("gen-orders-job.yaml", "Job")["spec"]["template"]["spec"]
    job_claims = {
        v["persistentVolumeClaim"]["claimName"]
        for v in job_pod["volumes"]
        if "persistentVolumeClaim" in v
    }
    job_mount = next(m for m in job_pod["containers"][0]["volumeMounts"] if m["name"] == "data")
    secrets = {
        doc["metadata"]["name"]: doc["stringData"]
        for doc in load("postgres.yaml")
        if doc["kind"] == "Secret"
    }
    dsn_ref = spec["sinks"][0]["postgres"]["dsn"]["secretKeyRef"]
    mount = spec["driver"]["volumeMountPath"]

    assert spec["driver"]["volumeClaim"] == claim and job_claims == {claim}
    assert job_mount["mountPath"] == mount
    assert spec["source"]["files"]["path"] == f"{generator_args()['root']}/incoming"
    assert spec["source"]["files"]["path"].startswith(f"{mount}/")
    assert spec["checkpoint"]["location"].startswith(f"{mount}/")
    assert dsn_ref["key"] in secrets[dsn_ref["name"]]
    assert f":{secrets['postgres']['password']}@" in secrets[dsn_ref["name"]][dsn_ref["key"]]


def test_the_stream_is_long_enough_to_delete_two_drivers_in_it() -> None:
    files = one("pipeline.yaml", "ExactlyOncePipeline")["spec"]["source"]["files"]
    batches = -(-int(generator_args()["files"]) // files["maxFilesPerTrigger"])
    # run.sh deletes a driver after batch 2 and again two batches after the first relaunch.
    assert batches >= 20


def test_the_postgres_server_allows_prepared_transactions() -> None:
    container = one("postgres.yaml", "StatefulSet")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "postgres:16"
    assert container["args"] == ["-c", "max_prepared_transactions=64"]


def test_the_chart_installs_the_loaded_images_and_serves_the_pipeline_namespace() -> None:
    values = yaml.safe_load((HERE / "values.yaml").read_text())
    objects = render(values, release="eo", namespace="eo-system")
    container = find(objects, "Deployment", "eo-operator")["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["image"] == "eo-operator:e2e"
    assert container["imagePullPolicy"] == "Never"
    assert env["EO_JOB_IMAGE"] == "eo-job:e2e"
    assert (
        one("gen-orders-job.yaml", "Job")["spec"]["template"]["spec"]["containers"][0]["image"]
        == env["EO_JOB_IMAGE"]
    )
    find(objects, "ServiceAccount", env["EO_DRIVER_SERVICE_ACCOUNT"], NAMESPACE)
    find(objects, "RoleBinding", "eo-driver", NAMESPACE)


@pytest.fixture(scope="module")
def e2e_namespace(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """The namespace from manifests/namespace.yaml and the pipeline CRD, removed afterwards.

    The CRD is deleted only if this fixture created it, so a CRD another test installed stays.
    """
    had_crd = kube_cluster.kubectl("get", "crd", CRD_NAME, check=False).returncode == 0
    kube_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    kube_cluster.kubectl("wait", "--for=condition=Established", f"crd/{CRD_NAME}", "--timeout=60s")
    kube_cluster.kubectl("apply", "-f", str(MANIFESTS / "namespace.yaml"))
    try:
        yield kube_cluster
    finally:
        kube_cluster.kubectl("delete", "namespace", NAMESPACE, "--timeout=60s")
        if not had_crd:
            kube_cluster.kubectl("delete", "crd", CRD_NAME, "--timeout=60s")


@pytest.mark.parametrize(
    "manifest", ["postgres.yaml", "data-pvc.yaml", "gen-orders-job.yaml", "pipeline.yaml"]
)
def test_the_api_server_accepts_the_kind_manifest(
    e2e_namespace: KubeCluster, manifest: str
) -> None:
    result = e2e_namespace.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", str(MANIFESTS / manifest)
    )
    accepted = [ln for ln in result.stdout.splitlines() if ln.endswith(" (server dry run)")]
    docs = load(manifest)
    assert len(accepted) == len(docs), result.stdout
    for doc in docs:
        kind, name = doc["kind"].lower(), doc["metadata"]["name"]
        assert any(ln.startswith(kind) and f"/{name} " in ln for ln in accepted), result.stdout


def test_the_api_server_accepts_the_generator_script_configmap(e2e_namespace: KubeCluster) -> None:
    script = f"--from-file={HERE / 'gen_orders.py'}"
    create = ("create", "configmap", "gen-orders-script", script, "--dry-run=client", "-o=yaml")
    created = e2e_namespace.kubectl("-n", NAMESPACE, *create)
    result = e2e_namespace.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-", input=created.stdout
    )
    assert "configmap/gen-orders-script created (server dry run)" in result.stdout
