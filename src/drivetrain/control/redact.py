"""Secrets out of what we keep: ``redact`` copies str/dict/list data with secrets replaced.

What counts as a secret, in the order it is looked for in text:

1. the exact values of secret-looking environment variables (names containing KEY,
   TOKEN, SECRET, PASSWORD, PASSWD or CREDENTIAL; values of 8+ characters that are not a
   path, URL, number or plain word) and any ``extra_secrets`` — so an ``env`` or
   ``echo $TOKEN`` in Bash output is caught wherever it lands;
2. well-known shapes: PEM private key blocks, ``scheme://user:password@``, Anthropic,
   OpenAI, GitHub, Slack, AWS and Google keys, JWTs, ``Authorization:`` and ``Bearer``
   credentials, ``curl -u user:password``;
3. assignments whose *name* says secret (``API_KEY=…``, ``"token": "…"``,
   ``password: …``, ``--client-secret …``), unless the value is plainly code, a type or
   a placeholder (``$VAR``, ``get_token()``, ``self.key``, ``str``, ``True``, ``<your-key>``).

In dicts, a key whose name says secret has its whole value redacted (unless it is a
number, a bool, None or empty).

A secret becomes ``[REDACTED]``. A vendor's fixed public prefix is kept so a reader can
tell what leaked (``sk-ant-[REDACTED]``, ``ghp_[REDACTED]``, ``AKIA[REDACTED]``), and so
is an assignment's name (``API_KEY=[REDACTED]``); no character of the secret is. Names
are judged by their parts, so ``tokenizer``, ``keyboard``, ``max_tokens``, ``primary_key``
and ``auth_url`` are left alone. Redaction is idempotent.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable

from drivetrain.jsontypes import JsonValue

MARK = "[REDACTED]"

_SECRET_PARTS = {
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "credential",
    "credentials",
    "apikey",
    "auth",
    "authorization",
}
_KEY_PARTS = {"key", "keys"}
# A key named for one of these is a secret by name (api_key); any other qualified key (span_key,
# STRIPE_KEY) only when its value looks random. A bare "key" is never enough: key=lambda ...
_SECRET_KEY_KINDS = {
    "api",
    "secret",
    "access",
    "private",
    "ssh",
    "signing",
    "signature",
    "encryption",
    "decryption",
    "master",
    "auth",
    "client",
    "app",
    "consumer",
    "session",
    "deploy",
    "gpg",
    "pgp",
    "hmac",
    "jwt",
    "webhook",
    "license",
    "admin",
    "shared",
    "priv",
    "crypto",
    "cipher",
    "aes",
    "rsa",
    "subscription",
    "bot",
    "account",
}
_BENIGN_BEFORE_KEY = {
    "primary",
    "foreign",
    "public",
    "sort",
    "partition",
    "cache",
    "dict",
    "map",
    "hash",
    "lookup",
    "unique",
    "composite",
    "index",
    "group",
    "row",
    "column",
    "hot",
    "idempotency",
    "dedup",
    "shortcut",
    "keyboard",
    "range",
    "cluster",
    "shard",
    "routing",
    "object",
}
_BENIGN_LAST = {
    "url",
    "uri",
    "urls",
    "endpoint",
    "method",
    "methods",
    "type",
    "types",
    "mode",
    "name",
    "names",
    "file",
    "files",
    "path",
    "paths",
    "dir",
    "directory",
    "count",
    "counts",
    "id",
    "ids",
    "len",
    "length",
    "size",
    "limit",
    "limits",
    "header",
    "headers",
    "field",
    "fields",
    "provider",
    "providers",
    "enabled",
    "disabled",
    "required",
    "env",
    "var",
    "format",
    "algorithm",
    "alg",
    "scheme",
    "domain",
    "host",
    "port",
    "timeout",
    "expiry",
    "expires",
    "expiration",
    "ttl",
    "version",
    "prefix",
    "suffix",
    "policy",
    "class",
    "kind",
    "source",
    "store",
    "manager",
    "handler",
    "callback",
    "strategy",
    "fn",
    "func",
    "function",
    "ref",
    "refs",
    "rotation",
    "location",
    "help",
    "hint",
    "label",
    "description",
    "placeholder",
    "schema",
    "flow",
    "server",
    "service",
    "budget",
    "usage",
    "index",
    "spec",
    "cmd",
    "command",
    "helper",
    "min",
    "max",
    "set",
    "exists",
    "valid",
    "validator",
    "error",
    "errors",
    "status",
    "used",
    "pattern",
    "regex",
    "check",
    "stdin",
    "prompt",
    "sock",
    "socket",
}
# Unquoted values that are code, types or literals, never secrets.
_PLAIN_WORDS = {
    "true",
    "false",
    "null",
    "none",
    "nil",
    "yes",
    "no",
    "on",
    "off",
    "undefined",
    "lambda",
    "function",
    "def",
    "async",
    "await",
    "new",
    "required",
    "optional",
    "inherit",
    "str",
    "string",
    "int",
    "integer",
    "bool",
    "boolean",
    "float",
    "number",
    "bytes",
    "dict",
    "list",
    "tuple",
    "any",
    "object",
    "unknown",
    "bearer",
    "basic",
    "token",
    "digest",
    "negotiate",
}
NOT_SECRET, MAYBE_SECRET, SECRET = 0, 1, 2


def _name_parts(name: str) -> list[str]:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [p for p in re.split(r"[^A-Za-z0-9]+", name.lower()) if p]


def secrecy(name: str) -> int:
    """What a variable, flag or field name says about its value: SECRET (``api_key``,
    ``DB_PASSWORD``), MAYBE_SECRET (``stripe_key``: only if the value looks random) or
    NOT_SECRET (``tokenizer``, ``max_tokens``, ``primary_key``, ``auth_url``, ``key``)."""
    return _secrecy(name) if len(name) <= _CACHED_LEN else _secrecy.__wrapped__(name)


_CACHED_LEN = 256  # strings up to this long are remembered: field names, tool names, ids, reasons repeat


@functools.lru_cache(maxsize=4096)
def _secrecy(name: str) -> int:
    parts = _name_parts(name)
    if not parts or parts[-1] in _BENIGN_LAST:
        return NOT_SECRET
    found = NOT_SECRET
    for i, part in enumerate(parts):
        if part in _SECRET_PARTS:
            return SECRET
        if part in _KEY_PARTS and i > 0 and parts[i - 1] not in _BENIGN_BEFORE_KEY:
            found = max(found, SECRET if parts[i - 1] in _SECRET_KEY_KINDS else MAYBE_SECRET)
    return found


def looks_random(v: str) -> bool:
    """A key-like string: 12+ characters, no spaces, digits and letters (or 20+ in mixed case)."""
    return (
        len(v) >= 12
        and not any(c.isspace() for c in v)
        and bool(re.search(r"[A-Za-z]", v))
        and (bool(re.search(r"\d", v)) or (len(v) >= 20 and v.lower() != v and v.upper() != v))
    )


# ---------------------------------------------------------------- environment values

_ENV_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)


def _env_secret_value(v: str) -> bool:
    return (
        len(v) >= 8
        and not any(c.isspace() for c in v)
        and v[0] not in "/~.$"
        and not v.isdigit()
        and not v.isalpha()
        and "://" not in v
        and MARK not in v
    )


def env_secrets(environ: dict[str, str] | None = None) -> list[str]:
    """The values of secret-looking environment variables, longest first."""
    if environ is not None:
        return list(_env_secrets(tuple(environ.items())))
    raw = getattr(os.environ, "_data", None)  # CPython keeps the bytes: a cheap key that changes with the env
    if not isinstance(raw, dict):
        return list(_env_secrets(tuple(os.environ.items())))
    return list(_env_secrets_of_raw(tuple(raw.items())))


@functools.lru_cache(maxsize=4)
def _env_secrets_of_raw(raw: tuple[tuple[bytes, bytes], ...]) -> tuple[str, ...]:
    return _env_secrets(tuple((os.fsdecode(k), os.fsdecode(v)) for k, v in raw))


def _env_secrets(items: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    found = {v.strip() for k, v in items if _ENV_NAME.search(k) and _env_secret_value(v.strip())}
    return tuple(sorted(found, key=len, reverse=True))


# ---------------------------------------------------------------- shapes


def _keep_prefix(m: re.Match[str]) -> str:
    return m.group(1) + MARK


_SCHEME = r"(?:bearer|basic|token|digest|negotiate)"
_SHAPES: list[tuple[re.Pattern[str], Callable[[re.Match[str]], str]]] = [
    (
        re.compile(r"(-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)[\s\S]*?(-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)"),
        lambda m: m.group(1) + MARK + m.group(2),
    ),
    (re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@'\"\[]+:)(?![<${]|\[REDACTED\])[^/\s@'\"]+(?=@)"), _keep_prefix),
    (re.compile(r"\b(sk-ant-)[A-Za-z0-9_-]{8,}"), _keep_prefix),
    (re.compile(r"(?<![\w-])(sk-(?:proj-|svcacct-|admin-)?)(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{20,}"), _keep_prefix),
    (re.compile(r"\b(gh[pousr]_)[A-Za-z0-9]{30,}\b"), _keep_prefix),
    (re.compile(r"\b(github_pat_)[A-Za-z0-9_]{20,}"), _keep_prefix),
    (re.compile(r"\b(xox[abprs]-)[A-Za-z0-9-]{10,}"), _keep_prefix),
    (re.compile(r"\b(AKIA|ASIA)[0-9A-Z]{16}\b"), _keep_prefix),
    (re.compile(r"\b(AIza)[0-9A-Za-z_-]{35}"), _keep_prefix),
    (re.compile(r"\b(eyJ)[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*"), _keep_prefix),
    (
        re.compile(
            rf"(?i)\b((?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*[\"']?{_SCHEME}[ \t]+)"
            r"(?!\[REDACTED\]|[$%<{.])[^\s\"',;]+"
        ),
        _keep_prefix,
    ),
    (re.compile(r"\b(Bearer[ \t]+)(?!\[REDACTED\])(?=[\w.~+/=-]*[0-9.~+/=]|[A-Za-z]{20})[\w.~+/=-]{8,}"), _keep_prefix),
    (re.compile(r"(?<!\S)((?:-u|--user)[ \t]+[\"']?[^\s:\"']+:)(?!\[REDACTED\])[^\s\"']+"), _keep_prefix),
]

# --name value / --name=value, then name=value / name: value / "name": "value"
_VALUE = r"(?P<value>\"[^\"\n]*\"|'[^'\n]*'|(?![-:=])[^\s\"'`,;|&)}\]]+)"
_FLAG = re.compile(r"(?<![\w-])(?P<lead>--?(?P<name>[A-Za-z][\w-]*)(?P<sep>=|[ \t]+))" + _VALUE)
_ASSIGN = re.compile(
    r"(?<![\w.$-])(?P<lead>(?P<q>[\"']?)(?P<name>[A-Za-z_][\w.-]*)(?P=q)"
    r"(?P<sep>[ \t]*(?::=|[:=])[ \t]*))" + _VALUE
)


def _is_code(v: str, name: str, style: str) -> bool:
    """Is this unquoted value code, a type or a literal (``$VAR``, ``f(x)``, ``self.key``, ``str``)?

    ``style`` is how it was assigned: "flag" (``--token v``), "=" (env var or keyword
    argument), ":" (YAML, header, annotation) or "code" (an unquoted value under a quoted
    key: a Python/JS dict, since JSON would quote it).
    """
    if len(v) < 4 or MARK in v or v.lower() in _PLAIN_WORDS or v[0] in "$%<{([*&@#\\" or style == "code":
        return True
    if re.fullmatch(r"[-+]?\d[\d_.,:]*[a-zA-Z]{0,2}", v) or "(" in v or "[" in v or "{{" in v:
        return True
    if re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", v):  # self.token, os.environ, str.lower
        return True
    if not re.fullmatch(r"[A-Za-z_]\w*", v):
        return False
    if secrecy(v) or re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+", v):
        return True  # api_key=api_key, token: Token, --api-key API_KEY, Token: FG_DEFAULT
    if style == "flag":
        return False
    no_digit = not re.search(r"\d", v)
    if style == ":" and no_digit and (v[0] == "_" or (v.lower() != v and v.upper() != v)):
        return True  # auth: AuthTypes, api_keys: APIKeys (a type annotation)
    if style == "=" and not name.isupper() and ("_" in v or no_digit):
        return True  # f(token=tok): a keyword argument, not an env var
    return False


def _is_placeholder(s: str) -> bool:
    """Is this quoted value a placeholder, a name or prose rather than a secret?"""
    return (
        len(s) < 4
        or MARK in s
        or s[0] in "$%<{#"
        or "***" in s
        or set(s) <= set("xX*.-:/")
        or any(c.isspace() for c in s)  # prose, not a key: "begin of print statement"
        or bool(re.fullmatch(r"[a-z]+(_[a-z]+)+", s))  # a name: "oidc_federation"
        or s.lower() in _PLAIN_WORDS
        or bool(secrecy(s))  # ENV_API_KEY = "ANTHROPIC_API_KEY"
        or bool(re.fullmatch(r"your[-_ ].*|changeme", s, re.IGNORECASE))
    )


def _assignment(m: re.Match[str]) -> str:
    name, value, sep = m.group("name"), m.group("value"), m.group("sep")
    quoted_name = m.re is _ASSIGN and bool(m.group("q"))
    level = secrecy(name.rsplit(".", 1)[-1])  # token.tag = ...: an attribute of a token
    if not level or (sep.strip() == ":" and not sep.endswith((" ", "\t")) and not quoted_name):
        return m.group(0)  # passwd:shell is not YAML (YAML and headers put a space after the colon)
    quoted = value[0] in "\"'" and len(value) >= 2
    inner = value[1:-1] if quoted else value
    style = "flag" if m.re is _FLAG else "code" if quoted_name else "=" if "=" in sep else ":"
    secret = not (_is_placeholder(inner) if quoted else _is_code(value, name, style))
    if level == MAYBE_SECRET:
        secret = secret and looks_random(inner)
    if not secret:
        return m.group(0)
    return m.group("lead") + (value[0] + MARK + value[0] if quoted else MARK)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with the given exact secrets and every recognisable secret replaced."""
    secrets = tuple(secrets)
    return _redact_text(text, secrets) if len(text) <= _CACHED_LEN else _redact_text.__wrapped__(text, secrets)


