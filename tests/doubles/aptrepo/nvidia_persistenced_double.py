#!/usr/bin/python3
"""Strict ``nvidia-persistenced`` double: stays running in the foreground until SIGTERM.

Installed by the stand-in package ``nvidia-persistenced`` (tests/doubles/aptrepo). Options of the
real daemon (nvidia-persistenced(1)) it accepts: ``--user U``, ``--group G``,
``--persistence-mode``, ``--no-persistence-mode``, ``--nvidia-cfg-path P``, ``--verbose``,
``-V/--version``, ``-h/--help``. Anything else exits 1 naming the option. It refuses to start
(exit 1) when the driver is not loaded (no ``/etc/nvidia-smi-double.json``), as the real one
does when it cannot open the NVIDIA device.
"""
from __future__ import annotations

import os
import signal
import sys
import time

# GLMOPS_DOUBLE_SHARE overrides the directory (the doubles' own tests)
VERSION_FILE = os.path.join(os.environ.get("GLMOPS_DOUBLE_SHARE", "/usr/share/glmops-double"), "persistenced.version")
WITH_VALUE = {"--user", "-u", "--group", "-g", "--nvidia-cfg-path"}
FLAGS = {"--persistence-mode", "--no-persistence-mode", "--verbose"}


def main(argv: list[str]) -> int:
    args = list(argv)
    while args:
        a = args.pop(0)
        name = a.split("=", 1)[0]
        if a in ("-V", "--version"):
            with open(VERSION_FILE, encoding="utf-8") as fh:
                print(f"nvidia-persistenced:  version {fh.read().strip()}")
            return 0
        if a in ("-h", "--help"):
            print("nvidia-persistenced [options]")
            return 0
        if name in WITH_VALUE:
            if "=" not in a and not args:
                print(f"nvidia-persistenced: option '{a}' requires an argument", file=sys.stderr)
                return 1
            if "=" not in a:
                args.pop(0)
        elif a not in FLAGS:
            print(f"nvidia-persistenced: Unrecognized option: '{a}'", file=sys.stderr)
            return 1
    if not os.path.exists(os.environ.get("NVIDIA_SMI_DOUBLE_CONFIG", "/etc/nvidia-smi-double.json")):
        print("nvidia-persistenced failed to initialize. Check syslog for more details.", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda s, f: sys.exit(0))
    print("nvidia-persistenced double: running", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
