"""The static half of the moderation validation: mypy rejecting wrong step selectors, an audit
of the application's code (no PGMQ in it), the parity table and the recommendation derived from
the gates."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from evidence_lib import PROJECT_ROOT
from evidence_lib.plain import plain
from evidence_lib.results.scenario import ScenarioResult

HERE = Path(__file__).parent


def typing_check(result: ScenarioResult) -> None:
    probe = HERE / "typing_probe.py"
    expected = {i for i, line in enumerate(probe.read_text().splitlines(), 1) if "# rejected" in line}
    checked = subprocess.run(  # from the project root, so that mypy reads the project's configuration
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-color-output",
            "--strict",
            "--no-error-summary",
            str(probe.relative_to(PROJECT_ROOT)),
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    stdout = checked.stdout
    found: dict[int, str] = {}
    for line in stdout.splitlines():
        m = re.match(r".*typing_probe\.py:(\d+): error: (.*)", line)
        if m:
            found[int(m.group(1))] = m.group(2)
    lines = probe.read_text().splitlines()
    result.table(
        "type_checker",
        [
            {"line": i, "code": lines[i - 1].strip(), "mypy": found.get(i, "accepted")}
            for i in range(1, len(lines) + 1)
            if "Worker(" in lines[i - 1] or ".add(" in lines[i - 1]
        ],
    )
    result.gate(
        "typed step selector: mypy rejects exactly the wrong selectors",
        set(found) == expected,
        f"rejected lines {sorted(found)}, expected {sorted(expected)}"
        + ("" if set(found) == expected else f"; mypy said: {stdout[-600:]} {checked.stderr[-300:]}"),
    )


def audit(result: ScenarioResult) -> None:
    sources = {p.name: p.read_text() for p in HERE.glob("*.py") if not p.name.startswith("validation")}
    pgmq_refs = {name: len(re.findall(r"pgmq\.", text)) for name, text in sources.items()}
    engine_calls = sorted({m for text in sources.values() for m in re.findall(r"engine\.(\w+)\(", text)})
    result.table(
        "code_audit",
        [
            {
                "concern": "queue creation, send, read, visibility, archive",
                "before": "hand-written pgmq.* calls",
                "with the engine": f"none: {sum(pgmq_refs.values())} pgmq references in the application",
            },
            {
                "concern": "retry with backoff",
                "before": "own attempts column + scheduler",
                "with the engine": "max_attempts / base_delay on the flow and step",
            },
            {
                "concern": "fan-in of results between steps",
                "before": "own join table",
                "with the engine": "handler input {run, <dep>: output}",
            },
            {
                "concern": "per-step capacity",
                "before": "one shared worker loop",
                "with the engine": "one Worker per step with its own WorkerConfig",
            },
            {
                "concern": "domain claims and verdicts",
                "before": "own tables",
                "with the engine": "kept: moderation.reviews "
                "with guarded transitions (a retried or recovered handler never moves a review twice)",
            },
            {
                "concern": "stalled-task recovery",
                "before": "own sweeper",
                "with the engine": "kept: a maintenance loop "
                "calling engine.requeue_stalled_tasks (the engine has no scheduler)",
            },
            {
                "concern": "junk in a step queue",
                "before": "dead-letter table",
                "with the engine": "kept: needs an "
                "operator; messages are left intact and re-read every visibility timeout",
            },
        ],
    )
    result.notes.append(f"engine calls the application makes directly: {', '.join(engine_calls)}")
    result.gate(
        "the application needs no direct PGMQ call",
        sum(pgmq_refs.values()) == 0 or set(k for k, v in pgmq_refs.items() if v) <= {"validation.py"},
        f"pgmq references per file: {plain(pgmq_refs)}",
    )


# (capability, status, blocks the private-step-queue release?)
PARITY: list[tuple[str, str, bool]] = [
    ("per-step worker pools, typed step selectors, coverage query", "present", False),
    ("retry with backoff, start_delay, fan-in of step outputs", "present (v1)", False),
    (
        "v2 protocol for this pipeline",
        "missing: v2 admits exactly A -> B; this 3-step pipeline runs on v1 "
        "(the v2 envelope is a separate, bounded proof)",
        False,
    ),
    (
        "automatic stalled-task recovery",
        "missing: requeue_stalled_tasks must be scheduled by the application "
        "(documented in docs/queues.md; a supervised driver is later work)",
        False,
    ),
    (
        "quarantine for unknown messages",
        "missing: they stay in the step queue and are re-read after every "
        "visibility timeout; an operator removes them (by design: the engine never deletes what is "
        "not its own)",
        False,
    ),
    (
        "handler-chosen retry delay",
        "missing: backoff is base_delay * 2^(n-1) only (independent issue)",
        False,
    ),
    ("shared or grouped queues", "missing by design (deferred until a concrete use case)", False),
]


def recommend(result: ScenarioResult) -> None:
    result.table("parity", [{"capability": c, "status": st, "blocks_release": b} for c, st, b in PARITY])
    correctness = [g for g in result.gates if not g.name.startswith("independent capacity")]
    capacity = [g for g in result.gates if g.name.startswith("independent capacity")]
    blocking = [c for c, _, b in PARITY if b]
    follow_ups = [c for c, st, b in PARITY if st.startswith("missing:") and not b]
    if not all(g.passed for g in correctness):
        decision, why = (
            "stop",
            "a correctness gate failed: " + ", ".join(g.name for g in correctness if not g.passed),
        )
    elif not capacity or not all(g.passed for g in capacity):
        decision, why = "stop", "private step queues did not remove the starvation in this run"
    elif blocking:
        decision, why = (
            "revise",
            "correct and isolating, but these gaps block release: " + "; ".join(blocking),
        )
    else:
        ratio = next(g.detail for g in capacity)
        decision, why = (
            "adopt",
            (
                f"every behaviour gate is green and the slow step no longer starves the fast ones "
                f"({ratio}); the application keeps no queue code. Follow-ups that do not block "
                f"the release: {'; '.join(follow_ups)}"
            ),
        )
    result.notes.insert(0, f"RECOMMENDATION: {decision.upper()}. {why}")
    result.table("recommendation", [{"recommendation": decision, "reasons": why}])
