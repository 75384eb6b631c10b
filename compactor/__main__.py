"""``python -m compactor``: the same command line as the ``compactor`` script."""

from compactor.cli.launch import main

raise SystemExit(main())
