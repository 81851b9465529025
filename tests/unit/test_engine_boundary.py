"""The engine boundary (issue 18, item 1): engine knowledge lives in glmops/engines/ only.

``test_no_engine_name_outside_the_registry``: no engine key or front-door kind (as the
registry lists them: ``trtllm``, ``vllm``, ``sglang``, ``dynamo``, ``vllm-router``, ...) appears in
``glmops/rules.py``, ``plan.py``, ``smoke.py``, ``bench.py`` or ``glmops/commands/*.py``. Criterion,
on the parsed code (comments and docstrings are prose and not checked):

* a string constant (also a part of an f-string) holding an engine key or front-door kind as
  a whole word (``"vllm-router"``, ``"vllm:request_success_total"``, ``"... engine dynamo ..."``;
  not ``glmops_dynamo_backend`` nor ``VLLM_NIXL_SIDE_CHANNEL_PORT``, where the name is part of a
  longer identifier);
* an identifier (name, attribute, import, function, argument, keyword) one of whose
  ``_``/``.``-separated parts is an engine key (``trtllm``, ``engines.dynamo``, ``DYNAMO_BACKENDS``,
  ``_check_trtllm``).

The only way to an engine from those files is ``glmops.engines.registry``, keyed by the
deployment's value. Display names in messages (``TensorRT-LLM``, ``vLLM``) are not engine keys.

``test_a_toy_engine_plans_and_renders``: adding an engine is one module plus catalog entries:
a toy engine registered here (not shipped) is planned, checked and rendered by the unchanged
code.
"""
from __future__ import annotations

import ast
import re
import sys
import types
from pathlib import Path

import pytest

from glmops import catalog, plan, render, rules
from glmops.engines import base, registry
from glmops.engines.registry import EngineSpec, FrontDoor
from glmops.model import Deployment, PoolSpec, Service, ValidationError
import plan_helpers as H

ROOT = Path(__file__).resolve().parents[2]
CHECKED = [ROOT / "glmops" / f for f in ("rules.py", "plan.py", "smoke.py", "bench.py")] + \
    sorted((ROOT / "glmops" / "commands").glob("*.py"))


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _identifiers(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.alias):
        return [node.name, node.asname or ""]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg or ""]
    return []


