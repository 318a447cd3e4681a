"""The Python families, from Python's `ast` (PIT's defaults, in Python): operators (comparisons,
arithmetic, `and`/`or`, `not` removed), constants (numbers to one more, one less and 0),
booleans (`True`/`False` flipped, every condition negated, and every `if` and loop condition
forced true and false: each branch of the driver loops always and never taken), statements (each statement of a
body deleted) and returns (`return x` to `return None`). Each yields (operator, node index, the
mutated copy of the function) for one function; the node index is its position in `ast.walk`
order, so a mutant names the same node while the function is unchanged."""

from __future__ import annotations

import ast
import copy
from collections.abc import Callable, Iterator

Change = tuple[str, int, ast.AST]  # (operator, node index, the mutated function)
PyFamily = Callable[[ast.FunctionDef | ast.AsyncFunctionDef], Iterator[Change]]

COMPARE: dict[type[ast.cmpop], tuple[type[ast.cmpop], ...]] = {
    ast.Lt: (ast.LtE, ast.GtE), ast.LtE: (ast.Lt, ast.Gt), ast.Gt: (ast.GtE, ast.LtE), ast.GtE: (ast.Gt, ast.Lt),
    ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.In: (ast.NotIn,), ast.NotIn: (ast.In,),
    ast.Is: (ast.IsNot,), ast.IsNot: (ast.Is,),
}  # fmt: skip
BINARY: dict[type[ast.operator], tuple[type[ast.operator], ...]] = {
    ast.Add: (ast.Sub,), ast.Sub: (ast.Add,), ast.Mult: (ast.Div,), ast.Div: (ast.Mult,),
    ast.FloorDiv: (ast.Mult,), ast.Mod: (ast.Mult,), ast.Pow: (ast.Mult,),
}  # fmt: skip


def _indexed(fn: ast.AST) -> list[ast.AST]:
    return list(ast.walk(fn))


def _mutate(fn: ast.AST, index: int, change: Callable[[ast.AST], ast.AST | None]) -> ast.AST:
    """A copy of `fn` whose node number `index` is replaced by `change(node)` (None: `pass`)."""
    new = copy.deepcopy(fn)
    nodes = _indexed(new)
    target = nodes[index]
    for parent in nodes:
        for field, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, field, change(target))
                return ast.fix_missing_locations(new)
            if isinstance(value, list) and any(v is target for v in value):
                items = []
                for v in value:
                    if v is target:
                        replaced = change(v)
                        items.append(ast.Pass() if replaced is None else replaced)
                    else:
                        items.append(v)
                setattr(parent, field, items)
                return ast.fix_missing_locations(new)
    raise ValueError("node not found")


def _name(op: object) -> str:
    return type(op).__name__


def operators(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Change]:
    for i, node in enumerate(_indexed(fn)):
        if isinstance(node, ast.Compare):
            for j, op in enumerate(node.ops):
                for other in COMPARE.get(type(op), ()):
                    def swap(n: ast.AST, j: int = j, other: type[ast.cmpop] = other) -> ast.AST:
                        assert isinstance(n, ast.Compare)
                        n.ops[j] = other()
                        return n
                    yield f"{_name(op)}To{other.__name__}", i, _mutate(fn, i, swap)
        elif isinstance(node, ast.BinOp | ast.AugAssign):
            for other_op in BINARY.get(type(node.op), ()):
                def arith(n: ast.AST, other: type[ast.operator] = other_op) -> ast.AST:
                    assert isinstance(n, ast.BinOp | ast.AugAssign)
                    n.op = other()
                    return n
                yield f"{_name(node.op)}To{other_op.__name__}", i, _mutate(fn, i, arith)
        elif isinstance(node, ast.BoolOp):
            def flip(n: ast.AST) -> ast.AST:
                assert isinstance(n, ast.BoolOp)
                n.op = ast.Or() if isinstance(n.op, ast.And) else ast.And()
                return n
            yield f"{_name(node.op)}To{'Or' if isinstance(node.op, ast.And) else 'And'}", i, _mutate(fn, i, flip)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield "NotRemoved", i, _mutate(fn, i, lambda n: n.operand if isinstance(n, ast.UnaryOp) else n)


def _constant(value: float | bool) -> Callable[[ast.AST], ast.AST]:
    return lambda _node: ast.Constant(value=value)


def constants(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Change]:
    for i, node in enumerate(_indexed(fn)):
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            n = float(node.value) if isinstance(node.value, float) else int(node.value)  # type: ignore[arg-type]
            for value, name in ((n + 1, "PlusOne"), (n - 1, "MinusOne"), (0, "ToZero")):
                if value != n and not (name == "ToZero" and n in (1, -1)):
                    yield f"{n}{name}", i, _mutate(fn, i, _constant(type(n)(value)))


def booleans(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Change]:
    for i, node in enumerate(_indexed(fn)):
        if isinstance(node, ast.Constant) and isinstance(node.value, bool):
            yield f"{node.value}ToNot", i, _mutate(fn, i, _constant(not node.value))
        tests = []
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            tests.append("test")
        for field in tests:
            def negate(n: ast.AST, field: str = field) -> ast.AST:
                setattr(n, field, ast.UnaryOp(op=ast.Not(), operand=getattr(n, field)))
                return n
            yield "ConditionNegated", i, _mutate(fn, i, negate)
            if isinstance(node, ast.If | ast.While | ast.IfExp) and not isinstance(getattr(node, field), ast.Constant):
                for forced in (True, False):  # PIT's REMOVE_CONDITIONALS: each branch always, and never, taken
                    if forced and isinstance(node, ast.While):
                        continue  # `while True` with no way out is a hang, not a branch

                    def force(n: ast.AST, field: str = field, forced: bool = forced) -> ast.AST:
                        setattr(n, field, ast.Constant(value=forced))
                        return n

                    yield f"Condition{forced}", i, _mutate(fn, i, force)


def statements(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Change]:
    for i, node in enumerate(_indexed(fn)):
        if i == 0 or not isinstance(node, ast.stmt) or isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Pass):
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            continue  # a docstring
        yield f"{_name(node)}Deleted", i, _mutate(fn, i, lambda _n: None)


def returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[Change]:
    for i, node in enumerate(_indexed(fn)):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Constant) and node.value.value is None:
                continue
            yield "ReturnNone", i, _mutate(fn, i, lambda _n: ast.Return(value=ast.Constant(value=None)))


PYTHON_FAMILIES: dict[str, tuple[PyFamily, ...]] = {
    "py-operator": (operators,),
    "py-constant": (constants,),
    "py-boolean": (booleans,),
    "py-statement": (statements,),
    "py-return": (returns,),
}
