"""``python -m acker``: the ``acker`` command, for an environment whose scripts directory is not on the PATH."""

from acker.cli import main

raise SystemExit(main())
