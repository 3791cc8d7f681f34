"""Permissions: modes, rules, shell parsing and path confinement, combined into one decision.

    policy = Policy.load(project_dir, mode="default", allowed_tools=["Bash(git status:*)"])
    decision = policy.decide("Bash", {"command": "git status; rm -rf ~"}, ctx)
    decision.behavior  # "ask": `rm -rf ~` is not allowed by any rule

Modules: ``policy`` (Policy, Decision; file tools, WebFetch, user tools) and ``bash_policy``
(the Bash half); ``rules`` (rule syntax, path patterns) and ``settings`` (files, flags);
``shell`` (tree-sitter → simple commands), ``grammar`` (the node types it knows), ``redirects``
(redirections, here-documents) and ``words`` (quotes, substitutions, word ends: the cross-check);
``commands`` (wrappers, nested shells → parts), ``programs`` (the read-only set) and
``analyzers`` (git, find, sed, awk, escape hatches); ``search`` (Read rules inside a folder: what Grep/Glob
skip, ``grep -r``). Paths (resolution, confinement, ``confined_write``) are ``drivetrain.host.paths``, below the
tools that write.
"""

from drivetrain.home import drivetrain_home
from drivetrain.host.paths import ConfinementError, Resolved, confined_write, is_within, resolve

from .commands import Part, analyze_command
from .policy import Decision, Policy
from .rules import Behavior, PathPattern, Rule, RuleError, SettingsError, parse_rule, split_tool_list
from .settings import MODES, PermissionMode, Settings, load_settings, load_settings_file, make_sandbox
from .shell import ParsedShell, SimpleCommand, parse_shell
from .words import Word, decode_word

__all__ = [
    "MODES",
    "Behavior",
    "ConfinementError",
    "Decision",
    "ParsedShell",
    "Part",
    "PathPattern",
    "PermissionMode",
    "Policy",
    "Resolved",
    "Rule",
    "RuleError",
    "Settings",
    "SettingsError",
    "SimpleCommand",
    "Word",
    "analyze_command",
    "confined_write",
    "decode_word",
    "drivetrain_home",
    "is_within",
    "load_settings",
    "load_settings_file",
    "make_sandbox",
    "parse_rule",
    "parse_shell",
    "resolve",
    "split_tool_list",
]
