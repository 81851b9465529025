"""Filters of roles/checkpoint (logic in glmops.checkpoint).

``glmops_relay_tree(hosts, fanout)`` -> ``{host: {parent, children, depth}}``: the fanout relay
tree over ``hosts`` (the source first), each host feeding up to ``fanout`` children
(glmops.checkpoint.relay_tree; a ``fanout`` that is not a whole number >= 0 fails naming
``checkpoint_relay_fanout``, its value and what is accepted).
"""
from __future__ import annotations


def _relay_tree(hosts, fanout=2):
    from glmops.checkpoint import relay_tree

    return relay_tree([str(h) for h in hosts], fanout)


class FilterModule:
    """glmops checkpoint filters (see the module docstring)."""

    def filters(self):
        return {"glmops_relay_tree": _relay_tree}
