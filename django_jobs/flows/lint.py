"""`manage.py flows check`: a static lint of the replay rule (code outside steps is deterministic).

It reads source (ast, nothing is imported or run) and, in the `run` method of every Flow
subclass, flags the calls whose result differs between two replays, made outside a step:

- ``clock``: ``timezone.now()``, ``datetime.now()``/``utcnow()``/``today()``, ``date.today()``,
  ``time.time()`` and the other clocks of ``time`` (use ``ctx.now()``, memoised);
- ``random``: any call of ``random`` or ``secrets`` (generate the value in a step);
- ``uuid``: ``uuid.uuid1()`` and ``uuid.uuid4()`` (in a step, or derive it from ``ctx.call_id``);
- ``orm``: ``X.objects.<...>(...)``, ``.save()``, ``.delete()``, ``.refresh_from_db()``;
- ``http``: calls of ``requests``, ``httpx`` and ``urllib.request``.

Inside a step means inside a lambda or a function passed to ``ctx.step`` or ``ctx.parallel``
(by name or as an item of a list or tuple): its body runs once, its value is memoised. The
step's other arguments are evaluated by the replay itself, so ``ctx.step("a", f,
time.time())`` is flagged. Names imported under another name (``from random import choice``,
``import requests as r``) are followed. What `run` calls through its own helpers (``self.x()``)
is not followed: keep the flow's story in `run`, its effects in step functions.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: The ctx methods whose function arguments run as steps.
STEP_METHODS = frozenset({"step", "parallel"})
CLOCKS = frozenset(
    {
        "django.utils.timezone.now",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
        # `datetime` used without an import this module shows (the class, most likely)
        "datetime.now",
        "datetime.utcnow",
        "datetime.today",
        "time.time",
        "time.time_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
    }
)
ORM_METHODS = frozenset({"save", "delete", "refresh_from_db"})
HTTP_MODULES = ("requests", "httpx", "urllib.request")
#: What to do instead, by rule.
ADVICE = {
    "clock": "use ctx.now() (memoised) or read the time in a step",
    "random": "draw the value in a step",
    "uuid": "make it in a step, or derive it from ctx.call_id",
    "orm": "read and write the database in a step",
    "http": "make the request in a step",
}
#: Where a bare name comes from when the module imports nothing for it (the usual spellings).
DEFAULT_NAMES = {
    "timezone": "django.utils.timezone",
    "datetime": "datetime",
    "date": "datetime.date",
    "time": "time",
    "random": "random",
    "secrets": "secrets",
    "uuid": "uuid",
    "requests": "requests",
    "httpx": "httpx",
    "urllib": "urllib",
}


@dataclass(frozen=True, order=True)
class Finding:
    """One call that breaks the replay rule: where, which rule, and what it is."""

    path: str
    line: int
    col: int
    rule: str
    flow: str
    call: str

    def __str__(self) -> str:
        return (
            f"{self.path}:{self.line}:{self.col}: [{self.rule}] {self.call} in {self.flow}.run "
            f"outside a step: {ADVICE[self.rule]}"
        )


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` as "a.b.c" (None for anything but names and attributes)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _imports(tree: ast.Module) -> dict[str, str]:
    """The module's local names of what it imports, as full dotted names."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    names[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def rule_of(call: ast.Call, imports: dict[str, str]) -> tuple[str, str] | None:
    """(rule, the call as written) if this call breaks the replay rule outside a step."""
    written = _dotted(call.func)
    if written is None:
        return None
    head, _, rest = written.partition(".")
    base = imports.get(head) or DEFAULT_NAMES.get(head, head)
    full = f"{base}.{rest}" if rest else base
    shown = f"{written}()"
    if full in CLOCKS:
        return "clock", shown
    if full.split(".")[0] in ("random", "secrets"):
        return "random", shown
    if full in ("uuid.uuid1", "uuid.uuid4"):
        return "uuid", shown
    if any(full == m or full.startswith(f"{m}.") for m in HTTP_MODULES):
        return "http", shown
    parts = written.split(".")
    if "objects" in parts[1:-1] or (len(parts) > 1 and parts[-1] in ORM_METHODS):
        return "orm", shown
    return None


def _is_flow_base(node: ast.expr, flows: set[str]) -> bool:
    if isinstance(node, ast.Subscript):  # Flow[Input]
        node = node.value
    name = _dotted(node)
    return name is not None and (name.split(".")[-1] == "Flow" or name in flows)


def _is_step_call(node: ast.AST, ctx: str) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in STEP_METHODS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == ctx
    )


def _in_steps(run: ast.FunctionDef, ctx: str) -> set[int]:
    """The ids of the nodes whose code runs inside a step: lambdas and nested functions passed
    to ctx.step or ctx.parallel, directly, in a list or tuple, or through a local name."""
    lambdas: list[ast.Lambda] = []
    names: set[str] = set()

    def mark(arg: ast.expr) -> None:
        if isinstance(arg, ast.Lambda):
            lambdas.append(arg)
        elif isinstance(arg, ast.Name):
            names.add(arg.id)
        elif isinstance(arg, ast.List | ast.Tuple | ast.Set):
            for element in arg.elts:
                mark(element)
        elif isinstance(arg, ast.ListComp | ast.GeneratorExp | ast.SetComp):
            mark(arg.elt)
        elif isinstance(arg, ast.Starred):
            mark(arg.value)

    for node in ast.walk(run):
        if _is_step_call(node, ctx):
            assert isinstance(node, ast.Call)
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                mark(arg)
    for node in ast.walk(run):  # a local name bound to a lambda, or to a list of them
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in names for t in node.targets
        ):
            mark(node.value)
    inside: set[int] = set()
    bodies: list[ast.AST] = [*lambdas]
    bodies += [
        node
        for node in ast.walk(run)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node is not run
        and node.name in names
    ]
    for body in bodies:
        inside.update(id(n) for n in ast.walk(body))
    return inside


def check_source(source: str, path: str = "<string>") -> list[Finding]:
    """The findings of one module's source (a SyntaxError is raised as is)."""
    tree = ast.parse(source, filename=path)
    imports = _imports(tree)
    flows: set[str] = set()
    findings: list[Finding] = []
    for cls in ast.walk(tree):
        if not (isinstance(cls, ast.ClassDef) and any(_is_flow_base(b, flows) for b in cls.bases)):
            continue
        flows.add(cls.name)
        for run in cls.body:
            if not (isinstance(run, ast.FunctionDef) and run.name == "run"):
                continue
            args = run.args.posonlyargs + run.args.args
            ctx = args[1].arg if len(args) > 1 else "ctx"
            inside = _in_steps(run, ctx)
            for node in ast.walk(run):
                if not isinstance(node, ast.Call) or id(node) in inside:
                    continue
                found = rule_of(node, imports)
                if found is not None:
                    rule, shown = found
                    findings.append(
                        Finding(path, node.lineno, node.col_offset + 1, rule, cls.name, shown)
                    )
    return sorted(findings)


def check_paths(paths: Iterable[Path]) -> Iterator[Finding]:
    """The findings of each .py file given, or under each directory given."""
    for given in paths:
        files = sorted(given.rglob("*.py")) if given.is_dir() else [given]
        for file in files:
            yield from check_source(file.read_text(encoding="utf-8"), str(file))
