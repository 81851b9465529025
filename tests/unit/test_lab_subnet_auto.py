"""``glmops lab up --subnet auto`` never takes the README lab's subnet (inventories/lab addresses
10.77.0.13 etc.), even when it is free, so the README's first command still works afterwards."""
from __future__ import annotations

import ipaddress

from glmops.lab import core, netsetup


def _machine(monkeypatch, addresses=(), labs=()):
    """A machine with the given interface addresses (``10.77.2.1/24`` ...) and labs' subnets."""
    monkeypatch.setattr(netsetup, "ipv4_in_use", lambda: [("br", ipaddress.IPv4Interface(a)) for a in addresses])
    monkeypatch.setattr(netsetup, "ipv4_routes", lambda: [])
    monkeypatch.setattr(core, "_taken_subnets", lambda: list(labs))
    monkeypatch.setattr(netsetup, "link_exists", lambda name: False)
    monkeypatch.setattr(netsetup, "nft_table_exists", lambda table: False)
    monkeypatch.setattr(core, "_existing_lab_problem", lambda name: [])
    monkeypatch.setattr(core, "tool_problems", lambda need_debootstrap: [])


def test_auto_skips_the_readme_labs_subnet_when_it_is_free(monkeypatch):
    _machine(monkeypatch)
    subnet, problems = core.preflight("second", 3, "cpu", "auto", [], euid=0)
    assert problems == []
    assert subnet == "10.77.1.0/24"


def test_auto_skips_taken_subnets_and_addresses(monkeypatch):
    _machine(monkeypatch, addresses=["10.77.2.1/24"], labs=["10.77.1.0/24"])
    subnet, problems = core.preflight("third", 2, "cpu", "auto", [], euid=0)
    assert (subnet, problems) == ("10.77.3.0/24", [])


def test_an_explicit_default_subnet_is_still_accepted(monkeypatch):
    _machine(monkeypatch)
    monkeypatch.setattr(netsetup, "subnet_conflicts", lambda subnet: [])
    subnet, problems = core.preflight("glmops", 3, "cpu", core.DEFAULT_SUBNET, [], euid=0)
    assert (subnet, problems) == ("10.77.0.0/24", [])
