"""A function body as the generator sees it: its statements and every embedded SQL expression or
query, each with its exact place in the `sql/` file, and the variables in scope with their types.

PL/pgSQL bodies come from PostgreSQL's own PL/pgSQL parser (`pglast.parse_plpgsql`), SQL bodies
from `pglast.parse_sql`; token positions from PostgreSQL's scanner (`pglast.parser.scan`). The
PL/pgSQL parser resolves declared types only in `pg_catalog` and `public`, so the text it reads
has `engine.` replaced by `public.` (same length: every offset stays valid). An expression's
text in the tree is the source text itself, except that an `INTO` clause is blanked out (same
length) and `PERFORM` reads `SELECT`; `locate` finds each one in the body in source order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from pglast import parse_plpgsql, parse_sql
from pglast.parser import Token, scan

from evidence_lib.mutation.sources import CANONICAL, Function, SourceNotUnderstood

# how an expression's text is parsed and put back:
#   statement   a whole SQL statement (execsql, a FOR loop's query, an SQL function's statement)
#   perform     the text after PERFORM, parsed as "SELECT <text>"
#   expression  a PL/pgSQL expression (a condition, an assigned value, a RAISE parameter ...),
#               parsed as "SELECT <text>"
ExprKind = Literal["statement", "perform", "expression"]
PREFIX = {"statement": "", "perform": "SELECT", "expression": "SELECT "}


@dataclass
class Stmt:
    """One PL/pgSQL statement: its kind (`if`, `execsql`, `raise` ...), where it is in the file
    (`end` is just past its `;`), and the statements nested in it."""

    kind: str
    lineno: int
    start: int
    end: int = -1
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    children: list[Stmt] = field(default_factory=list, repr=False)
    parent_kind: str = ""

    @property
    def is_guard(self) -> bool:
        """An IF with no ELSE whose branch ends by raising an exception or returning."""
        if self.kind != "if" or self.raw.get("elsif_list") or self.raw.get("else_body"):
            return False
        body = self.raw.get("then_body") or []
        if not body:
            return False
        (last_kind, last), = body[-1].items()
        raises = last_kind == "PLpgSQL_stmt_raise" and last.get("elog_level") == 21  # EXCEPTION
        return bool(last_kind == "PLpgSQL_stmt_return" or raises)


@dataclass(frozen=True)
class Expr:
    """One embedded expression or query. `start`/`end` is the text a mutant replaces; `sql` is
    what pglast parses, the file's text at `start` preceded by `PREFIX[kind]`."""

    kind: ExprKind
    role: str  # "cond", "query", "assign", "param", "errcode", "return", "default", ...
    start: int
    end: int
    sql: str
    stmt: Stmt
    into: str = ""  # an execsql's INTO clause, as written ("into strict v_run")
    strict: bool = False

    @property
    def prefix(self) -> int:
        return len(PREFIX[self.kind])

    def file_offset(self, location: int) -> int:
        """The file offset of a location in `sql` (pglast's character location)."""
        return self.start + max(location - self.prefix, 0)


@dataclass(frozen=True)
class Variable:
    name: str
    type: str  # canonical: "int4", "uuid", "engine.runs" (a row), "record"
    is_param: bool
    lineno: int | None


@dataclass
class Body:
    """Everything of one function's body the operator families need."""

    fn: Function
    statements: list[Stmt]  # top level, in source order (the outer block's body)
    exprs: list[Expr]
    variables: dict[str, Variable]
    tokens: list[Token]  # of the body, offsets relative to the body start

    def walk(self) -> Iterator[Stmt]:
        stack = list(reversed(self.statements))
        while stack:
            stmt = stack.pop()
            yield stmt
            stack.extend(reversed(stmt.children))

    def token_at(self, offset: int) -> Token | None:
        """The body token starting at file offset `offset`."""
        rel = offset - self.fn.body_start
        return next((t for t in self.tokens if t.start == rel), None)


# the statement lists nested in each statement kind, in source order
CHILD_LISTS = ("body", "then_body", "elsif_list", "stmts", "else_body", "else_stmts", "case_when_list", "action")


def _kind(key: str) -> str:
    return key.removeprefix("PLpgSQL_stmt_")


