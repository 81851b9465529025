#!/usr/bin/env python3
"""Deploy cost from 3 to 32 hosts (issue 19 item 1): for each lab size, the first deploy, the
no-op redeploy and ``ansible all -m setup`` on the same hosts, their ratio, the slowest tasks
and the tasks whose time grows with the host count.

What runs, per size N (``--sizes 3,8,16,32``): a ``b200-sim`` lab of N hosts (``glmops lab up
--profile b200-sim --subnet auto``; idle hosts take ~10 MiB each) with the strict trtllm-serve
double on every host (``bench/deploy_time.py``'s ``boot_b200sim``), and a copy of
inventories/lab-b200sim (inventories/b200's TensorRT-LLM agg Plan) scaled to N: every host in
glmops_workers, the agg pool one TP4 replica per host (``gpus: [0, 1, 2, 3]``, ``replicas: N``,
``hosts``: all of them) and the vllm-router on lab-1 (``glmops_routers``). The copy is checked
with ``glmops validate`` before any deploy. Then ``glmops deploy --skip-smoke`` once (the first
deploy: prechecks, the router venv from the wheelhouse, units placed, engines started and
gated), and ``--repeat`` interleaved rounds of one no-op redeploy (changed=0 checked) and one
``ansible all -m setup``; the medians give the ratio (target <= 1.2 at 32 hosts).

The engines' own start is the time of the readiness gates ("Wait for readiness", from the
ansible-runner job events of the first deploy); the first deploy less that is the deployment's
own cost, printed with its per-host marginal cost between consecutive sizes (target: it grows
less than linearly, i.e. the marginal cost per host falls or stays flat while the fixed part
dominates). Its CPU is split into the controller's (this process's children: the CLI, Ansible's
forks, SSH clients) and the lab hosts' (their cgroup's ``usage_usec``): here both share 2 cores,
on a cluster each host's share runs on that host in parallel. After all sizes, the tasks whose time grows most per added host are listed for the
first deploy and for the no-op.

The lab of each size is taken down after its measurement unless ``--keep-labs``. On this machine
the labs share 2 CPU cores with other work: compare medians. Needs root and systemd-nspawn::

    python bench/deploy_scale.py [--sizes 3,8,16,32] [--repeat 3] [--top 10] [--keep-labs]
"""
from __future__ import annotations

import argparse
import re
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import deploy_time as T  # noqa: E402  (boot_b200sim, b200sim_inventory, timed, task_profile)

D = T.D
REPO = T.REPO
GATE_TASK = "Wait for readiness"


def scaled_topologies(hosts: list[str]) -> dict:
    """inventories/lab-b200sim's topologies with the agg pool as one TP4 replica on GPUs 0-3 of
    every host in ``hosts``."""
    topologies = T.b200sim_topologies()
    pool = topologies["agg"]["pools"]["agg"]
    pool.update({"gpus": [0, 1, 2, 3], "replicas": len(hosts), "hosts": list(hosts)})
    return topologies


def hosts_cpu_s(lab: str) -> float:
    """CPU seconds the lab's hosts used so far (``usage_usec`` of the lab's cgroup v2 tree,
    :func:`glmops.lab.hosts.cgroup_dirs`; 0.0 where no hierarchy has ``cpu.stat``)."""
    from glmops.lab import hosts as H

    for path in H.cgroup_dirs(lab):
        stat = path / "cpu.stat"
        if stat.is_file():
            fields = dict(line.split() for line in stat.read_text().splitlines() if line.strip())
            return int(fields.get("usage_usec", 0)) / 1e6
    return 0.0


def children_cpu_s() -> float:
    """User + system CPU seconds of this process's finished children (the controller's side of
    a deploy: the CLI, Ansible's forks, the SSH clients; the lab hosts are not our children)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run_artifacts(proc: subprocess.CompletedProcess) -> Path | None:
    """The run's artifacts dir the CLI prints (``run artifacts: DIR``), or None."""
    found = re.search(r"run artifacts: (\S+)", proc.stdout)
    return Path(found.group(1)) if found else None


def per_task(artifacts: Path | None) -> dict[tuple[str, str], float]:
    """{(role, task): seconds summed over the run} from the run's job events ({} without)."""
    out: dict[tuple[str, str], float] = {}
    if artifacts and artifacts.is_dir():
        for sec, role, task in T.task_profile(artifacts)[1]:
            out[(role, task)] = out.get((role, task), 0.0) + sec
    return out


