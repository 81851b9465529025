"""``glmops bench`` (a concurrency sweep with aiperf) and ``glmops bench compare A B``.

Exit codes: 0 the sweep ran (every point), 1 a point or the whole run failed, 2 bad input.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import click
from glmops.commands.ansible_opts import ANSIBLE_OPTS

from glmops import bench as b
from glmops import planning
from glmops.model import ValidationError
from glmops.output import console as make_console
from glmops.output import stamp
from glmops.smoke import endpoint_problem
from glmops.ssh import ssh_command

DEFAULT_OUT = ".glmops/bench"


def _fail(problems: list[str], code: int = 2) -> None:
    err = make_console(stderr=True)
    err.print(f"{len(problems)} problem(s); nothing run:" if code == 2 else "bench failed:")
    for p in problems:
        err.print(f"  {p}", markup=False)
    sys.exit(code)


@click.group("bench", invoke_without_command=True)
@ANSIBLE_OPTS
@click.option("-i", "--inventory", type=click.Path(exists=True), default=None,
              help="Ansible inventory (directory or file); the Plan gives endpoint, model, GPUs.")
@click.option("--topology", type=click.Choice(["agg", "disagg"]), default=None,
              help="Override the inventory's glmops_topology.")
@click.option("--quick", is_flag=True, help="A tiny sweep: concurrency 1,2, multi_round 2, ISL 64, OSL 16.")
@click.option("--concurrency", default=None, help="Comma list (1,2,4) or LO..HI powers of two [1..256].")
@click.option("--isl", type=int, default=None, help="Input tokens per request [1024].")
@click.option("--osl", type=int, default=None, help="Output tokens per request (ignore-eos) [1024].")
@click.option("--multi-round", type=int, default=None, help="Requests per point = concurrency x this [5].")
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed of the prompts.")
@click.option("--endpoint-type", type=click.Choice(["completions", "chat"]), default="completions",
              show_default=True)
@click.option("--client", type=click.Choice(["aiperf", "engine"]), default="aiperf", show_default=True,
              help="aiperf, or the engine's own client (TensorRT-LLM benchmark_serving).")
@click.option("--bench-host", default="router", show_default=True,
              help="Where the client runs: 'router' (the first router host), 'controller' (here), or a host.")
@click.option("--aiperf", "aiperf_path", default=None, help="aiperf executable (default: the glmops aiperf venv, PATH).")
@click.option("--tokenizer", default=None,
              help="Tokenizer dir or 'builtin' (default: the checkpoint's dir when present here, else builtin).")
@click.option("--endpoint", default=None, help="Endpoint URL (default: the Plan's).")
@click.option("--model", default=None, help="Served model name (default: the Plan's; needed without -i).")
@click.option("--gpus", type=int, default=None, help="GPUs behind the endpoint (default: from the Plan).")
@click.option("--out", type=click.Path(), default=DEFAULT_OUT, show_default=True,
              help="Parent of the dated run directory.")
@click.option("--point-timeout", type=float, default=3600, show_default=True, help="Seconds per point.")
@click.pass_context
def bench(ctx, inventory, topology, quick, concurrency, isl, osl, multi_round, seed, endpoint_type, client,
          bench_host, aiperf_path, tokenizer, endpoint, model, gpus, out, point_timeout):
    """Run the seeds' concurrency sweep against the endpoint; write one JSON per point, a
    Markdown table and a Pareto PNG under OUT/<UTC time>-<deployment>/."""
    if ctx.invoked_subcommand is not None:
        return
    console = make_console()
    problems: list[str] = []
    cfg = _sweep_config(quick, concurrency, isl, osl, multi_round, seed, endpoint_type, problems)
    plan, dep, target = _plan_target(inventory, topology, tokenizer, endpoint, model, problems)
    problems += _option_problems(endpoint, bench_host, dep, gpus, point_timeout)
    if problems:
        _fail(problems)
    target = _final_target(target, endpoint, model, tokenizer, gpus)

    host = _bench_host(bench_host, plan)
    binary, version, remote, fetch = _client(client, host, aiperf_path, inventory, tokenizer, target, dep)

    console.print(f"bench {target.endpoint} model {target.model}: concurrency {cfg.concurrency}, "
                  f"ISL {cfg.isl} / OSL {cfg.osl}, {cfg.multi_round} rounds, client aiperf {version} on {host}, "
                  f"{target.gpus} {target.gpu_basis}(s), tokenizer {target.tokenizer}")
    # glmops_api_key (else GLMOPS_API_KEY for an --endpoint without -i): aiperf gets it on stdin
    key = (dep.api_key if dep is not None else None) or os.environ.get("GLMOPS_API_KEY", "")
    runner = b.aiperf_point_runner(binary, target, cfg, point_timeout, remote=remote, fetch=fetch, api_key=key or "")
    try:
        run = b.sweep(target, cfg, Path(out), runner, _progress(console, cfg), client="aiperf", bench_host=host,
                      client_version=version)
    except b.BenchError as exc:
        _fail([str(exc)], code=1)
    click.echo((run / "results.md").read_text())
    console.print(f"results: {run}  (results.md, pareto.png, points/*.json)")
    meta = json.loads((run / "meta.json").read_text())
    sys.exit(1 if meta.get("errors") else 0)


def _sweep_config(quick, concurrency, isl, osl, multi_round, seed, endpoint_type, problems: list[str]) -> b.SweepConfig:
    """The sweep the options ask for (``--quick``'s or the seeds' default, then each option given);
    what is wrong with it is appended to ``problems``."""
    cfg = replace(b.QUICK) if quick else b.SweepConfig()
    try:
        if concurrency:
            cfg.concurrency = b.parse_concurrency(concurrency)
    except b.BenchError as exc:
        problems.append(str(exc))
    for name, value in (("isl", isl), ("osl", osl), ("multi_round", multi_round)):
        if value is not None:
            setattr(cfg, name, value)
    cfg.seed, cfg.endpoint_type = seed, endpoint_type
    problems += cfg.problems()
    return cfg


def _plan_target(inventory, topology, tokenizer, endpoint, model, problems: list[str]):
    """``(plan, deployment, target)`` from ``-i`` (the target only when nothing in ``problems`` so
    far), else ``(None, None, None)``; a planning problem, or neither ``-i`` nor both
    ``--endpoint`` and ``--model``, is appended to ``problems``."""
    plan = dep = None
    target = None
    if inventory:
        try:
            planned = planning.load(inventory, topology)
            dep, plan = planned.deployment, planned.plan
        except ValidationError as exc:
            problems += [str(p) for p in exc.problems]
        if plan is not None and not problems:
            target = b.target_from_plan(plan, dep, tokenizer)
    elif not (endpoint and model):
        problems.append("give -i/--inventory, or both --endpoint and --model")
    return plan, dep, target


def _option_problems(endpoint, bench_host, dep, gpus, point_timeout) -> list[str]:
    """What is wrong with ``--endpoint``, ``--bench-host`` (a host of ``dep``), ``--gpus`` and
    ``--point-timeout`` (seconds), one message each."""
    problems: list[str] = []
    bad_url = endpoint_problem("--endpoint", endpoint)
    if bad_url:
        problems.append(bad_url)
    if bench_host not in ("router", "controller") and (dep is None or bench_host not in dep.hosts):
        hosts = sorted(dep.hosts) if dep is not None else []
        problems.append(f"--bench-host {bench_host!r} is not accepted; accepted: router, controller"
                        + (f" or an inventory host ({', '.join(hosts)})" if hosts else " (or a host of -i/--inventory)"))
    if gpus is not None and gpus < 1:
        problems.append(f"--gpus {gpus} is not accepted; accepted: an integer >= 1")
    if point_timeout is not None and point_timeout <= 0:
        problems.append(f"--point-timeout {point_timeout} is not accepted; accepted: seconds > 0")
    return problems


def _final_target(target, endpoint, model, tokenizer, gpus) -> b.BenchTarget:
    """``target`` (or, without -i, one from the options) with ``--endpoint``, ``--model`` and
    ``--gpus`` winning over the Plan's."""
    if target is None:
        target = b.BenchTarget(endpoint=endpoint.rstrip("/"), model=model, tokenizer=tokenizer or "builtin",
                               gpus=gpus or 1, gpu_basis="GPU" if gpus else "endpoint")
    if endpoint:
        target.endpoint = endpoint.rstrip("/")
    if model:
        target.model = model
    if gpus:
        target.gpus, target.gpu_basis = gpus, "GPU"
    return target


