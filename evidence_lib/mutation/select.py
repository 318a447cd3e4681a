"""Which mutants a run judges: all of them (the full sweep), those of some objects or operators,
those of the objects changed since a revision (Google's and Stryker's diff mode: every mutant of
a changed object, none sampled), a deterministic sample seeded by the revision, and one shard of
any of these (`i/n`: by id, so n shards partition the set on any machine).

Bad input gets one clear line (`BadSelection`, exit code 2 at the command line).
"""

from __future__ import annotations

import ast
import random
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

from evidence_lib import PROJECT_ROOT
from evidence_lib.errors import EvidenceError
from evidence_lib.mutation.mutant import Mutant


class BadSelection(EvidenceError):
    """An unknown object or operator, a malformed shard, a revision that does not exist."""


@dataclass(frozen=True)
class Shard:
    index: int  # 1-based
    count: int

    @staticmethod
    def parse(text: str) -> Shard:
        head, sep, tail = text.partition("/")
        if not sep or not head.isdigit() or not tail.isdigit() or not 1 <= int(head) <= int(tail):
            raise BadSelection(f"--shard {text!r}: expected i/n with 1 <= i <= n, for example 2/4")
        return Shard(int(head), int(tail))

    def holds(self, mutant: Mutant) -> bool:
        return int(mutant.id, 16) % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _names(mutant: Mutant) -> set[str]:
    """The names a user may give for the object of `mutant` (`v2_claim`, `engine.v2_claim`, the
    label, a table for its constraints, a Python module or `module:qualname`)."""
    names = {mutant.obj, mutant.target, *mutant.functions}
    names |= {f"engine.{f}" for f in mutant.functions}
    if mutant.kind == "python":
        module, _, qualname = mutant.target.partition(":")
        names |= {module, module.rsplit(".", 1)[-1], qualname, qualname.split(".", 1)[0]}
    for word in mutant.obj.split():
        names.add(word)
        names.add(word.split(".", 1)[-1] if word.startswith("engine.") else word)
    return names


def by_objects(mutants: list[Mutant], objects: Iterable[str]) -> list[Mutant]:
    wanted = [o.strip() for o in objects if o.strip()]
    for name in wanted:
        if not any(name in _names(m) for m in mutants):
            raise BadSelection(f"unknown object {name!r}: no mutant of it (give a function such as v2_claim, a table, "
                               "a grant's function, or a worker module/function)")  # fmt: skip
    return [m for m in mutants if any(name in _names(m) for name in wanted)]


def by_operators(mutants: list[Mutant], operators: Iterable[str]) -> list[Mutant]:
    wanted = [o.strip() for o in operators if o.strip()]
    known = {m.family for m in mutants} | {m.operator for m in mutants}
    for name in wanted:
        if name not in known:
            families = ", ".join(sorted({m.family for m in mutants}))
            raise BadSelection(f"unknown operator {name!r}: use a family ({families}) or an operator such as <To<=")
    return [m for m in mutants if m.family in wanted or m.operator in wanted]


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BadSelection(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout


def resolve(revision: str) -> str:
    """The full commit id of `revision`, or BadSelection naming it."""
    try:
        return _git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}").strip()
    except BadSelection:
        raise BadSelection(f"--since {revision!r}: no such revision in this repository") from None


def _functions_at(revision: str, path: str) -> dict[str, str]:
    """qualname -> ast.dump of each function of a Python file at `revision` (empty if absent)."""
    try:
        text = _git("show", f"{revision}:{path}")
    except BadSelection:
        return {}
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        items = [(node.name, node)] if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else []
        if isinstance(node, ast.ClassDef):
            items = [(f"{node.name}.{i.name}", i) for i in node.body if isinstance(i, ast.FunctionDef)]
        for name, fn in items:
            out[name] = ast.dump(fn, annotate_fields=False, include_attributes=False)
    return out


def since(mutants: list[Mutant], revision: str) -> list[Mutant]:
    """Every mutant of the objects changed since `revision` (committed or not): a `sql/` file is
    one object; a worker function counts as changed when its parse tree differs."""
    commit = resolve(revision)
    diff = _git("diff", "--name-only", commit, "--", "sql", "evidence_lib/workers")
    changed = {line.strip() for line in diff.splitlines()}
    changed |= {line.strip() for line in _git("ls-files", "--others", "--exclude-standard", "sql",
                                              "evidence_lib/workers").splitlines()}  # fmt: skip
    before: dict[str, dict[str, str]] = {}
    chosen = []
    for m in mutants:
        if m.file not in changed:
            continue
        if m.kind != "python" or m.family == "py-sql":
            chosen.append(m)
            continue
        if m.file not in before:
            before[m.file] = _functions_at(commit, m.file)
        now = _functions_at_worktree(m.file)
        qualname = m.target.split(":", 1)[1]
        if before[m.file].get(qualname) != now.get(qualname):
            chosen.append(m)
    return chosen


def _functions_at_worktree(path: str) -> dict[str, str]:
    text = (PROJECT_ROOT / path).read_text()
    out: dict[str, str] = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            out[node.name] = ast.dump(node, annotate_fields=False, include_attributes=False)
        elif isinstance(node, ast.ClassDef):
            for i in node.body:
                if isinstance(i, ast.FunctionDef):
                    out[f"{node.name}.{i.name}"] = ast.dump(i, annotate_fields=False, include_attributes=False)
    return out


def sample(mutants: list[Mutant], size: int, seed: str) -> list[Mutant]:
    """`size` mutants chosen deterministically by `seed` (the revision), in id order."""
    ordered = sorted(mutants, key=lambda m: m.id)
    if size >= len(ordered):
        return ordered
    return sorted(random.Random(seed).sample(ordered, size), key=lambda m: m.id)


def shard(mutants: list[Mutant], which: Shard | None) -> list[Mutant]:
    return [m for m in mutants if which is None or which.holds(m)]
