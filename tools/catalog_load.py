"""Get the FlagCatalog of the SGLang a command would really run.

Order: an explicit `--catalog FILE` or `--sglang-version X`; else the SGLang installed for the command's
interpreter (its real `--help`, cached on disk per interpreter + SGLang version); else the bundled
snapshot of SGLang 0.5.23, saying so. Finding the installed version costs a few `stat` calls once the
interpreter's `sys.path` is cached, so a warm check starts no subprocess at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from specdoctor.tools.catalog import FlagCatalog
from specdoctor.tools.dirs import cache_dir
from specdoctor.tools.files import MiB, UnreadableFile, head_bytes, read_text
from specdoctor.tools.help_parser import FlagInfo, parse_help

if TYPE_CHECKING:
    from specdoctor.tools.command import LaunchCommand

DEFAULT_VERSION = "0.5.23"
PROBE_TIMEOUT_S = 180.0
ENTRY_MODULE = "sglang.launch_server"
_CACHE_FORMAT = 2
CATALOG_MAX_BYTES = 16 * MiB
"""A --help text is ~100 KB and an exported catalog ~1 MB; a bigger --catalog file is not one."""
_SHEBANG_MAX_BYTES = 1024


class CatalogError(RuntimeError):
    """The catalog asked for cannot be had; the message says what to do."""


class CatalogChoice(BaseModel):
    """The catalog used, and a line telling the user where it came from."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True, defer_build=True)
    catalog: FlagCatalog
    note: str
    interpreter: str | None = None
    cached: bool = False


# ---- bundled snapshots -----------------------------------------------------------------------------


def _data() -> Path:
    return Path(__file__).resolve().parent / "data"


def bundled_versions() -> list[str]:
    names = (p.name for p in (_data() / "sglang-help").glob("sglang-*.txt") if "serve" not in p.name)
    return sorted((n[len("sglang-") : -len(".txt")] for n in names), key=_version_key)


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) if x.isdigit() else 0 for x in v.replace("post", ".").split("."))


@cache
def _actions_0523() -> dict[str, dict]:
    raw = json.loads((_data() / "sglang-0.5.23-actions.json").read_text())
    return {s: a for a in raw["actions"] for s in a["option_strings"]}


def bundled(version: str = DEFAULT_VERSION) -> FlagCatalog:
    """The catalog of a release whose `--help` ships with specdoctor."""
    path = _data() / "sglang-help" / f"sglang-{version}.txt"
    if not path.exists():
        raise CatalogError(
            f"no bundled flag list for SGLang {version}; bundled: {', '.join(bundled_versions())}"
        )
    # Types are not in the help text; a flag's type rarely changes, so 0.5.23's probe fills them in.
    return from_help_text(
        path.read_text(), version=version, source=f"bundled SGLang {version}", actions=_actions_0523()
    )


def from_help_text(
    text: str, *, version: str, source: str, actions: dict[str, dict] | None = None
) -> FlagCatalog:
    doc = parse_help(text)
    actions = actions or {}
    flags = [_with_action(f, actions.get(f.name)) for f in doc.flags]
    shown = {s for f in flags for s in f.spellings}
    hidden = [
        _hidden_flag(a)
        for name, a in actions.items()
        if a.get("hidden") and name == a["option_strings"][0] and name not in shown
    ]
    return FlagCatalog(flags, version=version, prog=doc.prog, source=source, hidden=hidden)


def _with_action(f: FlagInfo, action: dict | None) -> FlagInfo:
    if not action:
        return f
    kind = action.get("type")
    value_type = {"loads": "json", "json_list_type": "json"}.get(kind or "", kind)
    default = action.get("default")
    return f.model_copy(
        update={"value_type": value_type, "default": None if default is None else str(default)}
    )


def _hidden_flag(action: dict) -> FlagInfo:
    first, *rest = action["option_strings"]
    nargs = action.get("nargs")
    return FlagInfo(
        name=first, aliases=tuple(rest), nargs=0 if nargs == 0 else nargs, value_type=action.get("type")
    )


