"""``python -m glmops.collection --out DIR``: see :mod:`glmops.collection`."""
from glmops.collection import main

raise SystemExit(main())
