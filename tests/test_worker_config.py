"""What the workers share (`workers/config.py`), without a server: the configuration's ranges,
each bound at its edge; the step selector's rules and what each refusal says; JSON results; and
a log sink that fails."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest

from evidence_lib.engine.flows import Flow, with_step_queues
from evidence_lib.workers.config import (
    HandlerError,
    SafeLog,
    StepSelectorError,
    WorkerConfig,
    ensure_json,
    resolve_queue,
)

OUT_OF_RANGE = [
    {"concurrency": 0},
    {"visibility_timeout": 0},
    {"report_attempts": 0},
    {"connect_timeout": 1},
    {"reconnect_initial": 0.0},
    {"reconnect_initial": 0.5, "reconnect_cap": 0.25},
]
AT_THE_EDGE = [
    {"concurrency": 1},
    {"visibility_timeout": 1},
    {"report_attempts": 1},
    {"connect_timeout": 2},
    {"reconnect_initial": 0.001},
    {"reconnect_initial": 0.5, "reconnect_cap": 0.5},
]


@pytest.mark.parametrize("settings", OUT_OF_RANGE, ids=str)
def test_a_setting_out_of_range_is_refused_alone(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="out of range"):
        WorkerConfig(**settings)


@pytest.mark.parametrize("settings", AT_THE_EDGE, ids=str)
def test_a_setting_at_the_edge_of_its_range_is_taken(settings: dict[str, Any]) -> None:
    config = WorkerConfig(**settings)
    assert all(getattr(config, k) == v for k, v in settings.items())


def _flow() -> Flow[Any]:
    flow: Flow[Any] = Flow("sel", max_attempts=1)
    flow.add("a", lambda x: x)
    flow.add("b", lambda x: x, deps=["a"])
    return flow


def test_the_step_selector_fits_the_queue_mode_and_each_refusal_says_why() -> None:
    plain, stepped = _flow(), with_step_queues(_flow())
    assert resolve_queue(plain, None) == ("sel", None)
    queue, step = resolve_queue(stepped, "b")
    assert step == "b" and queue != "sel"
    with pytest.raises(StepSelectorError, match="flow sel is a plain flow: its worker reads queue sel"):
        resolve_queue(plain, "a")
    with pytest.raises(StepSelectorError, match="flow sel uses private step queues: name one of its steps"):
        resolve_queue(stepped, None)
    with pytest.raises(StepSelectorError, match="flow sel has no step 'zz'"):
        resolve_queue(stepped, "zz")


def test_a_result_that_is_not_json_is_a_handler_error() -> None:
    assert ensure_json({"a": [1, None, "x"]}) == {"a": [1, None, "x"]}
    for bad in ({"x": object()}, math.nan, {"inf": math.inf}):
        with pytest.raises(HandlerError, match="handler result is not JSON"):
            ensure_json(bad)  # type: ignore[arg-type]


class Failing(logging.Logger):
    def isEnabledFor(self, level: int) -> bool:
        raise OSError("log config broken")

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        raise OSError("log disk full")


def test_a_failing_log_sink_is_counted_and_said_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    log = SafeLog(Failing("failing"))
    assert log.failures == 0
    assert log.enabled(logging.DEBUG)  # when it cannot tell, it says yes: nothing is lost silently
    log(logging.WARNING, "not_granted", "message 7 in queue q left intact")
    log(logging.WARNING, "not_granted", "message 8 in queue q left intact")
    assert log.failures == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "[logging failed: OSError('log disk full')] not_granted: message 7 in queue q left intact",
        "[logging failed: OSError('log disk full')] not_granted: message 8 in queue q left intact",
    ]


def test_a_working_log_sink_gets_the_event_and_the_fields(caplog: pytest.LogCaptureFixture) -> None:
    log = SafeLog(logging.getLogger("test.safelog"))
    with caplog.at_level(logging.INFO, logger="test.safelog"):
        assert log.enabled(logging.INFO)
        log(logging.INFO, "claimed", "claimed 3", queue="q", message_id=3)
    [record] = caplog.records
    fields = (record.getMessage(), record.event, record.queue, record.message_id)  # type: ignore[attr-defined]
    assert fields == ("claimed 3", "claimed", "q", 3)
    assert log.failures == 0
