"""specdoctor: launch an LLM inference server, diagnose why it fails, fix the command and retry.

This folder is the root of the installed `specdoctor` package; the repository's `agent/`, `tools/` and
`playbooks/` folders install as `specdoctor.agent`, `specdoctor.tools` and `specdoctor.playbooks`
(see `package-dir` in pyproject.toml), so `specdoctor` is the only top-level name the wheel installs.
"""

__version__ = "0.1.0"