def engine_names_in(path: Path) -> list[str]:
    """``line: what`` for every engine key / front-door kind in ``path`` (see the module doc)."""
    keys = set(registry.names())
    words = keys | {d.kind for d in registry.front_doors()}
    word_re = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, sorted(words, key=len, reverse=True)))
                         + r")(?![A-Za-z0-9_])")
    tree = ast.parse(path.read_text(), str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            m = word_re.search(node.value)
            if m:
                found.append(f"{node.lineno}: string {node.value[:60]!r} names {m.group(1)!r}")
        for ident in _identifiers(node):
            parts = {p.lower() for p in re.split(r"[_.]", ident) if p}
            if parts & keys:
                found.append(f"{getattr(node, 'lineno', '?')}: identifier {ident!r}")
    return found


@pytest.mark.parametrize("path", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_engine_name_outside_the_registry(path):
    assert engine_names_in(path) == []


def test_the_criterion_catches_what_it_should(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text('"""vllm in a docstring is prose."""\n'
                   'from glmops.engines import dynamo\n'
                   'KIND = "vllm-router"\n'
                   'METRIC = "sglang:num_requests_total"\n'
                   'def f(dep):\n'
                   '    """trtllm here too."""\n'
                   '    return dep.engine == "trtllm" or f"use {dep} with dynamo"\n'
                   'OK = ("glmops_dynamo_backend", "VLLM_NIXL_SIDE_CHANNEL_PORT", "TensorRT-LLM")\n')
    lines = sorted({int(f.split(":")[0]) for f in engine_names_in(bad)})
    assert lines == [2, 3, 4, 7]


# ------------------------------------------------------------------------------ a toy engine

TOY = "toyllm"


def _toy_worker(ctx: base.Ctx, pool: PoolSpec, replica: int, pl: base.Placement) -> list[Service]:
    dep = ctx.dep
    node = pl.head
    port = ctx.alloc(node.host.name).take(base.PORT_BASES["http"], 1, want=pl.http_want)[0]
    argv = base.command(dep, TOY, "toy-serve", runtime="venv") + [dep.checkpoint.local_dir, "--port", str(port)]
    return [Service(name=pl.name, host=node.host.name, role=pool.role, engine=TOY, address=node.host.address,
                    port=port, ports={"http": [port]}, argv=argv, env=base.base_env(dep, pool, None, TOY),
                    gpus=list(node.gpus), health_url=base.url(node.host.address, port, "/health"),
                    start_order=base.ORDER_WORKER, replica=replica, runtime="venv")]


def _toy_router(ctx: base.Ctx, workers: list[Service]) -> list[Service]:
    host = base.router_host(ctx, workers)
    port = ctx.front_port
    argv = base.command(ctx.dep, TOY, "toy-router", runtime="venv") + ["--port", str(port)]
    argv += [base.url(w.address, w.port) for w in workers]
    return [Service(name=base.service_name(ctx.dep, "router"), host=host.name, role="router", engine=TOY,
                    address=host.address, port=port, ports={"http": [port]}, argv=argv,
                    env=base.front_env(ctx.dep), health_url=base.url(host.address, port, "/health"),
                    start_order=base.ORDER_FRONT, depends_on=[w.name for w in workers], runtime="venv")]


@pytest.fixture
def toy_engine(monkeypatch):
    """A toy engine: its module (worker + router), its spec, and its catalog entry."""
    module = types.ModuleType("glmops_test_toyllm")
    module.worker = _toy_worker
    module.router = _toy_router
    monkeypatch.setitem(sys.modules, module.__name__, module)
    door = FrontDoor("toy-router", _toy_router, order=90)
    spec = registry.register(EngineSpec(name=TOY, module=module, order=90, front_doors=(door,),
                                        agg_front="toy-router", disagg_front="toy-router",
                                        role_labels={"agg": "agg (toy)"}))
    engines = catalog.load().data["engines"]["engines"]
    monkeypatch.setitem(engines, TOY, {"name": "Toy LLM", "kind": "engine", "version": "0.1",
                                       "min_version": "0.1", "binary": "toy-serve", "vendors": ["nvidia", "none"]})
    yield spec
    registry.unregister(TOY)


def _toy_dep(replicas: int) -> Deployment:
    return H.dep(engine=TOY, hardware="b200", n_hosts=2, pools=[PoolSpec(role="agg", tp=8, replicas=replicas)])


def test_a_toy_engine_plans_and_renders(toy_engine):
    assert TOY in registry.names()
    dep = _toy_dep(replicas=2)
    assert rules.check(dep) == []
    assert registry.router_kind(dep) == ("toy-router", "round_robin")
    the_plan = plan.build(dep)
    assert [s.engine for s in the_plan.services] == [TOY, TOY, TOY]
    assert {s.role for s in the_plan.services} == {"agg", "router"}
    router = next(s for s in the_plan.services if s.role == "router")
    assert router.argv[-2:] == ["http://10.0.0.11:8001", "http://10.0.0.12:8001"]
    assert [r["role"] for r in plan.summary_rows(the_plan) if r["role"] != "router"] == ["agg (toy)", "agg (toy)"]
    for svc in the_plan.services:
        unit = render.unit_text(dep, svc)
        assert svc.argv[0] in unit and svc.name in unit
        assert svc.argv[0].endswith("/bin/toy-serve" if svc.role == "agg" else "/bin/toy-router")
        assert render.env_text(dep, svc) is not None
    assert [p for p in rules.check_plan(the_plan, dep)] == []


def test_a_toy_engine_with_one_replica_has_no_front_door_and_an_unknown_one_is_refused(toy_engine):
    the_plan = plan.build(_toy_dep(replicas=1))
    assert [s.role for s in the_plan.services] == ["agg"]
    registry.unregister(TOY)
    with pytest.raises(ValidationError) as exc:
        plan.build(_toy_dep(replicas=1))
    assert f"engine {TOY!r} unknown" in str(exc.value.problems[0])


def _glmops_imports(path: Path) -> set[str]:
    """Dotted glmops modules ``path`` imports (``from glmops.engines import base`` -> ``glmops.engines.base``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("glmops")}
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("glmops"):
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def test_engine_modules_import_neither_plan_rules_nor_each_other():
    """The engine modules (those with a ``SPEC``) share code through base, problems, registry and
    the non-engine modules (``vllm_args``, ``sglang_args``, ``vllm_router``), never through each other."""
    engines_dir = ROOT / "glmops" / "engines"
    keys = set(registry.names())
    banned = {"glmops.plan", "glmops.rules", "glmops.smoke", "glmops.bench", "glmops.commands"}
    for key in keys:
        imports = _glmops_imports(engines_dir / f"{key}.py")
        others = {f"glmops.engines.{k}" for k in keys - {key}}
        assert imports & others == set(), key
        assert {i for i in imports if any(i == b or i.startswith(b + ".") for b in banned)} == set(), key
    for path in engines_dir.glob("*.py"):  # the shared modules use no engine module either
        if path.stem not in keys:
            assert _glmops_imports(path) & {f"glmops.engines.{k}" for k in keys} == set(), path.name
