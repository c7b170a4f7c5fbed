"""`python -m baco` is the `baco` command."""

from baco.cli import entry

entry()
