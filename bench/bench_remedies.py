"""How many of the remedy phrases in SGLang's own messages become validated edits.

    python bench/bench_remedies.py [--misses]

Reads every distinct message of the bundled engine-source index that has a remedy phrase ("please use
--X", "requires --Z", "is only supported with/on", "must be <= N", ...) against the flag catalog of the
newest release that has it. Prints how many give a validated edit, how many name a catalog flag but no
value to set (a direction such as "increase --mem-fraction-static", or a value the message does not
state), and why the rest give nothing; with --misses, each of those messages.
"""

from __future__ import annotations

import argparse

from specdoctor.tools.engine_source.coverage import remedy_coverage
from specdoctor.tools.engine_source.index import bundled_index


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--misses", action="store_true", help="list every message that gives nothing")
    args = parser.parse_args()
    c = remedy_coverage(bundled_index())
    print(f"messages with a remedy phrase: {c.messages}")
    print(f"  with a validated edit:         {c.with_edit} ({c.with_edit / c.messages:.0%})")
    print(f"  naming a flag, no value:       {c.flag_only} ({c.flag_only / c.messages:.0%})")
    print(f"  nothing:                       {len(c.misses)} ({len(c.misses) / c.messages:.0%})")
    for reason, count in c.reasons.items():
        print(f"    {count:4d}  {reason}")
    if args.misses:
        for miss in c.misses:
            print(f"- [{miss.release}] {' '.join(miss.message.split())[:200]}\n    {miss.reason}")


if __name__ == "__main__":
    main()
