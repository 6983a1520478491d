"""Exit codes, one meaning each, shared by every verb (documented in `specdoctor --help`)."""

from __future__ import annotations

OK = 0
"""check: no findings. deploy/fix: the server is healthy. replay: every decision matched."""
FINDINGS = 1
"""check: findings (with or without a fix). diagnose/eval: see the verb. replay: a decision diverged."""
USAGE = 2
"""Bad input: a malformed command, an unreadable file, an unknown option."""
STOPPED = 3
"""deploy/fix: stopped because no flag change can help (the report says why). diagnose: the decision is a stop."""
BUDGET = 4
"""deploy/fix: the launch or time budget ran out before the server was healthy."""
INTERNAL = 70
"""A bug in specdoctor itself (one line; SPECDOCTOR_DEBUG=1 shows the traceback). Please report it."""
INTERRUPTED = 130
"""Ctrl-C or SIGTERM, or a person quitting at a `fix` prompt (declined): the engine tree was stopped and the
transcript closed."""

EPILOG = """exit codes:
  0    check: clean · deploy/fix: healthy · diagnose: a fix · replay: all decisions match
  1    check: findings · replay: a decision diverged · eval: a case not solved
  2    usage error (bad command, unreadable file, bad option)
  3    deploy/fix: stopped, no flag change can help · diagnose: a stop
  4    deploy/fix: budget exhausted (launches or time)
  70   internal error in specdoctor (SPECDOCTOR_DEBUG=1 shows the traceback)
  130  interrupted, or declined at a fix prompt (the engine was stopped, the transcript closed)
"""
