"""``python -m generators.cli``: the `gen` command."""

from . import main

main()
