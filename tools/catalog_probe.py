"""Run the engine's own `--help`, and also record what argparse knows that the text does not show.

Executed by the ENGINE's interpreter as a plain script (specdoctor is not installed there), so it uses
only the standard library:

    <interpreter> catalog_probe.py <module> <json_out>

stdout is exactly what `<interpreter> -m <module> --help` prints. Before the help is printed, the parser's
actions (types, nargs, choices, defaults, groups) are written to <json_out>.
"""

import argparse
import json
import runpy
import sys


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return repr(value)


def _type_name(kind):
    if kind is None:
        return None
    return getattr(kind, "__name__", type(kind).__name__)


def _describe(parser):
    group_of = {}
    for group in parser._action_groups:
        for action in group._group_actions:
            group_of[id(action)] = group.title
    actions = []
    for a in parser._actions:
        actions.append(
            {
                "option_strings": list(a.option_strings),
                "dest": a.dest,
                "nargs": a.nargs if a.nargs is None or isinstance(a.nargs, (int, str)) else repr(a.nargs),
                "const": _plain(a.const),
                "default": _plain(a.default),
                "type": _type_name(a.type),
                "choices": None if a.choices is None else [str(c) for c in a.choices],
                "required": bool(a.required),
                "help": a.help if isinstance(a.help, str) else None,
                "metavar": _plain(a.metavar),
                "action": type(a).__name__,
                "group": group_of.get(id(a)),
            }
        )
    return {"prog": parser.prog, "actions": actions}


def main():
    module, out_path = sys.argv[1], sys.argv[2]
    original = argparse.ArgumentParser.print_help

    def print_help(self, file=None):
        with open(out_path, "w") as out:
            json.dump(_describe(self), out)
        return original(self, file)

    argparse.ArgumentParser.print_help = print_help
    sys.argv = [module, "--help"]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