def from_file(path: Path) -> FlagCatalog:
    """A `--help` text saved from some SGLang, or a catalog JSON exported by specdoctor."""
    try:
        text = read_text(path, "flag catalog", CATALOG_MAX_BYTES)
    except UnreadableFile as exc:
        raise CatalogError(str(exc)) from None
    if text.lstrip().startswith("{"):
        return _from_json(text, source=f"catalog file {path}")
    try:
        return from_help_text(text, version="unknown", source=f"help text {path}")
    except ValueError as exc:
        raise CatalogError(f"{path}: {exc}") from None


# ---- the installed engine --------------------------------------------------------------------------


class Installed(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)
    interpreter: str
    version: str | None
    dist_info: str | None


def find_interpreter(entrypoint: tuple[str, ...], env: dict[str, str]) -> str | None:
    """The python that would run this entrypoint, as a real path, or None if it is not on PATH (the
    command's own PATH when `env` has one: that is where its launch would look)."""
    path = env.get("PATH", os.environ.get("PATH", ""))
    exe = shutil.which(entrypoint[0], path=path)
    if exe is None:
        return None
    if entrypoint[0].endswith("sglang") or Path(entrypoint[0]).name == "sglang":
        return _shebang_python(Path(exe), path)
    # Not realpath: a venv's python is a symlink, and resolving it would lose the venv.
    return os.path.abspath(exe)


def _shebang_python(script: Path, path: str) -> str | None:
    try:
        head = head_bytes(script, "entry-point script", _SHEBANG_MAX_BYTES)
    except UnreadableFile:
        return None
    first = head.split(b"\n", 1)[0].decode(errors="replace").strip()
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if words and Path(words[0]).name == "env" and len(words) > 1:
        found = shutil.which(words[1], path=path)
        return os.path.abspath(found) if found else None
    return os.path.abspath(words[0]) if words else None


def installed(interpreter: str, run: bool = True) -> Installed:
    """The SGLang `interpreter` has. `run=False` only reads what an earlier run cached: nothing executes."""
    for folder in _sys_path(interpreter, run):
        for dist in sorted(Path(folder).glob("sglang-*.dist-info")):
            return Installed(
                interpreter=interpreter,
                version=dist.name[len("sglang-") : -len(".dist-info")],
                dist_info=str(dist),
            )
    return Installed(interpreter=interpreter, version=None, dist_info=None)


def installed_engine_folder(spec: LaunchCommand) -> Path | None:
    """The `sglang` package folder of the python that runs the command, from what is cached (nothing runs);
    None for an engine in a container or in an environment `uv run`/`conda run` picks."""
    if spec.container is not None or spec.python_chooser is not None:
        return None
    interpreter = find_interpreter(spec.entrypoint, {})
    if interpreter is None:
        return None
    dist = installed(interpreter, run=False).dist_info
    folder = Path(dist).parent / "sglang" if dist else None
    return folder if folder is not None and folder.is_dir() else None


def _sys_path(interpreter: str, run: bool = True) -> list[str]:
    """The interpreter's sys.path, cached by interpreter path and mtime (one ~30 ms run the first time)."""
    stamp = _mtime(interpreter)
    store = cache_dir() / "interpreters.json"
    known = _read_json(store) or {}
    entry = known.get(interpreter)
    if entry and entry.get("mtime") == stamp:
        return entry["sys_path"]
    if not run:
        return []
    try:
        out = subprocess.run(
            [interpreter, "-c", "import sys, json; print(json.dumps(sys.path))"],
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            env=probe_env(),
        )
        paths = json.loads(out.stdout) if out.returncode == 0 else []
    except (OSError, subprocess.TimeoutExpired, json.JSONDecodeError):
        paths = []
    if paths:
        known[interpreter] = {"mtime": stamp, "sys_path": paths}
        _write_json(store, known)
    return paths


