"""Driver and operator log the same way: JSON lines with pipeline, namespace, epoch and batch as
fields (or text for a terminal), kopf's object records included."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from eo_jobs import logs


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    logs.set_context(pipeline=None, namespace=None, epoch=None, batch=None)
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)


def _lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line]


def test_a_driver_record_is_one_json_line_with_its_pipeline_epoch_and_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("json", "INFO")
    logs.set_context(pipeline="orders", namespace="shop", epoch=3)
    logs.set_context(batch=17)
    logging.getLogger("eo.batch").warning("isolating %d rows", 40)

    (line,) = _lines(capsys)
    record = json.loads(line)
    assert record["message"] == "isolating 40 rows"
    assert (record["level"], record["logger"]) == ("WARNING", "eo.batch")
    assert (record["pipeline"], record["namespace"], record["epoch"], record["batch"]) == (
        "orders",
        "shop",
        3,
        17,
    )
    assert record["time"].endswith("+00:00")


def test_a_kopf_record_takes_its_pipeline_from_the_object_it_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("json", "INFO")
    ref = {"apiVersion": "eo.dev/v1alpha1", "name": "ledger", "namespace": "billing"}
    logging.getLogger("kopf.objects").info("Handler succeeded.", extra={"k8s_ref": ref})

    record = json.loads(_lines(capsys)[0])
    assert (record["pipeline"], record["namespace"]) == ("ledger", "billing")
    assert "epoch" not in record and "batch" not in record


def test_a_record_of_kopfs_object_logger_is_written_not_lost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # kopf's per-object logger adds its OperatorSettings (queues inside) to every record; a
    # JSON formatter that serialized it raised "cannot pickle '_queue.SimpleQueue'" and the
    # line (a handler's success, a finalizer's error) was lost.
    import kopf
    from kopf._core.actions.loggers import ObjectLogger

    logs.configure("json", "INFO")
    body = kopf.Body(
        {
            "apiVersion": "eo.dev/v1alpha1",
            "kind": "ExactlyOncePipeline",
            "metadata": {"name": "ledger", "namespace": "billing", "uid": "u-1"},
        }
    )
    ObjectLogger(body=body, settings=kopf.OperatorSettings()).info("Handler 'finalize' succeeded.")

    err = capsys.readouterr().err
    assert "Logging error" not in err, err
    (record,) = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert record["message"] == "Handler 'finalize' succeeded."
    assert (record["pipeline"], record["namespace"]) == ("ledger", "billing")
    assert "settings" not in record and "k8s_skip" not in record


def test_text_format_puts_the_context_before_the_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("text", "INFO")
    logs.set_context(pipeline="orders", namespace="shop", epoch=2, batch=5)
    logging.getLogger("eo.run").info("stop requested")

    (line,) = _lines(capsys)
    assert line.endswith("INFO eo.run [shop/orders e2 b5]: stop requested")


def test_the_format_comes_from_the_environment_and_a_wrong_one_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(logs.FORMAT_ENV, "TEXT")
    assert logs.configure() == "text"
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        logs.configure("xml")


def test_an_event_line_is_json_starting_with_its_event_and_carries_the_context(
    capsys: pytest.CaptureFixture[str],
) -> None:
    logs.configure("text", "INFO")  # events stay JSON for the tools that read them
    logs.set_context(pipeline="orders", namespace="shop", epoch=3, batch=16)
    logs.event("replay", batch=17, rows=2)

    (line,) = [line for line in capsys.readouterr().out.splitlines() if line]
    assert line.startswith('{"event": "replay"')
    assert json.loads(line) == {
        "event": "replay",
        "batch": 17,  # the event's own batch wins over the context's
        "rows": 2,
        "pipeline": "orders",
        "namespace": "shop",
        "epoch": 3,
    }


EVENTS_FROM_THREADS = """
import threading
from eo_jobs import logs

def emit(thread):
    for n in range(3000):
        logs.event("batch", batch=n, thread=thread, padding="x" * 200)

threads = [threading.Thread(target=emit, args=(t,)) for t in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_events_printed_by_several_threads_at_once_stay_one_per_line() -> None:
    """Phase 2's thread prints a batch's event while Spark's listener prints its progress: a
    tool that reads the stream (the bench, the tests, a log shipper) must get whole lines."""
    out = subprocess.run(
        [sys.executable, "-c", EVENTS_FROM_THREADS],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    lines = out.splitlines()
    broken = [line for line in lines if not line.startswith('{"event"') or line.count("{") != 1]
    assert not broken, broken[:3]
    assert len(lines) == 6 * 3000
    assert all(json.loads(line)["event"] == "batch" for line in lines)
