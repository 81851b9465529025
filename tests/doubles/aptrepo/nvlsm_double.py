#!/usr/bin/python3
"""Strict ``nvlsm`` double (NVLink Subnet Manager, started by Fabric Manager on Blackwell
NVSwitch systems). Installed by the stand-in package ``nvlsm`` as ``/usr/sbin/nvlsm``.

Only ``--version``/``-V`` (prints the package's version from
``/usr/share/glmops-double/nvlsm.version``) and ``-h``/``--help`` are implemented; anything else
exits 1 naming the argument (the lab has no NVSwitch to manage).
"""
from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    if argv in (["--version"], ["-V"]):
        share = os.environ.get("GLMOPS_DOUBLE_SHARE", "/usr/share/glmops-double")
        with open(os.path.join(share, "nvlsm.version"), encoding="utf-8") as fh:
            print(f"nvlsm {fh.read().strip()}")
        return 0
    if argv in (["-h"], ["--help"]):
        print("Usage: nvlsm [--version]")
        return 0
    print(f"nvlsm double: unsupported argument {argv[0] if argv else '(none)'!r}: no NVSwitch in the lab",
          file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