def for_command(
    entrypoint: tuple[str, ...],
    env: dict[str, str],
    *,
    version: str | None = None,
    catalog_file: Path | None = None,
    refresh: bool = False,
    live: bool = True,
) -> CatalogChoice:
    """The catalog to check this command against, and where it came from.

    `live=False` (reading a command, not launching it) runs nothing: the interpreter is looked up on
    specdoctor's own PATH, and only what an earlier live read cached is used; otherwise the bundled flags."""
    if catalog_file is not None:
        cat = from_file(catalog_file)
        return CatalogChoice(catalog=cat, note=f"flags from {cat.source}")
    if version is not None:
        return CatalogChoice(catalog=bundled(version), note=f"flags of SGLang {version} (bundled --help)")
    interpreter = find_interpreter(entrypoint, env if live else {})
    if interpreter is None:
        return _fallback(f"`{entrypoint[0]}` is not on PATH")
    inst = installed(interpreter, run=live)
    if inst.version is None and not live:
        return _fallback(
            f"the SGLang of {interpreter} was not read (that runs it; --live-catalog does)", interpreter
        )
    if inst.version is None:
        return _fallback(f"SGLang is not installed for {interpreter}", interpreter)
    key = _cache_key(inst)
    path = cache_dir() / "catalogs" / f"{key}.json"
    if not refresh and (text := _read_text(path)) is not None:
        try:
            cat = _from_json(text, source=f"SGLang {inst.version} at {interpreter}")
            return CatalogChoice(
                catalog=cat,
                note=f"flags of the installed SGLang {inst.version} (cached)",
                interpreter=interpreter,
                cached=True,
            )
        except CatalogError:
            pass
    if not live:
        return _fallback(
            f"the flags of SGLang {inst.version} at {interpreter} are not cached (--live-catalog reads them)",
            interpreter,
        )
    try:
        cat = probe(interpreter, inst.version)
    except CatalogError as exc:
        return _fallback(str(exc), interpreter)
    _write_text(path, _to_json(cat))
    return CatalogChoice(
        catalog=cat,
        note=f"flags of the installed SGLang {inst.version} (read from its --help)",
        interpreter=interpreter,
    )


def for_spec(
    spec: LaunchCommand,
    *,
    version: str | None = None,
    catalog_file: Path | None = None,
    refresh: bool = False,
    live: bool = True,
) -> CatalogChoice:
    """`for_command` for a whole command, wrappers read: a containerised engine has no python here, so its
    flags are the bundled ones of the release its image's tag names (or the default's); under `uv run` or
    `conda run` the python is the one the wrapper picks, which only running the wrapper tells (`live`)."""
    box, chooser = spec.container, spec.python_chooser
    if catalog_file is None and version is None and box is not None:
        return image_catalog(box.image, box.tag_version)
    if catalog_file is None and version is None and chooser is not None:
        what = " ".join(chooser.words())
        interpreter = wrapped_interpreter(spec) if live else None
        if interpreter is None:
            reason = "it did not say which python it runs" if live else "--live-catalog runs it to ask"
            return _fallback(f"`{what}` picks its python when it runs ({reason})")
        return for_command((interpreter,), {}, refresh=refresh, live=True)
    return for_command(
        spec.entrypoint,
        spec.env_dict(),
        version=version,
        catalog_file=catalog_file,
        refresh=refresh,
        live=live,
    )


def image_catalog(image: str, tag_version: str | None) -> CatalogChoice:
    """The bundled flags for an engine in a container image, by the release its tag names."""
    versions = bundled_versions()
    base = re.sub(r"\.post\d+$", "", tag_version or "")
    if tag_version in versions:
        version, why = tag_version, "its tag's release"
    elif base in versions:
        version, why = base, f"its tag names {tag_version}"
    else:
        version = DEFAULT_VERSION
        why = (
            f"its tag names {tag_version}, which is not bundled"
            if tag_version
            else "its tag names no release"
        ) + "; --sglang-version X picks another"
    return CatalogChoice(
        catalog=bundled(version),
        note=f"in a container image ({image}): bundled flags of SGLang {version} ({why})",
    )


