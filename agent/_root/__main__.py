"""`python -m specdoctor ...` is the `specdoctor` command."""

import sys

from specdoctor.agent.cli import main

sys.exit(main())