class _Reader:
    def __init__(self, fn: Function) -> None:
        self.fn = fn
        self.text = fn.text.replace("engine.", "public.")  # same length: offsets stay valid
        self.body = self.text[fn.body_start : fn.body_end]
        self.tokens = scan(self.body)
        self.line_starts = [0] + [i + 1 for i, c in enumerate(self.body) if c == "\n"]
        self.exprs: list[Expr] = []
        self.pos = 0  # body offset: expressions are found in source order from here

    # -- positions --------------------------------------------------------------------------

    def line_start(self, lineno: int) -> int:
        return self.line_starts[min(lineno, len(self.line_starts)) - 1]

    def first_token_from(self, rel: int) -> Token:
        for t in self.tokens:
            if t.start >= rel and t.name not in ("SQL_COMMENT", "C_COMMENT"):
                return t
        raise SourceNotUnderstood(f"{self.fn.file}: no token after body offset {rel}")

    def semicolon_from(self, rel: int) -> int:
        """The body offset just past the first `;` at or after `rel`."""
        for t in self.tokens:
            if t.start >= rel and t.name == "ASCII_59":
                return t.end + 1
        raise SourceNotUnderstood(f"{self.fn.file}: no ';' after body offset {rel}")

    def end_of(self, rel: int, *words: str) -> int:
        """Just past the `;` of the first `END <words...>` at or after `rel`."""
        names = [self.body[t.start : t.end + 1].lower() for t in self.tokens]
        for i, t in enumerate(self.tokens):
            if t.start < rel or names[i] != "end":
                continue
            j = i + 1
            if all(j + k < len(names) and names[j + k] == w for k, w in enumerate(words)):
                return self.semicolon_from(self.tokens[j + len(words) - 1].end + 1 if words else t.end + 1)
        raise SourceNotUnderstood(f"{self.fn.file}: no END {' '.join(words)} after body offset {rel}")

    def locate(self, query: str, from_rel: int) -> int:
        """The body offset of `query` at or after `from_rel` (blanked INTO clauses match)."""
        at = self.body.find(query, from_rel)
        if at >= 0:
            return at
        # an INTO clause was blanked: the longest run of spaces is a wildcard
        runs = [(len(r), i) for i, r in _space_runs(query)]
        if not runs:
            raise SourceNotUnderstood(f"{self.fn.file}: expression not found: {query[:80]!r}")
        length, at_run = max(runs)
        head, tail = query[:at_run], query[at_run + length :]
        start = self.body.find(head, from_rel)
        while start >= 0:
            if self.body.startswith(tail, start + at_run + length):
                return start
            start = self.body.find(head, start + 1)
        raise SourceNotUnderstood(f"{self.fn.file}: expression not found: {query[:80]!r}")

    # -- expressions --------------------------------------------------------------------------

    def expr(self, node: dict[str, Any] | None, role: str, stmt: Stmt, raw_stmt: dict[str, Any] | None = None) -> None:
        if not node:
            return
        e = node["PLpgSQL_expr"]
        query: str = e["query"]
        mode = e.get("parseMode", 0)
        fs, text = self.fn.body_start, self.fn.text
        if role == "perform":
            rel = self.locate(query[len("SELECT") :], self.pos)
            end = rel + len(query) - len("SELECT")
            self._add("perform", role, fs + rel, fs + end, stmt, "SELECT" + text[fs + rel : fs + end])
        elif mode == 3:  # "target := value": the value is the expression
            rel = self.locate(query, self.pos)
            end = rel + len(query)
            value_at = _assignment_value(query)
            lead = len(query[value_at:]) - len(query[value_at:].lstrip())
            start = fs + rel + value_at + lead
            self._add("expression", role, start, fs + end, stmt, "SELECT " + text[start : fs + end])
        elif mode == 0:
            rel = self.locate(query, self.pos)
            end = rel + len(query)
            original = text[fs + rel : fs + end]
            # PL/pgSQL blanked the INTO clause (same length): blank it in the original too
            blanked = "".join(" " if q == " " else o for o, q in zip(original, query, strict=True))
            into_text = ""
            if raw_stmt is not None and raw_stmt.get("into"):
                into_chars = "".join(o if q == " " else " " for o, q in zip(original, query, strict=True))
                into_text = " ".join(into_chars.split())
            self._add("statement", role, fs + rel, fs + end, stmt, blanked, into_text,
                      bool(raw_stmt and raw_stmt.get("strict")))  # fmt: skip
        else:
            rel = self.locate(query, self.pos)
            end = rel + len(query)
            self._add("expression", role, fs + rel, fs + end, stmt, "SELECT " + text[fs + rel : fs + end])
        self.pos = end

    def _add(self, kind: ExprKind, role: str, start: int, end: int, stmt: Stmt, sql: str, into: str = "",
             strict: bool = False) -> None:  # fmt: skip
        self.exprs.append(Expr(kind, role, start, end, sql, stmt, into, strict))

    # -- statements ---------------------------------------------------------------------------

    def statements(self, nodes: list[dict[str, Any]], parent: str = "", prev_end: int = 0) -> list[Stmt]:
        out: list[Stmt] = []
        for node in nodes:
            (key, raw), = node.items()
            if key == "PLpgSQL_if_elsif":  # an ELSIF arm: its condition, then its statements
                self.expr(raw.get("cond"), "cond", out[-1] if out else Stmt("if", 0, 0))
                out.extend(self.statements(raw.get("stmts") or [], "elsif"))
                continue
            if key == "PLpgSQL_exception":
                out.extend(self.statements(raw.get("action") or [], "exception"))
                continue
            if key == "PLpgSQL_case_when":
                self.expr(raw.get("expr"), "cond", Stmt("case", 0, 0))
                out.extend(self.statements(raw.get("stmts") or [], "case"))
                continue
            if not raw.get("lineno"):
                continue  # PL/pgSQL's implicit RETURN at the end of a SETOF or void function
            lineno = raw["lineno"]
            begin = max(self.line_start(lineno), self.pos, prev_end)
            start = self.first_token_from(begin).start
            stmt = Stmt(_kind(key), lineno, self.fn.body_start + start, raw=raw, parent_kind=parent)
            self.pos = max(self.pos, start)
            self._statement(stmt, raw)
            stmt.end = self.fn.body_start + self._end(stmt)
            self.pos = max(self.pos, stmt.end - self.fn.body_start)
            prev_end = stmt.end - self.fn.body_start
            out.append(stmt)
        return out

    def _statement(self, stmt: Stmt, raw: dict[str, Any]) -> None:
        k = stmt.kind
        if k == "perform":
            self.expr(raw.get("expr"), "perform", stmt)
        elif k == "execsql":
            self.expr(raw.get("sqlstmt"), "query", stmt, raw)
        elif k in ("assign", "return", "return_next"):
            self.expr(raw.get("expr"), {"assign": "assign"}.get(k, "return"), stmt)
        elif k == "raise":
            for p in raw.get("params") or []:
                self.expr(p, "param", stmt)
            for o in raw.get("options") or []:
                opt = o["PLpgSQL_raise_option"]
                self.expr(opt.get("expr"), "errcode" if opt.get("opt_type", 0) == 0 else "option", stmt)
        elif k in ("if", "while", "exit"):
            self.expr(raw.get("cond"), "cond", stmt)
        elif k == "fors":
            self.expr(raw.get("query"), "query", stmt)
        elif k == "dynexecute":
            self.expr(raw.get("query"), "dynamic", stmt)
            for p in raw.get("params") or []:
                self.expr(p, "param", stmt)
        elif k == "block" and raw.get("exceptions"):
            pass
        for name in CHILD_LISTS:
            if raw.get(name):
                stmt.children.extend(self.statements(raw[name], k))
        if k == "block" and raw.get("exceptions"):
            handlers = raw["exceptions"]["PLpgSQL_exception_block"]["exc_list"]
            stmt.children.extend(self.statements(handlers, "block"))

    def _end(self, stmt: Stmt) -> int:
        after = max(self.pos, stmt.start - self.fn.body_start)
        if stmt.kind == "if":
            return self.end_of(after, "if")
        if stmt.kind in ("loop", "fors", "fori", "while", "foreach_a"):
            return self.end_of(after, "loop")
        if stmt.kind == "block":
            return self.end_of(after)
        return self.semicolon_from(after)


