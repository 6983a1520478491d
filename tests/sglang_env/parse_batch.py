"""Run real SGLang's own argument parsing (and optionally its whole validation) on many commands at once.

Executed by the SGLang venv's python: reads a JSON list of {"argv": [...], "resolve": bool, "check": bool}
(`check`: also run `check_server_args`, as a launch does right after resolving) on stdin and
prints one JSON list of results. SGLang is imported once; each command runs in a forked child so one
command's side effects cannot leak into the next.

  rc 0: accepted (parsed, and resolved when asked)
  rc 2: argparse rejected it (`error` is argparse's last stderr line)
  rc 1: ServerArgs resolution/validation raised (`error` is "ExceptionType: message")
"""

import io
import json
import os
import sys
import traceback


def _one(argv, resolve, check):
    from sglang.srt.server_args import prepare_server_args

    err = io.StringIO()
    sys.stderr = err
    try:
        args = prepare_server_args(argv)
        if resolve or check:
            args.resolve_once()
        if check:
            args.check_server_args()
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        return {"rc": exc.code if isinstance(exc.code, int) else 1, "error": lines[-1] if lines else ""}
    except BaseException as exc:
        tb = traceback.format_exception_only(type(exc), exc)
        return {"rc": 1, "error": tb[-1].strip()}
    finally:
        sys.stderr = sys.__stderr__
    return {"rc": 0, "error": ""}


def main():
    import sglang.srt.server_args  # noqa: F401 - import once, before forking

    jobs = json.load(sys.stdin)
    results = []
    for job in jobs:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            result = _one(job["argv"], job.get("resolve", False), job.get("check", False))
            os.write(write, json.dumps(result).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            data = pipe.read()
        os.waitpid(pid, 0)
        results.append(json.loads(data) if data else {"rc": -1, "error": "child died"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
