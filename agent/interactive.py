"""The person at the terminal approves each change in `specdoctor fix`: accept it, edit the command, skip
it (launch the command as it is), ask the LLM instead, or quit (declined).

Prompts read the terminal with `input()`, so readline gives line editing and the edit prompt comes
prefilled with the proposed command.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.text import Text

from specdoctor.agent.approve import Review
from specdoctor.playbooks.decision import Fix
from specdoctor.playbooks.gate import Touch
from specdoctor.tools.command import CommandError, LaunchCommand
from specdoctor.tools.redact import redact_command, redact_spec, redact_text, unmask

EDIT_PROMPT = "command> "
ACTIONS = ("accept", "yours", "edit", "skip", "llm", "quit")
"""What the person may answer; any prefix of one (`a`, `acc`) will do. `yours` only when an edit of theirs
is offered back."""


def editor_command() -> list[str] | None:
    """The person's editor as argv (VISUAL first, then EDITOR), or None when neither is set."""
    for name in ("VISUAL", "EDITOR"):
        value = os.environ.get(name, "").strip()
        if value:
            with contextlib.suppress(ValueError):
                return shlex.split(value)
    return None


def multiline(spec: LaunchCommand) -> str:
    """The command one flag a line with backslash continuations, as people write long commands."""
    # Wrappers (`docker run ... IMAGE`) are kept word for word: an edit must not drop the container.
    head = " ".join([*(f"{k}={shlex.quote(v)}" for k, v in spec.env), *map(shlex.quote, _program(spec))])
    lines = [head, *(" ".join(map(shlex.quote, a.tokens())) for a in spec.args)]
    return " \\\n  ".join(lines) + "\n"


def prefilled_input(prompt: str, text: str) -> str:
    """`input(prompt)` with `text` already typed in, ready to edit (readline); without readline the text
    is shown and an empty answer keeps it."""
    try:
        import readline
    except ImportError:
        readline = None
    if readline is None or not hasattr(readline, "set_pre_input_hook"):  # some libedit builds lack it
        print(text)
        answer = input(f"(empty keeps it) {prompt}")
        return answer if answer.strip() else text

    def fill() -> None:
        readline.insert_text(text)
        readline.redisplay()

    readline.set_pre_input_hook(fill)
    try:
        return input(prompt)
    finally:
        readline.set_pre_input_hook(None)


def _action(answer: str, offered: bool) -> str | None:
    """The action an answer names (any prefix of one, `yours` only when an edit is offered back)."""
    lowered = answer.lower()
    return next(
        (a for a in ACTIONS if lowered and a.startswith(lowered) and (offered or a != "yours")),
        None,
    )