def _space_runs(query: str) -> Iterator[tuple[int, str]]:
    i = 0
    while i < len(query):
        if query[i] == " ":
            j = i
            while j < len(query) and query[j] == " ":
                j += 1
            if j - i > 2:
                yield i, query[i:j]
            i = j
        else:
            i += 1


def _assignment_value(query: str) -> int:
    """Where the value of `target := value` (or `target = value`) begins."""
    for t in scan(query):
        if t.name in ("COLON_EQUALS", "ASCII_61"):
            return t.end + 1
    raise SourceNotUnderstood(f"not an assignment: {query!r}")


def _declared_type(reader: _Reader, name: str, lineno: int) -> str:
    """The type written after a variable's name on its declaration line."""
    start = reader.line_start(lineno)
    end = reader.line_starts[lineno] if lineno < len(reader.line_starts) else len(reader.body)
    words: list[str] = []
    seen = False
    for t in reader.tokens:
        if t.start < start or t.start >= end:
            continue
        piece = reader.body[t.start : t.end + 1]
        if not seen:
            seen = piece == name
            continue
        if t.name in ("COLON_EQUALS", "ASCII_59", "DEFAULT") or piece == "=":
            break
        words.append(piece)
    text = "".join(w if w in (".", "[", "]") else f" {w}" for w in words).strip().replace(" .", ".").replace(". ", ".")
    text = text.replace("public.", "engine.").lower()
    return CANONICAL.get(text, text)