def _client(client, host: str, aiperf_path, inventory, tokenizer, target: b.BenchTarget, dep):
    """The aiperf client on ``host`` (``controller`` or an inventory host, over ssh):
    ``(binary, version, remote, fetch)``, ``remote``/``fetch`` None here. On a remote host without
    ``--tokenizer``, ``target.tokenizer`` becomes the checkpoint's directory there if it holds a
    tokenizer.json, else ``builtin``. Exits 2 (``_fail``) for ``--client engine`` or aiperf missing."""
    remote = fetch = None
    try:
        if client == "engine":
            raise b.BenchError("--client engine: the engine's client runs on a GPU node image with TensorRT-LLM; "
                               "glmops builds its command line (glmops.bench.engine_client_argv) but cannot run it "
                               "here; use --client aiperf")
        if host == "controller":
            binary = b.aiperf_binary(aiperf_path)
            version = b.aiperf_version(binary)
        else:
            binary = aiperf_path or b.REMOTE_AIPERF
            remote, fetch = _remote(inventory, host)
            probe = subprocess.run(remote(["test", "-x", binary]), check=False, capture_output=True, text=True, timeout=60)
            if probe.returncode != 0:
                raise b.BenchError(f"aiperf is not installed on bench host {host} at {binary} "
                                   f"(ssh said: {probe.stderr.strip()[:200] or 'exit ' + str(probe.returncode)}); "
                                   f"install it there (python3 -m venv {binary.rsplit('/bin/', 1)[0]} && "
                                   f"{binary.rsplit('/bin/', 1)[0]}/bin/pip install aiperf=={b.AIPERF_VERSION}), "
                                   "or run from here with --bench-host controller")
            version = b.AIPERF_VERSION
            if tokenizer is None:  # the controller's tokenizer path means nothing there
                target.tokenizer = "builtin"
                local = dep.checkpoint.local_dir if dep is not None and dep.checkpoint else ""
                if local and subprocess.run(remote(["test", "-f", f"{local}/tokenizer.json"]), check=False,
                                            capture_output=True, timeout=60).returncode == 0:
                    target.tokenizer = local
    except b.BenchError as exc:
        _fail([str(exc)])
    return binary, version, remote, fetch


