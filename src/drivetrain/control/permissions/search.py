"""Read rules inside a folder: what a search must leave out, and whether a command reading a whole
folder (``grep -r``, ``rg``, ``cp -r``, ``tar``…) would read a file a rule covers.

A ``Read(…)`` deny rule holds for every tool that reads. Grep and Glob search an allowed folder
but skip (and say they skipped) each file a Read deny rule covers, or an ask rule that the
search's own path is not under (asking about the search would not have asked about the file).
Only rules whose pattern could match inside the folder cost a walk of it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from drivetrain.host.paths import Resolved, resolve

from .decision import PolicyView
from .rules import Behavior, Rule

WALK_LIMIT = 20_000  # entries looked at under one folder before giving up (and asking)


def rules_under(policy: PolicyView, behavior: Behavior, folder: Resolved, cwd: Path) -> list[Rule]:
    """The Read rules of this behavior whose pattern could match a path inside ``folder``."""
    return [
        r
        for r in policy.rules
        if r.behavior == behavior
        and r.covers_tool("Read")
        and r.pattern is not None
        and any(r.pattern.may_match_under(v, cwd) for v in folder.views())
    ]


@dataclass(frozen=True)
class SearchFilter:
    """The Policy's answer to the search tools (``drivetrain.tools.base.ReadFilter``)."""

    policy: PolicyView
    cwd: Path

    def hidden(self, path: Path, searched: Path) -> str | None:
        """Why a search of ``searched`` must leave out ``path`` (the rule, said for a person), or None."""
        res = resolve(path, self.cwd, self.policy.home)
        if rule := self._rule("deny", res):
            return f"denied by {rule.text}"
        rule = self._rule("ask", res)
        if rule and not (
            rule.pattern
            and any(rule.pattern.matches(v, self.cwd) for v in resolve(searched, self.cwd, self.policy.home).views())
        ):
            return f"{rule.text} asks before reading them (name one as the path to be asked)"
        return None

    def may_hide_under(self, folder: Path) -> bool:
        res = resolve(folder, self.cwd, self.policy.home)
        return bool(rules_under(self.policy, "deny", res, self.cwd) or rules_under(self.policy, "ask", res, self.cwd))

    def _rule(self, behavior: Behavior, res: Resolved) -> Rule | None:
        rule = self.policy._file_rule(behavior, "Read", res, self.cwd)
        return rule if rule is not None and not rule.bare else None


def covered_under(
    policy: PolicyView, behavior: Behavior, folder: Resolved, cwd: Path
) -> tuple[Rule, Path] | str | None:
    """A path inside ``folder`` (symlinks not followed) that a Read rule of this behavior covers, with
    the rule; None if there is none; a message if the folder is too big to look through."""
    rules = rules_under(policy, behavior, folder, cwd)
    if not rules or not os.path.isdir(folder.real):
        return None
    seen = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(folder.real, rel)))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > WALK_LIMIT:
                return f"{folder.lexical} holds more than {WALK_LIMIT} files to check against the Read rules"
            sub = os.path.join(rel, entry.name)
            views = (folder.lexical / sub, folder.real / sub)
            hit = next((r for r in rules if r.pattern and any(r.pattern.matches(v, cwd) for v in views)), None)
            if hit:
                return hit, folder.lexical / sub
            if entry.is_dir(follow_symlinks=False) and any(
                r.pattern and r.pattern.may_match_under(v, cwd) for r in rules for v in views
            ):
                stack.append(sub)
    return None
