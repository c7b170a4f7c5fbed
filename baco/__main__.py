"""`python -m baco` is the `baco` command."""

import sys

from baco.cli import main

sys.exit(main())