class InteractiveApprover:
    """Asks the person at the terminal about every proposed change, and before stopping foreign processes.

    Unless `show_secrets`, commands are shown and edited with their secrets masked; a mask the person leaves
    in place stands for the value it hides."""

    kind = "user"

    def __init__(
        self,
        console: Console,
        *,
        before_prompt: Callable[[], None] = lambda: None,
        ask: Callable[[str], str] = input,
        edit_line: Callable[[str, str], str] = prefilled_input,
        show_secrets: bool = False,
    ) -> None:
        self.console = console
        self.show_secrets = show_secrets
        self.before_prompt = before_prompt
        self.ask = ask
        self.edit_line = edit_line
        self._last_edit: LaunchCommand | None = None
        """The command the person last typed, to tell it apart from the check's fix of it."""

    def confirm(self, question: str) -> bool:
        self.before_prompt()
        while True:
            answer = (self._ask(f"{question} [y/N] ") or "n").strip().lower()
            if answer in ("y", "yes"):
                return True
            if answer in ("", "n", "no"):
                return False
            self._say("answer y or n", "yellow")

    def review(
        self,
        old: LaunchCommand,
        decision: Fix,
        new: LaunchCommand,
        attempt: int,
        note: str = "",
        touches: Sequence[Touch] = (),
        alternative: LaunchCommand | None = None,
    ) -> Review:
        self.before_prompt()
        self._show(decision, new, note, touches, alternative)
        pinned = [t.classed.name for t in touches if t.pinned]
        editor = editor_command()
        menu = (
            "[a]ccept"
            + ("  [y]our edit" if alternative is not None else "")
            + "  [e]dit  [s]kip  [l]lm  [q]uit"
            + ("  [E]ditor" if editor else "")
            + " > "
        )
        while True:
            answer = self._ask(menu)
            answer = "quit" if answer is None else answer.strip()
            if answer == "E" and editor:
                edited = self._edit_in_editor(editor, old, alternative or new, attempt)
            else:
                action = _action(answer, alternative is not None)
                if action is None:
                    self._say(
                        f"type {'a, y' if alternative else 'a'}, e, s, l or q and press Enter", "yellow"
                    )
                    continue
                if action != "edit":
                    decided = self._decided(action, new, alternative, pinned)
                    if decided is not None:
                        return decided
                    continue
                edited = self._edit_inline(old, alternative or new, attempt)
            if edited is not None and edited == new and pinned:
                # The edit line comes prefilled with the proposal: Enter alone must not slip past the pin.
                self._decided("accept", new, alternative, pinned)
            elif edited is not None:
                self._last_edit = edited
                note = "accepted by the user" if edited == new else "edited by the user"
                return Review(approved=True, spec=edited, by="user", note=note)

    def _show(
        self,
        decision: Fix,
        new: LaunchCommand,
        note: str,
        touches: Sequence[Touch],
        alternative: LaunchCommand | None,
    ) -> None:
        """The note, what the change touches beyond tuning (pinned flags first), the proposal, and the
        person's own edit when it is offered back."""
        if note:
            self._say(note, "bold yellow")
        source = "the static check" if decision.playbook == "preflight" else decision.playbook or "the LLM"
        for touch in touches:
            if touch.pinned:
                self._say(
                    f"  pinned: {touch.edit} ({touch.classed.name} is pinned, so this proposal cannot be "
                    "accepted: edit the command yourself, or skip)",
                    "bold magenta",
                )
            elif touch.classed.edit_class != "tuning":
                self._say(f"  {touch.classed.edit_class}: {touch.edit} ({touch.classed.rule})", "magenta")
        self._say(f"proposed command (from {source}):", "bold")
        self.console.print(Text(self._shown(new), style="cyan"), soft_wrap=True)
        if alternative is not None:
            fixed = alternative != self._last_edit
            self._say(
                "[y]our edit, with the static check's fixes:"
                if fixed
                else "[y]our edit, as you typed it (the check cannot fix it; [y] launches it anyway):",
                "bold",
            )
            self.console.print(Text(self._shown(alternative), style="cyan"), soft_wrap=True)

    def _decided(
        self, action: str, new: LaunchCommand, alternative: LaunchCommand | None, pinned: list[str]
    ) -> Review | None:
        """The review an answer other than `edit` gives; None when it cannot be taken (asked again)."""
        if action == "accept" and pinned:
            self._say(
                f"✗ the proposal changes pinned {', '.join(pinned)}: [e]dit the command yourself, [s]kip "
                "the change, or [q]uit",
                "bold red",
            )
            return None
        if action == "accept":
            return Review(approved=True, spec=new, by="user", note="accepted by the user")
        if action == "yours" and alternative is not None:
            return Review(approved=True, spec=alternative, by="user", note="edited by the user")
        if action == "skip":
            self._say("launching the command as it is, with no change", "dim")
            return Review(approved=False, skip=True, by="user", note="skipped by the user: launched as it is")
        if action == "llm":
            self._say("asking the LLM for its diagnosis...", "dim")
            return Review(approved=False, by="user", ask_llm=True, note="the user asked the LLM")
        return Review(approved=False, declined=True, by="user", note="declined by the user")

    # ---- editing ---------------------------------------------------------------------------------
    def _edit_inline(self, old: LaunchCommand, new: LaunchCommand, attempt: int) -> LaunchCommand | None:
        """Edit the proposed line until it is a valid command; an empty line goes back to the menu."""
        self._say("edit the command (only flags and environment may change; empty line: back)", "dim")
        text = self._shown(new)
        while True:
            answer = self._ask(EDIT_PROMPT, lambda prompt, shown=text: self.edit_line(prompt, shown))
            if answer is None or not answer.strip():
                return None
            text = answer
            spec = self._check(text, old, new, attempt)
            if spec is not None:
                return spec

    def _edit_in_editor(
        self, editor: list[str], old: LaunchCommand, new: LaunchCommand, attempt: int
    ) -> LaunchCommand | None:
        with tempfile.TemporaryDirectory(prefix="specdoctor-") as tmp:
            path = Path(tmp) / "command.sh"
            path.write_text(multiline(new if self.show_secrets else redact_spec(new)))
            try:
                done = subprocess.run([*editor, str(path)], check=False)
            except OSError as exc:
                self._say(f"cannot start the editor {editor[0]}: {exc.strerror}", "red")
                return None
            if done.returncode != 0:
                self._say(f"the editor exited with status {done.returncode}; nothing changed", "yellow")
                return None
            # shlex keeps a backslash-newline as a newline token, where a shell continues the line.
            text = path.read_text().replace("\\\n", " ")
        if not text.strip():
            self._say("the file is empty; nothing changed", "yellow")
            return None
        return self._check(text, old, new, attempt)

    def _check(self, text: str, old: LaunchCommand, new: LaunchCommand, attempt: int) -> LaunchCommand | None:
        """The edited command, or None after saying in one line why it cannot be launched."""
        try:
            spec = unmask(LaunchCommand.parse(text), new)
        except CommandError as exc:
            self._say(f"✗ {exc}", "bold red")
            return None
        if (spec.prefix, spec.entrypoint) not in ((old.prefix, old.entrypoint), (new.prefix, new.entrypoint)):
            self._say(
                f"✗ edits may change flags and environment only: the program (and its wrappers) must stay "
                f"`{' '.join(_program(old))}`, not `{' '.join(_program(spec))}`",
                "bold red",
            )
            return None
        if attempt > 0 and spec == old:
            self._say(
                "✗ that is the command that just failed: change something (an empty line goes back to the "
                "menu, where [s]kip launches it again as it is)",
                "bold red",
            )
            return None
        return spec

    def _shown(self, spec: LaunchCommand) -> str:
        return spec.shell() if self.show_secrets else redact_command(spec)

    # ---- the terminal ----------------------------------------------------------------------------
    def _ask(self, prompt: str, read: Callable[[str], str] | None = None) -> str | None:
        """The answer, or None on end of input (Ctrl-D: the person left, so nothing is applied)."""
        try:
            return (read or self.ask)(prompt)
        except EOFError:
            self.console.print()
            return None
        except KeyboardInterrupt:
            self.console.print()
            raise

    def _say(self, text: str, style: str = "") -> None:
        shown = text if self.show_secrets else redact_text(text)
        self.console.print(Text(shown, style=style), soft_wrap=True)


def _program(spec: LaunchCommand) -> list[str]:
    return [*(t for w in spec.prefix for t in w.words()), *spec.entrypoint]