def measure(size: int, repeat: int, keep: bool) -> dict:
    """Boot a lab of ``size`` hosts, deploy, time ``repeat`` no-op/setup rounds; returns the figures."""
    name = f"benchscale{size}"
    existed = (D.LAB_ROOT / name / "inventory.yml").exists()
    boot_s, lab = T.timed_call(lambda: T.boot_b200sim(name, size, "auto"))
    hosts = list(lab["all"]["children"]["lab"]["hosts"])
    inv = T.b200sim_inventory(lab, Path(f"/tmp/{name}-inventory"), hosts, hosts[:1], scaled_topologies(hosts))
    env = {"GLMOPS_RUNS_DIR": f"/tmp/{name}-runs", "COLUMNS": "200"}
    glmops = [sys.executable, "-m", "glmops.cli"]
    res: dict = {"size": size, "boot": boot_s}
    try:
        _, proc = T.timed(glmops + ["validate", "-i", str(inv), "--topology", "agg"], env)
        if proc.returncode != 0:
            raise SystemExit(f"{size} hosts: glmops validate refused the inventory copy:\n{proc.stdout}{proc.stderr}")
        deploy = glmops + ["deploy", "-i", str(inv), "--topology", "agg", "--skip-smoke"]
        ctl0, hosts0 = children_cpu_s(), hosts_cpu_s(name)
        res["first"], proc = T.timed(deploy, env)
        res["first_cpu"] = (children_cpu_s() - ctl0, hosts_cpu_s(name) - hosts0)
        if proc.returncode != 0:
            raise SystemExit(f"{size} hosts: first deploy failed:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
        res["first_tasks"] = per_task(run_artifacts(proc))
        res["first_artifacts"] = run_artifacts(proc)
        res["noop"], res["setup"] = [], []
        setup_cmd = [str(Path(sys.executable).parent / "ansible"), "-i", str(inv), "all", "-m", "ansible.builtin.setup"]
        for _ in range(repeat):
            t, proc = T.timed(deploy, env)
            if proc.returncode != 0 or "changed: 0 " not in proc.stdout:
                raise SystemExit(f"{size} hosts: the redeploy was not a no-op:\n{proc.stdout[-3000:]}{proc.stderr[-2000:]}")
            res["noop"].append(t)
            res["noop_artifacts"] = run_artifacts(proc)
            t, proc = T.timed(setup_cmd, {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
            if proc.returncode != 0:
                raise SystemExit(f"{size} hosts: ansible all -m setup failed:\n{proc.stdout[-2000:]}")
            res["setup"].append(t)
        res["noop_tasks"] = per_task(res["noop_artifacts"])
    finally:
        if not existed and not keep:
            D.glmops("destroy", "-i", str(inv), "--yes")
            D.lab_down(name)
    return res


def report_size(r: dict, top: int) -> None:
    n, s = statistics.median(r["noop"]), statistics.median(r["setup"])
    gates = sum(sec for (_, task), sec in r["first_tasks"].items() if task == GATE_TASK)
    r["own"] = r["first"] - gates
    print(f"== {r['size']} hosts (lab booted in {r['boot']:.0f} s), {len(r['noop'])} interleaved rounds")
    print(f"first deploy            {r['first']:8.2f} s   engines' own start (readiness gates) {gates:.2f} s, "
          f"beyond it {r['own']:.2f} s")
    ctl, hosts = r["first_cpu"]
    print(f"  its CPU: controller {ctl:.1f} s ({ctl / r['size']:.2f} s/host), lab hosts {hosts:.1f} s "
          f"({hosts / r['size']:.2f} s/host; on a cluster each host's own share runs on that host)")
    print(f"no-op redeploy (median) {n:8.2f} s   runs: {', '.join(f'{x:.2f}' for x in r['noop'])}")
    print(f"ansible all -m setup    {s:8.2f} s   runs: {', '.join(f'{x:.2f}' for x in r['setup'])}")
    print(f"ratio no-op / setup     {n / s:8.2f}     (target <= 1.2 at 32 hosts)")
    for label, key in (("first deploy", "first_tasks"), ("last no-op", "noop_tasks")):
        rows = sorted(((sec, role, task) for (role, task), sec in r[key].items()), reverse=True)[:top]
        print(f"  slowest tasks of the {label}:")
        for sec, role, task in rows:
            print(f"    {sec:6.2f} s  {role or '-':<15} {task[:90]}")


def report_growth(results: list[dict], top: int) -> None:
    if len(results) < 2:
        return
    print("== growth with the host count")
    for a, b in zip(results, results[1:]):
        per_host = (b["own"] - a["own"]) / (b["size"] - a["size"])
        print(f"first deploy beyond the engines' start: {a['size']} -> {b['size']} hosts: "
              f"{a['own']:.2f} -> {b['own']:.2f} s, marginal {per_host:.3f} s/host "
              f"(average at {b['size']}: {b['own'] / b['size']:.3f} s/host)")
    for a, b in zip(results, results[1:]):
        span_ab = b["size"] - a["size"]
        print(f"first deploy's controller CPU: {a['size']} -> {b['size']} hosts: {a['first_cpu'][0]:.1f} -> "
              f"{b['first_cpu'][0]:.1f} s, marginal {(b['first_cpu'][0] - a['first_cpu'][0]) / span_ab:.3f} s/host; "
              f"lab hosts' CPU marginal {(b['first_cpu'][1] - a['first_cpu'][1]) / span_ab:.3f} s/host")
    first, last = results[0], results[-1]
    span = last["size"] - first["size"]
    for label, key in (("first deploy", "first_tasks"), ("no-op", "noop_tasks")):
        keys = set(first[key]) | set(last[key])
        growth = sorted(((last[key].get(k, 0.0) - first[key].get(k, 0.0)) / span, k) for k in keys)[::-1][:top]
        print(f"  tasks of the {label} that grow most per added host ({first['size']} -> {last['size']}):")
        for g, (role, task) in growth:
            cols = "  ".join(f"{r[key].get((role, task), 0.0):6.2f}" for r in results)
            print(f"    {g * 1000:+7.1f} ms/host  [{cols}] s  {role or '-':<15} {task[:80]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="3,8,16,32", help="comma-separated host counts")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved no-op/setup rounds per size")
    ap.add_argument("--top", type=int, default=10, help="slowest / fastest-growing tasks to list")
    ap.add_argument("--keep-labs", action="store_true", help="leave each lab up (default: down after it)")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    if any(s < 1 for s in sizes):
        ap.error(f"--sizes: every size must be >= 1, got {args.sizes!r}")
    results = []
    for size in sizes:
        print(f"-- {size} hosts: booting and deploying", flush=True)
        results.append(measure(size, args.repeat, args.keep_labs))
        report_size(results[-1], args.top)
        sys.stdout.flush()
    report_growth(results, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
