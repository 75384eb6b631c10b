"""``python -m compactor``: the same command line as the ``compactor`` script."""

from compactor.cli.main import main

raise SystemExit(main())
