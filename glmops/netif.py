"""F17: the interface NCCL and Gloo use between hosts (pure, no I/O).

When a Plan spans more than one host, every worker's env file names the interface that holds
its host's inventory address in ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME``:

* a host's ``glmops_socket_ifname`` is rendered into the Plan itself (:func:`apply`; rule
  ``F17_SOCKET_IFNAME`` refuses the catalog's ``prechecks.yaml`` ``interface.refused`` patterns);
* otherwise the interface is found on the host: the Plan view marks the env file
  (:func:`host_found`: ``ifname_env`` = the names to add, ``ifname_address`` = the address) and
  ``glmops_hostctl.py state --ifname-env`` finds the interface holding the address there,
  counts the env file in state when it is the Plan's text plus :func:`suffix` of that interface,
  and returns it (``ifnames``) for the engine_service role to write the same text.

A value the pool's ``env`` or ``glmops_env`` sets wins (it is already in ``Service.env``).
"""
from __future__ import annotations

import fnmatch

from glmops import catalog as cat
from glmops.model import ROUTER_ORDER

#: the variables that name the interface (NCCL environment variables, PyTorch distributed)
NAMES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
#: rule code of a refused ``glmops_socket_ifname``
CODE = "F17_SOCKET_IFNAME"


def refused_patterns(catalog=None) -> list[str]:
    """The catalog's refused interface patterns (``prechecks.yaml`` ``interface.refused``)."""
    catalog = catalog or cat.load()
    return [str(p) for p in (catalog.prechecks.get("interface") or {}).get("refused") or []]


def refused(name: str, patterns: list[str]) -> str | None:
    """The first pattern of ``patterns`` that ``name`` matches, else None."""
    return next((p for p in patterns if fnmatch.fnmatch(name, p)), None)


def spans_hosts(services) -> bool:
    """True when the services run on more than one host (traffic between hosts)."""
    return len({s.host for s in services}) > 1


def is_worker(svc) -> bool:
    """Engine workers (not the discovery store, not a front door: start order below 50)."""

    return svc.role != "store" and svc.start_order < ROUTER_ORDER


def apply(dep, services) -> None:
    """Set :data:`NAMES` to the host's ``glmops_socket_ifname`` in each worker's env when the
    services span hosts; a name the env already has (pool ``env``, ``glmops_env``) wins."""
    if not spans_hosts(services):
        return
    for svc in services:
        host = dep.hosts.get(svc.host)
        if host is None or not host.socket_ifname or not is_worker(svc):
            continue
        for name in NAMES:
            svc.env.setdefault(name, host.socket_ifname)


def host_found(plan, svc) -> list[str]:
    """The names of :data:`NAMES` the host must fill for ``svc`` (a worker of a Plan spanning
    hosts whose env lacks them): empty when nothing is found on the host."""
    if not spans_hosts(plan.services) or not is_worker(svc):
        return []
    return [n for n in NAMES if n not in (svc.env or {})]


def suffix(names: list[str], ifname: str) -> str:
    """The env file lines the host adds (after the Plan's text): ``NAME=<ifname>`` each."""
    return "".join(f"{n}={ifname}\n" for n in names)
