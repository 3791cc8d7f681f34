"""tree-sitter's Bash grammar: the parser, and the node types drivetrain understands.

Each construct lists the operators and reserved words it may hold; a node of any other type, or
an ERROR or MISSING node anywhere, means the command is not understood.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Language, Node

WORDS = {
    "word",
    "string",
    "raw_string",
    "ansi_c_string",
    "translated_string",
    "number",
    "concatenation",
    "simple_expansion",
    "expansion",
    "command_substitution",
    "process_substitution",
    "brace_expression",
    "command_name",
    "variable_name",
}
SUBSTITUTIONS = ("command_substitution", "process_substitution")
TERMS = {";", "&", "\n"}
# The operators and reserved words each construct may hold (anything else: not understood).
TOKENS = {
    "program": TERMS,
    "subshell": TERMS | {"(", ")"},
    "compound_statement": TERMS | {"{", "}"},
    "do_group": TERMS | {"do", "done"},
    "if_statement": TERMS | {"if", "then", "fi"},
    "elif_clause": TERMS | {"elif", "then"},
    "else_clause": TERMS | {"else"},
    "while_statement": TERMS | {"while", "until"},
    "list": {"&&", "||"},
    "pipeline": {"|", "|&"},
    "negated_command": {"!"},
    "for_statement": TERMS | {"for", "in"},
}
STATEMENTS = set(TOKENS) - {"program", "do_group", "elif_clause", "else_clause"} | {
    "command",
    "redirected_statement",
    "variable_assignment",
    "variable_assignments",
    "declaration_command",
    "unset_command",
    "test_command",
    "c_style_for_statement",
    "case_statement",
    "function_definition",
}
UNSUPPORTED = {
    "case_statement": "a case statement",
    "c_style_for_statement": "an arithmetic for loop",
    "function_definition": "defines a shell function (it could shadow any command name)",
}


@cache
def _language() -> Language:
    import tree_sitter_bash
    from tree_sitter import Language

    return Language(tree_sitter_bash.language())


def parse_tree(source: bytes) -> Node:
    """The syntax tree's root node (the language is loaded once, on first use)."""
    from tree_sitter import Parser

    return Parser(_language()).parse(source).root_node


def first_error(node: Node) -> Node | None:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.is_error or n.is_missing:
            return n
        stack.extend(reversed(n.children))
    return None


def rightmost_command(node: Node) -> Node:
    """The simple command a redirection after ``a && b | c`` belongs to in bash (c)."""
    while node.type in ("pipeline", "list", "negated_command"):
        kids = [c for c in node.named_children if c.type != "comment"]
        if not kids:
            break
        node = kids[-1]
    return node