def wrapped_interpreter(spec: LaunchCommand) -> str | None:
    """The python `uv run …` / `conda run …` runs, asked of the wrappers themselves (this runs them, with
    specdoctor's own environment, as a live catalog read does)."""
    python = spec.interpreter or "python"
    words = [*(t for w in spec.prefix for t in w.words()), python, "-c", "import sys; print(sys.executable)"]
    try:
        out = subprocess.run(
            words,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
            env=probe_env(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    found = lines[-1].strip() if out.returncode == 0 and lines else ""
    return found if os.path.isabs(found) and os.access(found, os.X_OK) else None


def _fallback(reason: str, interpreter: str | None = None) -> CatalogChoice:
    catalog = bundled(DEFAULT_VERSION)
    catalog.authoritative = False
    return CatalogChoice(
        catalog=catalog,
        note=f"{reason}; checking against the bundled flag list of SGLang {DEFAULT_VERSION}",
        interpreter=interpreter,
    )


_UNSAFE_ENV = re.compile(r"^(?:LD_\w+|DYLD_\w+|PYTHON\w*|BASH_ENV|ENV|PERL5\w*|RUBY\w*|NODE_OPTIONS)$")


def probe_env() -> dict[str, str]:
    """The environment an interpreter is run with to read its flags: specdoctor's own, never the launch
    command's overrides, without variables that make a process load code it would not load otherwise."""
    return {k: v for k, v in os.environ.items() if not _UNSAFE_ENV.match(k)} | {"PYTHONHASHSEED": "0"}


def probe(interpreter: str, version: str) -> FlagCatalog:
    """Run the engine's real `--help` (through the probe, which also records argparse's types)."""
    import tempfile

    probe_script = Path(__file__).with_name("catalog_probe.py")
    run_env = probe_env()
    with tempfile.TemporaryDirectory(prefix="specdoctor-probe-") as tmp:
        out_json = Path(tmp) / "actions.json"
        try:
            proc = subprocess.run(
                [interpreter, str(probe_script), ENTRY_MODULE, str(out_json)],
                capture_output=True,
                text=True,
                timeout=PROBE_TIMEOUT_S,
                cwd=tmp,
                env=run_env,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise CatalogError(
                f"`{interpreter} -m {ENTRY_MODULE} --help` took over {PROBE_TIMEOUT_S:.0f} s"
            ) from None
        except OSError as exc:
            raise CatalogError(f"cannot run {interpreter}: {exc.strerror}") from None
        if proc.returncode != 0 or "usage:" not in proc.stdout:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise CatalogError(f"`{interpreter} -m {ENTRY_MODULE} --help` failed ({last})")
        actions = _read_json(out_json)
    index = {s: a for a in (actions or {}).get("actions", []) for s in a["option_strings"]}
    for a in index.values():
        a["hidden"] = a.get("help") == "==SUPPRESS=="
    return from_help_text(
        proc.stdout, version=version, source=f"SGLang {version} at {interpreter}", actions=index
    )


def help_text(interpreter: str, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Exactly what `<interpreter> -m sglang.launch_server --help` prints (deterministic choice order)."""
    run_env = probe_env()
    proc = subprocess.run(
        [interpreter, "-m", ENTRY_MODULE, "--help"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=run_env,
        stdin=subprocess.DEVNULL,
    )
    return proc.stdout


# ---- cache files -----------------------------------------------------------------------------------


def _cache_key(inst: Installed) -> str:
    raw = f"{_CACHE_FORMAT}|{inst.interpreter}|{inst.version}|{_mtime(inst.dist_info or '')}"
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def _to_json(cat: FlagCatalog) -> str:
    return json.dumps(
        {
            "format": _CACHE_FORMAT,
            "version": cat.version,
            "prog": cat.prog,
            "flags": [f.model_dump(exclude_defaults=True) for f in cat.flags],
            "hidden": [f.model_dump(exclude_defaults=True) for f in cat.hidden],
        }
    )


def _from_json(text: str, source: str) -> FlagCatalog:
    try:
        raw = json.loads(text)
        flags = [FlagInfo.model_validate(f) for f in raw["flags"]]
        hidden = [FlagInfo.model_validate(f) for f in raw.get("hidden", [])]
        return FlagCatalog(flags, version=raw["version"], prog=raw["prog"], source=source, hidden=hidden)
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise CatalogError(f"{source}: not a specdoctor catalog ({exc})") from None


def export_json(cat: FlagCatalog) -> str:
    return _to_json(cat)


def _mtime(path: str) -> float | None:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _read_json(path: Path) -> dict | None:
    text = _read_text(path)
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None


def _write_text(path: Path, text: str) -> None:
    # Write-then-rename so a concurrent reader never sees half a file; a read-only cache is not an error.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    except OSError:
        pass


def _write_json(path: Path, data: dict) -> None:
    _write_text(path, json.dumps(data))
