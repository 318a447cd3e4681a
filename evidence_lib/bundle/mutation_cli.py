"""Command line for mutation analysis: `python -m evidence_lib mutation` (`make mutation`) and
`python -m evidence_lib merge` (shards made on several machines, as one report).

Bad input gets one clear line and exit code 2: an unknown object or operator, a malformed shard,
a `--since` revision that does not exist, shards of different revisions given to merge.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from evidence_lib import OUTPUTS_DIR, PROJECT_ROOT, progress
from evidence_lib.mutation import report, select
from evidence_lib.mutation.history import DEFAULT
from evidence_lib.mutation.sweep import PARTS_BUDGET, Settings, Sweep, plan, run
from evidence_lib.pg import servers
from evidence_lib.scenarios.support.parts import migrated_template

EXIT_BAD_INPUT = 2


def revision() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def settings(args: argparse.Namespace, out: Path | None = None) -> Settings:
    if args.jobs < 1:
        raise select.BadSelection(f"--jobs {args.jobs}: at least 1")
    if args.part_jobs < 0:
        raise select.BadSelection(f"--part-jobs {args.part_jobs}: at least 1 (or 0: twice --jobs)")
    return Settings(
        jobs=args.jobs,
        since=args.since,
        shard=select.Shard.parse(args.shard) if args.shard else None,
        sample=args.sample,
        objects=tuple(o for o in args.objects.split(",") if o),
        operators=tuple(o for o in args.operators.split(",") if o),
        examples=args.examples,
        history=None if args.no_history else Path(args.history) if args.history else DEFAULT,
        journal=out,
        parts_budget=args.parts_budget,
        part_jobs=args.part_jobs,
    )


def write(sweep: Sweep, out: Path) -> dict[str, Any]:
    """mutation.json and a plain summary beside it."""
    out.mkdir(parents=True, exist_ok=True)
    gen = sweep.generated
    data = report.to_report(sweep, dropped=gen.dropped())
    (out / "mutation.json").write_text(json.dumps(data, indent=1))
    (out / "summary.txt").write_text(summary_line(data) + "\n")
    return data


def summary_line(data: dict[str, Any]) -> str:
    m = report.metrics(data)
    config = data.get("config", {})
    assert isinstance(config, dict)
    return (f"mutation score: {m.detected} of {m.valid} ({m.ignored} equivalent, {m.compile_errors} not compiling, "
            f"{m.runtime_errors} runtime errors, {m.timeout} timeouts; {config.get('mode', '')}) = {m.score:.1f} %; "
            f"{m.survived} survived, {m.no_coverage} not covered; {config.get('reused', 0)} verdicts reused"
            )  # fmt: skip


def cmd_mutation(args: argparse.Namespace) -> int:
    os.environ.setdefault(progress.ENV, "-")
    rev = revision()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out) if args.out else OUTPUTS_DIR / f"mutation-{stamp}-{rev[:12]}"
    try:
        chosen = settings(args, out)
        mutants = plan(chosen, rev)
    except select.BadSelection as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with (
        servers.open_server(args.database_url, fast=True) as server,
        migrated_template(server, prefix="mut_cand") as cand,
    ):
        sweep = run(server, cand, rev, chosen, mutants)
    data = write(sweep, out)
    line = summary_line(data)
    print(line)
    print(f"report: {out / 'mutation.json'} ({sweep.seconds:.0f} s)")
    score = report.metrics(data).score
    if args.break_at is not None and score < args.break_at:
        print(f"the score {score:.1f} % is below --break-at {args.break_at}", file=sys.stderr)
        return 1
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    """Evidence bundles (a manifest.json each) into one bundle, or mutation reports into one report."""
    folders = [Path(p) for p in args.shards]
    for f in folders:
        if f.is_dir() and not (f / "manifest.json").is_file() and not (f / "mutation.json").is_file():
            print(f"error: {f}: not an evidence bundle (no manifest.json) nor a mutation report (no mutation.json)",
                  file=sys.stderr)  # fmt: skip
            return EXIT_BAD_INPUT
    if folders and all((f / "manifest.json").is_file() for f in folders):
        from evidence_lib.bundle.merge import merge

        target, code = merge(folders, Path(args.out) if args.out else None)  # BadMerge: one line, exit 2
        print(f"merged {len(folders)} bundles into {target}: exit code {code}")
        print(f"open {target / 'index.html'}")
        return code
    if not args.out:
        print("error: merging mutation reports needs --out", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        reports = [report.load(Path(p) / "mutation.json" if Path(p).is_dir() else Path(p)) for p in args.shards]
        merged = report.merge(reports)
    except report.BadReport as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "mutation.json").write_text(json.dumps(merged, indent=1))
    line = summary_line(merged)
    (out / "summary.txt").write_text(line + "\n")
    print(line)
    print(f"report: {out / 'mutation.json'}")
    return 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("mutation", help="mutation analysis: generated mutants judged by the evidence (make mutation)")
    p.add_argument("--database-url", default=None, help="use this server (default: a throwaway embedded one)")
    p.add_argument("--jobs", type=int, default=1, help="mutants judged at once, each job on its own databases")
    p.add_argument("--part-jobs", type=int, default=0, help="scenario parts run at once for the mutants the model "
                   "leaves alive (default 0: twice --jobs; a part mostly waits on leases and locks)")
    p.add_argument("--since", default="", help="only the objects changed since this git revision, every mutant")
    p.add_argument("--shard", default="", help="i/n: this machine's share of the mutants (merge the shards after)")
    p.add_argument("--sample", type=int, default=None, help="a deterministic sample of N mutants (seeded by HEAD)")
    p.add_argument("--objects", default="", help="comma-separated objects: v2_claim, engine.task_claims, v2 ...")
    p.add_argument("--operators", default="", help="comma-separated families (relational ...) or operator names")
    p.add_argument("--examples", type=int, default=2, help="seeded random histories per mutant in the model oracle")
    p.add_argument("--history", default="", help=f"verdicts to reuse and update (default {DEFAULT})")
    p.add_argument("--no-history", action="store_true", help="judge every mutant afresh, record nothing")
    p.add_argument("--parts-budget", type=float, default=PARTS_BUDGET,
                   help="seconds of the candidate's part time tried per mutant the model leaves alive, likeliest "
                   "parts first (0: every covering part)")  # fmt: skip
    p.add_argument("--break-at", type=float, default=None, help="exit 1 when the score is below this percentage")
    p.add_argument("--out", default="", help="folder for mutation.json and the journal of verdicts; a run given the "
                   "folder of an interrupted run resumes it (default outputs/mutation-<UTC>-<rev12>)")
    p.set_defaults(func=cmd_mutation)
    p = sub.add_parser("merge", help="merge shards into one: evidence bundles (make evidence SHARD=i/n, one or several "
                       "PostgreSQL majors) into one bundle, or mutation reports (one revision) into one report")
    p.add_argument("shards", nargs="+", help="bundle folders, or mutation.json files or folders holding one")
    p.add_argument("--out", default="", help="the merged bundle's folder (default outputs/<UTC>-<rev12>), or the "
                   "folder for the merged mutation.json")
    p.set_defaults(func=cmd_merge)