@cache
def read(fn: Function) -> Body:
    """The body of `fn`: statements, expressions and variables, with their places in the file."""
    reader = _Reader(fn)
    if fn.language == "sql":
        return _sql_body(fn, reader)
    try:
        tree = parse_plpgsql(reader.text)[0]["PLpgSQL_function"]
    except Exception as exc:
        raise SourceNotUnderstood(f"{fn.file}: the PL/pgSQL parser refused it: {exc}") from exc
    variables: dict[str, Variable] = {}
    params = {p.name: CANONICAL.get(p.type.lower(), p.type.lower()) for p in fn.params}
    datums = tree.get("datums", [])
    for datum in datums:
        (key, raw), = datum.items()
        name = raw.get("refname", "")
        if key == "PLpgSQL_var" and name in params:
            variables[name] = Variable(name, params[name], True, None)
        elif key in ("PLpgSQL_var", "PLpgSQL_rec") and raw.get("lineno") and name not in ("found",):
            declared = _declared_type(reader, name, raw["lineno"])
            if declared:  # not an exception block's implicit sqlstate / sqlerrm
                variables[name] = Variable(name, declared, False, raw["lineno"])
    if fn.returns == "trigger":
        for name in ("new", "old"):
            variables[name] = Variable(name, "trigger row", False, None)
    # the DECLARE section's initial values come first in the source
    decl = Stmt("declare", 1, fn.body_start)
    for datum in datums:
        (key, raw), = datum.items()
        if key == "PLpgSQL_var" and raw.get("default_val") and raw.get("lineno"):
            reader.pos = max(reader.pos, reader.line_start(raw["lineno"]))
            reader.expr(raw["default_val"], "default", decl)
    action = tree["action"]["PLpgSQL_stmt_block"]
    top = reader.statements([{"PLpgSQL_stmt_block": action}])
    return Body(fn, top, reader.exprs, variables, reader.tokens)


def _sql_body(fn: Function, reader: _Reader) -> Body:
    variables = {p.name: Variable(p.name, CANONICAL.get(p.type.lower(), p.type.lower()), True, None) for p in fn.params}
    statements: list[Stmt] = []
    for raw in parse_sql(fn.body):
        start = fn.body_start + int(raw.stmt_location or 0)
        end = start + raw.stmt_len if raw.stmt_len else fn.body_end
        text = fn.text[start:end]
        stmt = Stmt("sql", 0, start, reader.semicolon_from(end - fn.body_start) + fn.body_start)
        statements.append(stmt)
        lead = len(text) - len(text.lstrip())
        reader.exprs.append(Expr("statement", "query", start + lead, end, text.strip(), stmt))
    return Body(fn, statements, reader.exprs, variables, reader.tokens)
