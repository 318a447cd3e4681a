"""Which engine functions an operation reached, beyond what PostgreSQL counts.

`pg_stat_get_xact_function_calls` counts a call when it returns: a call that raised is not
counted, and neither is one inside a subtransaction that an exception block rolled back. An
operation the candidate refuses from inside a function (every guard, every refusal) would then
reach nothing, and the mutants of exactly those guards would never be tried where they matter.
Two more sources close the gap:

- the error's context (`PG_DIAG_CONTEXT`): every PL/pgSQL or SQL function frame the error passed
  through on its way to the client; and a refused privilege ("permission denied for function
  v2_claim_all"): the function a grant mutant changes is one the caller never entered;
- the static call graph, read from `sql/` with PostgreSQL's scanner (pglast): a function with an
  exception block may have swallowed an error raised in anything it calls, so everything it can
  call (transitively) counts as reached when it does. An extra trial of a function that did not
  run costs one operation and leaves the candidate's state: the mutant stays live.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache

from pglast.parser import scan

from evidence_lib.mutation.sources import engine

# a frame of an error's context: "PL/pgSQL function engine.v2_claim_all(uuid[],...) line 13 at
# RAISE" or "SQL function "v2_grant_of" statement 1", or the message of a refused privilege
# (server messages, not SQL: no parser reads them)
FRAME = re.compile(r'PL/pgSQL function engine\.(\w+)\(|SQL function "(\w+)"|permission denied for function (\w+)')


@dataclass(frozen=True)
class CallGraph:
    callees: dict[str, frozenset[str]]  # function -> the engine functions its body names
    swallowing: frozenset[str]  # functions with an exception block

    def below(self, function: str) -> set[str]:
        """Everything `function` can call, transitively."""
        seen: set[str] = set()
        todo = list(self.callees.get(function, ()))
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(self.callees.get(name, ()))
        return seen

    def reached(self, counted: Iterable[str], contexts: Iterable[str]) -> set[str]:
        """The functions an operation reached: those counted, those an error passed through, and
        below every one of them that has an exception block, what it can call."""
        found = set(counted) | raised_in(contexts)
        for function in [f for f in found if f in self.swallowing]:
            found |= self.below(function)
        return found


def raised_in(contexts: Iterable[str]) -> set[str]:
    return {a or b or c for context in contexts for a, b, c in FRAME.findall(context)}


def _tokens(body: str) -> list[tuple[str, str]]:
    return [(t.name, body[t.start : t.end + 1].lower()) for t in scan(body)]


@cache
def call_graph() -> CallGraph:
    functions = engine().functions
    names = {f.name for f in functions}
    callees: dict[str, frozenset[str]] = {}
    swallowing: set[str] = set()
    for fn in functions:
        tokens = _tokens(fn.body)
        called = {
            tokens[i + 2][1]
            for i in range(len(tokens) - 3)
            if tokens[i][1] == "engine" and tokens[i + 1][1] == "." and tokens[i + 3][1] == "("
        }
        callees[fn.name] = frozenset(called & names - {fn.name})
        if any(a[1] == "exception" and b[1] == "when" for a, b in itertools.pairwise(tokens)):
            swallowing.add(fn.name)
    return CallGraph(callees, frozenset(swallowing))
