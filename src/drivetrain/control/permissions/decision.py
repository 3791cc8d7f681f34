"""A permission decision, and what the two halves of the policy (files and the shell) share.

``PolicyView`` is what ``bash_policy`` and ``search`` read of the ``Policy`` (``policy.py``), which uses both:
typed by what they read, they need not import it.
"""

from __future__ import annotations

import glob
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from drivetrain.host.paths import HARMLESS_READS, HARMLESS_WRITES, Resolved, resolve

from .rules import Behavior, Rule
from .settings import PermissionMode
from .words import Word


class PolicyView(Protocol):
    """What the Bash half of the policy and the search filter read of it."""

    home: Path
    drivetrain_home: Path | None
    mode: PermissionMode
    rules: list[Rule]

    def roots(self, cwd: Path) -> list[Path]: ...

    def protected(self, res: Resolved) -> bool: ...

    def _first(self, behavior: Behavior, tool: str, pred: Callable[[Rule], bool] = ...) -> Rule | None: ...

    def _file_rule(self, behavior: Behavior, tool: str, res: Resolved, cwd: Path) -> Rule | None: ...


@dataclass(frozen=True)
class Decision:
    behavior: Behavior
    reason: str
    source: str  # the settings file or flag of the rule, "mode:<mode>", or "builtin"
    rule: str | None = None  # the rule's text, when a rule decided
    details: tuple[str, ...] = ()  # for a shell command: the verdict on each part

    @property
    def allowed(self) -> bool:
        return self.behavior == "allow"


def _by_rule(behavior: Behavior, rule: Rule, reason: str) -> Decision:
    return Decision(behavior, f"{reason} (rule {rule.text} from {rule.source})", rule.source, rule.text)


def word_paths(w: Word, cwds: list[Path] | None, home: Path, limit: int = 1000) -> list[Resolved] | None:
    """Where a shell word points, from each possible working directory; None if not knowable.

    A glob counts as the folder before its first wildcard and every file it matches now
    (a match may be a symlink leading out of the workspace).
    """
    if w.value is None:
        return None
    value = w.value
    if value.startswith("~"):  # still there after decoding: quoted, so a folder named ~
        value = "./" + value
    if not value.startswith("/") and cwds is None:
        return None
    out: list[Resolved] = []
    for c in [Path("/")] if value.startswith("/") else cwds or []:
        if not w.glob:
            out.append(resolve(value or ".", c, home))
            continue
        head = value[: min(value.find(ch) for ch in "*?[" if ch in value)]
        out.append(resolve((head.rsplit("/", 1)[0] or "/") if "/" in head else ".", c, home))
        matches = list(itertools.islice(glob.iglob(value, root_dir=c), limit + 1))
        if len(matches) > limit:
            return None
        out.extend(resolve(m, c, home) for m in matches)
    return out


def harmless(w: Word, writes: bool) -> bool:
    return w.procsub or (w.value in (HARMLESS_WRITES if writes else HARMLESS_READS))
