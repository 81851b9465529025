"""``ssh`` argv reaching an inventory host with its connection variables (``glmops logs -f``,
the smoke journal fallback, ``glmops bench`` on a remote host)."""
from __future__ import annotations

import shlex

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager


def ssh_command(inventory: str, host: str, remote: list[str]) -> list[str]:
    """``ssh`` argv reaching ``host`` with the inventory's connection variables."""
    loader = DataLoader()
    inv = InventoryManager(loader=loader, sources=[inventory])
    hv = VariableManager(loader=loader, inventory=inv).get_vars(host=inv.get_host(host))
    argv = ["ssh", "-o", "BatchMode=yes"]
    if hv.get("ansible_ssh_private_key_file"):
        argv += ["-i", str(hv["ansible_ssh_private_key_file"])]
    if hv.get("ansible_port"):
        argv += ["-p", str(hv["ansible_port"])]
    argv += shlex.split(str(hv.get("ansible_ssh_common_args") or ""))
    user = hv.get("ansible_user")
    target = str(hv.get("ansible_host") or host)
    # "--": the destination is never read as an option (an address such as "-oProxyCommand=...")
    argv += ["--", f"{user}@{target}" if user else target]
    return argv + [shlex.join(remote)]
