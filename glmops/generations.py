"""Generations and the day-2 steps of ``glmops upgrade`` / ``glmops rollback`` (pure, no I/O).

A *generation* is what one successful deploy or upgrade placed on a host: every unit,
env and config file (byte for byte), the engine runtimes, the checkpoint revision and
the Plan hash. ``roles/generation`` records it on each host under
``<state_dir>/_records/<deployment>/generations/<N>/`` (``manifest.json`` + ``files/``) and keeps
the newest ``generation_keep`` (default 5). This module turns what the hosts report
(``glmops_generation.py list``) and a new Plan view (``glmops.deployview``) into:

* :func:`changed_units`: which units' files differ between the current generation and the
  new Plan (or between two generations);
* :func:`steps`: the rolling order, one agg replica (or one disagg replica of a pool) at a
  time, the front door last, each with the router it may be taken out of;
* :func:`parse_sets`: ``--set key=value`` into ``load_deployment`` overrides;
* :func:`unit_changes`: the generations that changed some units' files (``history --service``).

Router removal (measured against vllm-router 0.1.17, this repo's wheelhouse): in regular
(agg) mode ``POST /remove_worker?url=`` and ``POST /add_worker?url=`` both work at run
time; in PD mode (``--vllm-pd-disaggregation``) removal works but adding back fails
("PD router requires specific add_prefill_server or add_decode_server methods"), so in
disagg workers are restarted in place one replica at a time (the router's health checks
and retries carry the requests to the replicas that remain) and never taken out.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

import yaml

#: router engines whose worker list can be changed at run time (agg only, see module doc)
REMOVABLE_ROUTERS = {"vllm_router"}


@dataclass
class Step:
    """One rolling step: ``units`` restarted together (one replica, or the front door).

    ``services``: host -> [{unit, url, health_url, ready_url}] of the step;
    ``router``: {host, url} of the front door whose worker list holds ``worker_urls``;
    ``router_out``: take ``worker_urls`` out of that router before the restart.
    """

    name: str
    kind: str  # workers | routers
    units: list[str]
    services: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    worker_urls: list[str] = field(default_factory=list)
    router: dict[str, str] | None = None
    router_out: bool = False

    def extravar(self, **more: Any) -> dict[str, Any]:
        """One step as playbooks/upgrade.yml and rollback.yml loop over it (``glmops_step``; no secrets)."""
        return {"name": self.name, "kind": self.kind, "units": self.units, "services": self.services,
                "worker_urls": self.worker_urls, "router": self.router or {"host": "", "url": ""},
                "router_out": self.router_out, **more}


_EXAMPLES = {"glmops_engine_version": "0.33.0", "glmops_engine_args": "'{max-num-seqs: 2}'", "glmops_image": "IMAGE"}


def parse_sets(items: list[str] | tuple[str, ...]) -> tuple[dict[str, Any], list[str]]:
    """``["engine_version=0.33.0", "engine_args={max-num-seqs: 2}"]`` -> (overrides, problems).

    Values are YAML (so dicts and lists work); a variable whose type is ``str`` in
    ``glmops.variables`` keeps the text as typed (``0.40`` stays ``"0.40"``). Names may
    omit the ``glmops_`` prefix. Problems name the item and what is accepted.
    """
    from glmops.variables import VARIABLES

    out: dict[str, Any] = {}
    problems = []
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        name = key if key.startswith("glmops_") else f"glmops_{key}"
        if not sep or not key:
            problems.append(f"--set {item!r}: accepted: KEY=VALUE (e.g. engine_version=0.33.0)")
            continue
        if name not in VARIABLES:
            accepted = sorted(n.removeprefix("glmops_") for n in VARIABLES)
            close = difflib.get_close_matches(name.removeprefix("glmops_"), accepted, n=1)
            problems.append(f"--set {item!r}: unknown variable {name}; accepted: " + ", ".join(accepted)
                            + (f" (did you mean {close[0]!r}?)" if close else ""))
            continue
        if not text.strip():
            # an empty value would fall back to the inventory's or the catalog's value silently
            # (engine_version= rolls the catalog default out): refuse it
            problems.append(f"--set {item!r}: empty value for {name}; accepted: a value "
                            f"(e.g. {key}={_EXAMPLES.get(name, '...')}); to drop an override, leave out --set {key}")
            continue
        if VARIABLES[name].type == "str":
            out[name] = text
            continue
        try:
            out[name] = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError as exc:
            problems.append(f"--set {item!r}: the value is not YAML ({exc.__class__.__name__})")
    return out, problems


def plan_files(plan: dict[str, Any], host: str) -> dict[str, dict[str, str]]:
    """unit -> {path: sha256} of the files the Plan places for each unit on ``host``."""
    hp = plan["hosts"].get(host) or {}
    units = {s["name"]: s["unit"] for kind in ("workers", "routers") for s in hp.get(kind, {}).get("services", [])}
    out: dict[str, dict[str, str]] = {u: {} for u in units.values()}
    for kind in ("workers", "routers"):
        bundle = hp.get(kind, {})
        for f in bundle.get("files", []) + bundle.get("secret_files", []):
            unit = units.get(f.get("service", ""))
            if unit:
                out[unit][f["path"]] = f["sha256"]
    return out


def manifest_files(manifest: dict[str, Any]) -> dict[str, dict[str, str]]:
    """unit -> {path: sha256} of a generation manifest (files of no unit, e.g. the target, left out)."""
    out: dict[str, dict[str, str]] = {u["unit"]: {} for u in manifest.get("units", [])}
    for f in manifest.get("files", []):
        if f.get("unit"):
            out.setdefault(f["unit"], {})[f["path"]] = f["sha256"]
    return out


def changed_units(old: dict[str, dict[str, str]], new: dict[str, dict[str, str]]) -> list[str]:
    """Units of ``new`` whose files differ from ``old`` (added units count as changed)."""
    return [u for u, files in new.items() if old.get(u) != files]


def unit_changes(history: dict[str, dict[str, Any]], units: list[str] | tuple[str, ...]
                 ) -> dict[str, dict[str, Any]]:
    """``glmops history --service``: ``history`` (host -> ``{"generations": [manifest],
    "current": N}``) with, on each host, only the generations in which a file of one of
    ``units`` (its unit, env or config file: the manifest's ``files`` with that ``unit``) was
    added, changed or removed against the host's previous recorded generation (by number);
    the oldest generation a host keeps counts when it holds any of them (nothing older is
    left to compare with). ``current`` is kept as it is; each kept manifest gets
    ``changed_units``: which of ``units`` changed in it."""
    out = {}
    for host, got in history.items():
        kept, before = [], None
        for g in sorted(got.get("generations", []), key=lambda m: int(m.get("number") or 0)):
            files = manifest_files(g)
            now = {u: files[u] for u in units if u in files}
            changed = [u for u in units if (now.get(u) != (before or {}).get(u))]
            before = now
            if changed:
                kept.append({**g, "changed_units": changed})
        out[host] = {**got, "generations": kept}
    return out


def current_manifests(history: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """host -> manifest of its current generation (hosts without one are left out)."""
    out = {}
    for host, got in history.items():
        for g in got.get("generations", []):
            if g.get("number") == got.get("current"):
                out[host] = g
    return out


def manifest_of(history: dict[str, dict[str, Any]], host: str, number: int) -> dict[str, Any] | None:
    for g in history.get(host, {}).get("generations", []):
        if g.get("number") == number:
            return g
    return None


def resolve_target(history: dict[str, dict[str, Any]], to: int | None) -> tuple[int | None, list[str]]:
    """The generation ``glmops rollback [--to N]`` puts back, and the problems.

    Default: the newest generation older than the current one, which must be the same on
    every host. ``to`` must be recorded on every host that has generations.
    """
    problems = []
    hosts = {h: g for h, g in history.items() if g.get("generations")}
    if not hosts:
        return None, ["no generation is recorded on any host: run `glmops deploy` first"]
    currents = {h: g.get("current") for h, g in hosts.items()}
    if len(set(currents.values())) > 1:
        problems.append("hosts run different generations: "
                        + ", ".join(f"{h}={c}" for h, c in sorted(currents.items()))
                        + "; pass --to N to choose one")
    if to is None:
        if problems:
            return None, problems
        cur = next(iter(currents.values()))
        older = sorted({g["number"] for g in next(iter(hosts.values()))["generations"]
                        if cur is None or g["number"] < cur})
        if not older:
            return None, [f"no generation older than the current one ({cur}); recorded: "
                          + ", ".join(str(g["number"]) for g in next(iter(hosts.values()))["generations"])]
        to = older[-1]
        problems = []
    missing = [h for h, g in hosts.items() if to not in {x["number"] for x in g["generations"]}]
    if missing:
        have = sorted(set.intersection(*({x["number"] for x in g["generations"]} for g in hosts.values())))
        return None, [(f"generation {to} is not recorded on {', '.join(sorted(missing))}; "
                       f"recorded on every host: {', '.join(map(str, have)) or 'none'}")]
    return to, []


def _service(s: dict[str, Any]) -> dict[str, Any]:
    out = {k: s.get(k, "") for k in ("unit", "url", "health_url", "ready_url")}
    if s.get("auth"):  # VAR@ENV_FILE: the gate reads the API key there (glmops_api_key)
        out["auth"] = s["auth"]
    return out


def steps(services: list[dict[str, Any]], changed: set[str], topology: str) -> list[Step]:
    """The rolling order for the ``changed`` units.

    ``services``: service views (``glmops.deployview``) or manifest units with ``host``
    added: ``{unit, host, pool, replica, engine, url, health_url, ready_url}``. One step per
    (pool, replica) of the workers in Plan order, then one step for the front door(s).
    A worker step takes its workers out of a vllm-router only in agg and only while at
    least one other worker of the router stays in (see the module doc).
    """
    routers = [s for s in services if s["pool"] == "router"]
    router = None
    for r in routers:
        if r.get("engine") in REMOVABLE_ROUTERS:
            router = {"host": r["host"], "url": r["url"]}
            break
    workers = [s for s in services if s["pool"] != "router"]
    out: list[Step] = []
    groups: dict[tuple[str, int], list[dict]] = {}
    for s in workers:
        if s["unit"] in changed:
            groups.setdefault((s["pool"], int(s.get("replica") or 0)), []).append(s)
    for (pool, replica), members in groups.items():
        urls = sorted({m["url"] for m in members})
        others = [w for w in workers if w["url"] not in urls]
        step = Step(name=f"{pool} replica {replica}", kind="workers", units=[m["unit"] for m in members],
                    worker_urls=urls, router=router,
                    router_out=bool(router) and topology == "agg" and bool(others))
        for m in members:
            step.services.setdefault(m["host"], []).append(_service(m))
        out.append(step)
    rchanged = [r for r in routers if r["unit"] in changed]
    step = Step(name="router", kind="routers", units=[r["unit"] for r in rchanged])
    for r in rchanged:
        step.services.setdefault(r["host"], []).append(_service(r))
    out.append(step)
    return out


def upgrade_plan(history: dict[str, dict[str, Any]], plan: dict[str, Any], inventory: str = "INVENTORY",
                 drain_timeout_s: int = 120) -> dict[str, Any]:
    """What ``glmops upgrade`` does, from the generations the hosts report (``history``: host ->
    ``glmops_generation.py list``) and the new Plan view: the generation every host of the
    Plan serves (``number``), the ``changed`` units, the hosts whose engine runtimes change
    (``runtimes_changed``) and the rolling ``steps`` (:meth:`Step.extravar`, each with what
    putting the serving generation back needs: ``to``, ``model``, ``readiness_timeout_s``,
    ``endpoint_ready_url``, ``drain_timeout_s``); ``act``: anything to do. ``refuse``: why it
    cannot start (a Plan host has no current generation, or the hosts run different ones;
    ``glmops upgrade`` exits 2), else ``""``. ``inventory`` names the inventory in those lines."""
    current = current_manifests(history)
    plan_hosts = list(plan["hosts"])
    out: dict[str, Any] = {"refuse": "", "number": None, "changed": [], "runtimes_changed": [], "steps": [],
                           "act": False}
    missing = [h for h in plan_hosts if h not in current]
    if missing:
        out["refuse"] = (f"no current generation on {', '.join(missing)}: a failed step could not be put back. "
                         f"Run `glmops deploy -i {inventory}` first (it records one), then upgrade.")
        return out
    numbers = {m["number"] for m in current.values()}
    if len(numbers) > 1:
        out["refuse"] = ("hosts run different generations: " + ", ".join(f"{h}={m['number']}" for h, m in current.items())
                         + f"; bring them together with `glmops rollback -i {inventory} --to N` or `glmops deploy` first")
        return out
    number = numbers.pop()
    changed: list[str] = []
    for host in plan_hosts:
        changed += changed_units(manifest_files(current[host]), plan_files(plan, host))
        if current[host].get("runtimes") != plan["hosts"][host]["runtimes"]:
            out["runtimes_changed"].append(host)
    common = {"to": number, "model": plan["served_model_name"], "readiness_timeout_s": int(plan["readiness_timeout_s"]),
              "endpoint_ready_url": plan["endpoint_ready_url"], "drain_timeout_s": int(drain_timeout_s)}
    out.update(number=number, changed=changed, act=bool(changed or out["runtimes_changed"]),
               steps=[s.extravar(**common) for s in steps(plan["services"], set(changed), plan["topology"])])
    return out


def rollback_plan(history: dict[str, dict[str, Any]], to: int | None = None,
                  drain_timeout_s: int = 120) -> dict[str, Any]:
    """What ``glmops rollback [--to N]`` does, from the generations the hosts report: the
    generation put back (``number``, :func:`resolve_target`), the ``changed`` units, the rolling
    ``steps`` (:meth:`Step.extravar` with ``to``, ``model``, ``readiness_timeout_s``,
    ``endpoint_ready_url``, ``drain_timeout_s``; a step without units changes nothing and is
    only listed) and ``finish`` (every other file of the generation back, then it is current).
    ``refuse``: the problems (``glmops rollback`` exits 2), else ``[]``."""
    out: dict[str, Any] = {"refuse": [], "number": None, "changed": [], "steps": [], "finish": {}}
    number, problems = resolve_target(history, to)
    if problems:
        out["refuse"] = problems
        return out
    current = current_manifests(history)
    changed: list[str] = []
    for host in history:
        target = manifest_of(history, host, number)
        if target is None:
            continue
        old = manifest_files(current[host]) if host in current else {}
        changed += changed_units(old, manifest_files(target))
    services = manifest_services(history, number)
    if not services:
        out["refuse"] = [f"generation {number} lists no unit"]
        return out
    first = next(manifest_of(history, h, number) for h in history if manifest_of(history, h, number))
    common = {"to": number, "model": first.get("served_model_name", ""),
              "readiness_timeout_s": int(first.get("readiness_timeout_s") or 1800),
              "endpoint_ready_url": first.get("endpoint_ready_url", ""), "drain_timeout_s": int(drain_timeout_s)}
    out.update(number=number, changed=changed,
               steps=[s.extravar(**common) for s in steps(services, set(changed), first.get("topology", "agg"))],
               finish=Step(name="finish", kind="finish", units=[]).extravar(**common))
    return out


def manifest_services(history: dict[str, dict[str, Any]], number: int) -> list[dict[str, Any]]:
    """Every unit of generation ``number`` on every host, with ``host`` added, in start order."""
    out = []
    for host in history:
        m = manifest_of(history, host, number)
        for u in (m or {}).get("units", []):
            out.append({**u, "host": host})
    return sorted(out, key=lambda s: (int(s.get("start_order") or 0), s["host"], s["unit"]))


# ------------------------------------------------------------------ what is deployed (issue 12)
TOPOLOGIES = ("agg", "disagg")


def deployed_topology(history: dict[str, dict[str, Any]], default: str,
                      unread: list[str] | tuple[str, ...] = ()) -> tuple[str, str]:
    """The topology the day-2 verbs (status, smoke, logs, restart, stop, destroy) act on when
    no ``--topology`` is given, and the one line that says why (empty: nothing to say).

    ``history``: host -> ``{"generations": [manifest], "current": N | None}`` as
    ``glmops_generation.py list`` reports it on each host the inventory names; ``default``:
    the inventory's ``glmops_topology`` (what the Plan uses without ``--topology``);
    ``unread``: hosts whose records could not be read (unreachable).

    The topology of the current generation recorded on the hosts wins when every host
    that has a current generation agrees (hosts without one, e.g. pruned or never
    deployed, do not count). Hosts that disagree, or nothing recorded: ``default``, and the
    line says so and names it. Returns ``(topology, line)``.
    """
    current = current_manifests(history)
    seen = {h: m for h, m in current.items() if m.get("topology") in TOPOLOGIES}
    tops = sorted({m["topology"] for m in seen.values()})
    unread_txt = f"; could not read the records on {', '.join(unread)}" if unread else ""
    if not seen:
        where = ", ".join(h for h in history if h not in unread) or "no host"
        return default, (f"no deployment recorded on {where}{unread_txt}: "
                         f"using the inventory's default topology {default}")
    if len(tops) > 1:
        which = ", ".join(f"{h}: {m['topology']} (generation {m.get('number')})" for h, m in seen.items())
        return default, (f"the hosts disagree on the deployed topology ({which}){unread_txt}: "
                         f"using the inventory's default topology {default}")
    top = tops[0]
    numbers = sorted({int(m.get("number") or 0) for m in seen.values()})
    gen = f"generation {'/'.join(map(str, numbers))} on {', '.join(seen)}"
    if top != default:
        return top, (f"deployed topology {top} ({gen}) differs from the inventory's default {default}: "
                     f"using {top} (--topology {default} to act on the default){unread_txt}")
    return top, (f"deployed topology {top} ({gen}){unread_txt}" if unread else "")


def plan_hosts(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """What a generation records of the whole deployment (manifest ``hosts``): every host of
    the Plan ``[{name, address, units}]`` in Plan order, so a later deploy whose Plan no
    longer uses a host can find it (:func:`prune_candidates`) even when the inventory no
    longer lists it."""
    out: dict[str, dict[str, Any]] = {}
    for s in plan.get("services", []):
        h = out.setdefault(s["host"], {"name": s["host"], "address": s.get("address", ""), "units": []})
        h["units"].append(s["unit"])
    return list(out.values())


def prune_candidates(plan: dict[str, Any], recorded: dict[str, Any], inventory_hosts: list[str],
                     group_hosts: list[str]) -> dict[str, Any]:
    """Which hosts a deploy must look at for units of a Plan it no longer has.

    ``plan``: the new Plan view; ``recorded``: Plan host -> the ``hosts`` list of its current
    generation (:func:`plan_hosts`), ``None`` when its current generation has no such list
    (recorded by an older glmops); Plan hosts without a current generation are left out.
    ``inventory_hosts``: every host the inventory names; ``group_hosts``: the hosts of
    ``glmops_workers`` and ``glmops_routers``.

    The hosts the last recorded generations used, less the Plan's; when a Plan host's
    record lists no hosts, also the workers/routers groups' hosts outside the Plan.
    Returns ``{"read": [host the inventory names: read it], "gone": [{name, address,
    units}: recorded, but the inventory no longer names it, so it cannot be reached]}``.
    """
    in_plan = set(plan.get("hosts") or {})
    known: dict[str, dict[str, Any]] = {}
    legacy = False
    for host in plan.get("hosts") or {}:
        if host not in recorded:
            continue
        hosts = recorded[host]
        if hosts is None:
            legacy = True
            continue
        for h in hosts:
            if isinstance(h, dict) and h.get("name") and h["name"] not in in_plan:
                known.setdefault(h["name"], {"name": h["name"], "address": h.get("address", ""),
                                             "units": list(h.get("units") or [])})
    if legacy:
        for h in group_hosts:
            if h not in in_plan:
                known.setdefault(h, {"name": h, "address": "", "units": []})
    inventory = set(inventory_hosts)
    return {"read": [h for h in known if h in inventory], "gone": [v for h, v in known.items() if h not in inventory]}


def departed(candidates: dict[str, Any], reads: dict[str, Any], prune: bool, deployment: str) -> dict[str, Any]:
    """What a deploy does about the hosts that left its Plan, and the lines that say it.

    ``candidates``: :func:`prune_candidates`; ``reads``: host -> the ``glmops_hostctl.py state
    --glob --target --current`` answer on that host (``stale``: the deployment's units there,
    ``current``: its current generation) or ``None`` when the host could not be read
    (unreachable); ``prune``: False for ``glmops deploy --no-prune``.

    A read host holds the deployment when it has any of its units or a current generation;
    one that has neither is left alone. Returns ``{"prune": [{host, units}] (reachable, to
    stop and remove), "unreachable": [{host, units}], "gone": [{name, address, units}],
    "refuse": message (``--no-prune`` and any host holds or may hold the deployment, else
    ""), "lines": [one line per host]}``.
    """
    to_prune, unreachable, lines = [], [], []
    for host in candidates.get("read", []):
        got = reads.get(host)
        if got is None:
            unreachable.append({"host": host, "units": []})
            lines.append(f"{host} left the Plan but could not be read (unreachable): "
                         f"units of {deployment} there may still run")
            continue
        units = list(got.get("stale") or [])
        if units or got.get("current"):
            to_prune.append({"host": host, "units": units})
            what = f"still has {', '.join(units)}" if units else "has no unit left but its records say it runs it"
            lines.append(f"{host} left the Plan and {what}"
                         + (": stopping and removing them after the new Plan serves" if prune else ""))
    gone = list(candidates.get("gone", []))
    for g in gone:
        where = f"{g['name']} ({g['address']})" if g.get("address") else g["name"]
        lines.append(f"{where} left the Plan and the inventory: it cannot be reached, so "
                     f"{', '.join(g.get('units') or []) or 'its units'} may still run and hold GPUs there; "
                     f"stop them on the host or put it back in the inventory")
    refuse = ""
    if not prune and (to_prune or unreachable or gone):
        named = ([f"{p['host']} ({', '.join(p['units']) or 'records only'})" for p in to_prune]
                 + [f"{u['host']} (unreachable)" for u in unreachable]
                 + [f"{g['name']} (not in the inventory: {', '.join(g.get('units') or []) or 'units unknown'})"
                    for g in gone])
        refuse = (f"--no-prune: {len(named)} host(s) left the Plan but may still run units of {deployment}: "
                  + "; ".join(named) + ". Nothing was changed. Deploy without --no-prune to stop and remove them, "
                  "or keep them in the Plan.")
    return {"prune": to_prune, "unreachable": unreachable, "gone": gone, "refuse": refuse, "lines": lines}
