"""``python -m npusim``: the same command line as the ``npusim`` script (``npusim.cli``)."""

from .cli import main

raise SystemExit(main())