def _progress(console, cfg: b.SweepConfig):
    """The sweep's progress callback ``(i, n, concurrency, point or None)``: one line per point
    started (point None), failed or measured."""
    def progress(i, n, c, point):
        if point is None:
            console.print(f"{stamp()} [{i}/{n}] concurrency {c}: {cfg.num_prompts(c)} requests ...")
        elif "error" in point:
            console.print(f"{stamp()} [{i}/{n}] concurrency {c}: [red]failed[/]: {point['error']}")
        else:
            console.print(f"{stamp()} [{i}/{n}] concurrency {c}: {point['output_tok_s']:,.1f} output tok/s, "
                          f"TTFT P50 {point['ttft_ms_p50'] or 0:,.1f} ms, "
                          f"{point['completed']}/{point['num_prompts']} completed")

    return progress


def _bench_host(choice: str, plan) -> str:
    if choice == "controller" or plan is None:
        return "controller"
    if choice != "router":
        return choice
    fronts = [s.host for s in plan.services if s.role in ("router", "frontend", "orchestrator")]
    if fronts:
        return fronts[0]
    return "controller"


def _remote(inventory: str | None, host: str):
    def remote(argv: list[str]) -> list[str]:
        return ssh_command(inventory, host, argv)

    def fetch(path: str) -> str:
        r = subprocess.run(ssh_command(inventory, host, ["cat", path]), check=False, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"cannot read {path} on {host}: {r.stderr.strip()[:200]}")
        return r.stdout

    return remote, fetch


@bench.command("compare")
@click.argument("run_a", type=click.Path(exists=True, file_okay=False))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the deltas as JSON.")
def compare_cmd(run_a, run_b, as_json):
    """Print per-concurrency deltas between two result directories (B relative to A)."""
    try:
        meta_a, pa = b.load_run(Path(run_a))
        meta_b, pb = b.load_run(Path(run_b))
    except b.BenchError as exc:
        _fail([str(exc)])
    rows = b.compare(pa, pb)
    if as_json:
        click.echo(json.dumps({"a": run_a, "b": run_b, "rows": rows}, indent=2))
        return
    for label, meta, path in (("A", meta_a, run_a), ("B", meta_b, run_b)):
        click.echo(f"{label}: {path}: {meta.get('engine', '')} {meta.get('engine_version', '')} "
                   f"{meta.get('topology', '')}, client {meta.get('client', '')} {meta.get('client_version', '')}")
    click.echo(b.compare_markdown(rows, run_a, run_b))
