"""One module per verb: `add_parser(subparsers)` declares it, `run(args) -> int` does it."""
