"""A checkpoint in an S3-compatible store (s3a://): the driver reads its query id and offsets
through Spark's Hadoop FileSystem, so crashes recover exactly and a lost checkpoint is refused.

Real Spark, real S3A (hadoop-aws from fetch-jars.sh), a real S3 server (moto) and PostgreSQL.
"""

from __future__ import annotations

import itertools
import json
import signal
from pathlib import Path

import psycopg
import pytest
from tests.runtime import harness
from tests.support.s3 import S3Server

from eo_jobs.exits import EXIT_USAGE
from eo_jobs.protocol.errors import EXIT_CHECKPOINT_RESET

pytestmark = pytest.mark.spark

_buckets = itertools.count()
KEYS = {"S3_TEST_KEY_ID": "eo-test", "S3_TEST_SECRET": "eo-test-secret"}


def _checkpoint(server: S3Server, bucket: str) -> str:
    return json.dumps(
        {
            "location": f"s3a://{bucket}/pipelines/orders",
            "triggerIntervalSeconds": 0,
            "s3": {
                "endpoint": server.endpoint,
                "region": "us-east-1",
                "pathStyleAccess": True,
                "accessKeyId": {"env": "S3_TEST_KEY_ID"},
                "secretAccessKey": {"env": "S3_TEST_SECRET"},
            },
        }
    )


@pytest.fixture
def bucket(s3_server: S3Server, tmp_path: Path) -> str:
    name = f"eo-ckpt-{next(_buckets)}-{abs(hash(tmp_path)) % 10**6}"
    s3_server.create_bucket(name)
    return name


def test_a_driver_killed_after_its_decision_recovers_exactly_from_an_s3_checkpoint(
    tmp_path: Path, pg_dsn: str, s3_server: S3Server, bucket: str
) -> None:
    harness.create_table(pg_dsn)
    truth = harness.write_files(tmp_path / "in", files=6, per_file=60)
    spec = harness.files_pipeline(tmp_path, checkpoint=_checkpoint(s3_server, bucket))
    fault = {"EO_FAULT_POINT": "after-decision", "EO_FAULT_BATCH": "1", **KEYS}

    code, out = harness.run(spec, 1, pg_dsn, extra_env=fault)
    assert code == -signal.SIGKILL, out
    code, out = harness.run(spec, 2, pg_dsn, extra_env=KEYS)

    assert code == 0, out
    harness.assert_exact(pg_dsn, truth)
    keys = s3_server.keys(bucket, "pipelines/orders/")
    assert "pipelines/orders/metadata" in keys
    assert "pipelines/orders/offsets/1" in keys
    with psycopg.connect(pg_dsn) as conn:
        recorded = conn.execute(
            "SELECT count(*) FROM eo.decisions WHERE batch_id = 1 AND source_offsets IS NOT NULL"
        ).fetchone()
    assert recorded == (1,), "the offsets Spark logged in S3 are recorded with the decision"


def test_a_lost_s3_checkpoint_is_refused_instead_of_replayed_into_duplicates(
    tmp_path: Path, pg_dsn: str, s3_server: S3Server, bucket: str
) -> None:
    harness.create_table(pg_dsn)
    truth = harness.write_files(tmp_path / "in", files=4, per_file=50)
    spec = harness.files_pipeline(tmp_path, checkpoint=_checkpoint(s3_server, bucket))
    assert harness.run(spec, 1, pg_dsn, extra_env=KEYS)[0] == 0
    for key in s3_server.keys(bucket, "pipelines/orders/"):
        s3_server.delete(bucket, key)

    code, out = harness.run(spec, 2, pg_dsn, extra_env=KEYS)

    assert code == EXIT_CHECKPOINT_RESET, out
    assert "checkpoint reset detected" in out
    harness.assert_exact(pg_dsn, truth)


def test_missing_s3_keys_stop_the_driver_with_the_field_to_fix(
    tmp_path: Path, pg_dsn: str, s3_server: S3Server, bucket: str
) -> None:
    harness.create_table(pg_dsn)
    harness.write_files(tmp_path / "in", files=1, per_file=10)
    spec = harness.files_pipeline(tmp_path, checkpoint=_checkpoint(s3_server, bucket))

    code, out = harness.run(spec, 1, pg_dsn)

    assert code == EXIT_USAGE, out
    assert "spec.checkpoint.s3.accessKeyId" in out
    assert "S3_TEST_KEY_ID" in out