@functools.lru_cache(maxsize=4096)
def _redact_text(text: str, secrets: tuple[str, ...]) -> str:
    for s in secrets:
        if s and s in text:
            text = text.replace(s, MARK)
    for pattern, repl in _SHAPES:
        text = pattern.sub(repl, text)
    text = _FLAG.sub(_assignment, text)
    return _ASSIGN.sub(_assignment, text)


def _walk(value: JsonValue, secrets: tuple[str, ...]) -> JsonValue:
    if isinstance(value, str):
        return redact_text(value, secrets)
    if isinstance(value, dict):
        return {k: MARK if _secret_entry(k, v) else _walk(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_walk(v, secrets) for v in value)
    return value


def _secret_entry(key: object, value: object) -> bool:
    if not isinstance(key, str) or not value or value == MARK:
        return False
    level = secrecy(key)
    if level == MAYBE_SECRET:
        return isinstance(value, str) and looks_random(value)
    return level == SECRET and isinstance(value, (str, dict, list, tuple))


def redact(value: JsonValue, *, extra_secrets: Iterable[str | None] = ()) -> JsonValue:
    """A copy of ``value`` (str, dict, list, tuple; other leaves as they are) with secrets redacted.

    ``extra_secrets`` are exact strings to remove too, e.g. a key read from a config file
    (4+ characters; shorter ones would blank out ordinary text; None, a key that is not set, is skipped).
    """
    extra = {s.strip() for s in extra_secrets if isinstance(s, str) and len(s.strip()) >= 4}
    secrets = tuple(sorted({*env_secrets(), *extra}, key=len, reverse=True)) if extra else tuple(env_secrets())
    return _walk(value, secrets)
