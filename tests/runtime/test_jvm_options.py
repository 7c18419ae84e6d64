"""eo's JVM options reach the driver JVM that PySpark launches (a real launch, not the conf map)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from tests.support.pipelines import document
from tests.support.spark import local_session

from eo_jobs.runtime.session import spark_conf
from eo_jobs.spec import parse_pipeline


def test_the_driver_jvm_runs_the_parallel_collector_eo_asks_for() -> None:
    conf = spark_conf(parse_pipeline(document()).spec, "eo-jvm-options-test", environ={})
    key = "spark.driver.extraJavaOptions"

    with local_session("eo-jvm-options-test", {key: conf[key]}) as spark:
        jvm = spark.sparkContext._jvm
        assert jvm is not None
        beans = jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
        names = {str(bean.getName()) for bean in beans}

    assert names == {"PS Scavenge", "PS MarkSweep"}
