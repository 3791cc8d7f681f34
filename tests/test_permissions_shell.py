"""Shell parsing: words decoded as bash decodes them, every command found, the rest reported."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from drivetrain.control.permissions import analyze_command, decode_word, parse_shell
from drivetrain.control.permissions.analyzers import sed_script_ok
from drivetrain.control.permissions.words import substitution_spans

HOME = "/home/u"


@pytest.mark.parametrize(
    "raw, value",
    [
        ("git", "git"),
        ('g""it', "git"),
        ("'r'm", "rm"),
        ('"rm"', "rm"),
        ("\\rm", "rm"),
        ("r\\m", "rm"),
        ("$'\\x72m'", "rm"),
        ("$'\\162m'", "rm"),
        ("$'\\u0072m'", "rm"),
        ("$'a\\'b'", "a'b"),
        ("$'\\n'", "\n"),
        ('"a\\"b"', 'a"b'),
        ('"a\\$b"', "a$b"),
        ('"a\\b"', "a\\b"),
        ("'a\"b'", 'a"b'),
        ('$"x"', "x"),
        ("~", HOME),
        ("~/x", HOME + "/x"),
        ('"~"/x', "~/x"),
        ("a=~/x", "a=/home/u/x"),
        ("a=b:~/z", "a=b:/home/u/z"),
        ("--f=~/y", "--f=~/y"),
        ("x~/q", "x~/q"),
        ("a='~'/x", "a=~/x"),
        ("{}", "{}"),
        ("{a}", "{a}"),
        ("a\\\nb", "ab"),
        ("$", "$"),
        ("a$", "a$"),
        ("100%", "100%"),
    ],
)
def test_decode_static_words(raw, value):
    assert decode_word(raw, HOME).value == value


@pytest.mark.parametrize(
    "raw",
    [
        "$x",
        "${x}",
        "${x:-rm}",
        "$IFS",
        "rm${IFS}x",
        "$(rm)",
        "`rm`",
        '"$(rm)"',
        '"$x"',
        "~root",
        "~+",
        "~-",
        "{a,b}",
        "{1..3}",
        "<(ls)",
        "$1",
        "$@",
        "$'\\x00'",
        "'unterminated",
    ],
)
def test_decode_dynamic_words(raw):
    assert decode_word(raw, HOME).value is None


def test_glob_words_keep_their_pattern():
    w = decode_word("src/*.py", HOME)
    assert (w.value, w.glob) == ("src/*.py", True)
    assert not decode_word("'*.py'", HOME).glob
    assert not decode_word("[", HOME).glob  # the test command, not a pattern


def words(command: str) -> list[list[str | None]]:
    return [[w.value for w in c.words] for c in parse_shell(command, HOME).commands]


def test_every_simple_command_is_found():
    assert words("a; b && c || d | e & f\ng") == [["a"], ["b"], ["c"], ["d"], ["e"], ["f"], ["g"]]
    assert words("(a; b) && { c; }") == [["a"], ["b"], ["c"]]
    assert words("if a; then b; elif c; then d; else e; fi") == [["a"], ["b"], ["c"], ["d"], ["e"]]
    assert words("echo $(a $(b)) `c` <(d) >(e)")[:5] == [["b"], ["a", None], ["c"], ["d"], ["e"]]


def test_substitutions_inside_quotes_and_assignments_are_found():
    assert ["rm"] in words('echo "$(rm)"')
    assert ["rm"] in words("x=$(rm)")
    assert ["rm"] in words("echo > $(rm)")
    assert ["rm"] in words("cat <<< $(rm)")
    assert ["rm"] not in words("echo '$(rm)'")


@pytest.mark.parametrize(
    "command",
    [
        "f() { rm; }; f",
        "echo $((1+2))",
        "echo $[1+2]",
        "[[ -f x ]]",
        "case x in a) rm;; esac",
        "git status\rrm",
        "ls\x00rm",
        "ls\u202erm",
        "echo 'unterminated",
        "echo ${x:-$(rm)}",
        "ls )",
        "select x in a; do rm; done",
        "((x++))",
        "for ((i=0; i<3; i++)); do rm; done",
        "ech\\\no x",
        "cat <<EOF",
        "cat <<EOF\nx\n EOF",
        "cat <<-EOF\nx\n  EOF",
        "cat <<EOF\n${x:-$(rm)}\nEOF",
        "cat <<EOF\n$((1+2))\nEOF",
        "cat <<$x\nx\n$x",
        "a=(1 2) ls",
        "{fd}>x ls",
        'echo "${x:-"a b"}"',
        "cat <<A <<B\na\nA\nb\nB",
        "ls <> x",
        'echo "\ud800"',
        "[ a = b ] > out extra",
        "{ ls; } > out extra",
        "if a; then b",
        "(ls",
        'echo "a',
        "ls && ",
    ],
)
def test_what_is_not_understood_is_reported(command):
    assert parse_shell(command, HOME).problems


@pytest.mark.parametrize(
    "command, commands",
    [
        # a comment inside $( … ) runs to the end of the line, ) included
        ("echo $(echo hi # )\nrm -rf ~)", [["echo", "hi"], ["rm", "-rf", HOME], ["echo", None]]),
        ("echo 'x'\"$(ls)\"'$(rm)'", [["ls"], ["echo", None]]),  # the single-quoted one is text
        ("echo a'$(rm)'", [["echo", "a$(rm)"]]),
        ("echo a\\ ; rm", [["echo", "a "], ["rm"]]),
        ("echo > out extra 2>&1 more", [["echo", "extra", "more"]]),  # words after a redirection are arguments
        ("ls | grep x > out y", [["ls"], ["grep", "x", "y"]]),
        ("export A=1 B; unset C", [["export", "A=1", "B"], ["unset", "C"]]),
        ("[ -f 'a b' ] && test -n x", [["[", "-f", "a b", "]"], ["test", "-n", "x"]]),
        ("! ls; time -p ls", [["ls"], ["time", "-p", "ls"]]),
    ],
)
def test_commands_are_read_as_bash_reads_them(command, commands):
    parsed = parse_shell(command, HOME)
    assert parsed.problems == []
    assert [[w.value for w in c.words] for c in parsed.commands] == commands


def test_redirections_are_attached_to_their_command():
    (cmd,) = parse_shell("cat < in > out 2>&1 >&- 3>> log", HOME).commands
    assert [(r.op, r.fd, r.target.value if hasattr(r.target, "value") else r.target) for r in cmd.redirects] == [
        ("<", None, "in"),
        (">", None, "out"),
        (">&", 2, 1),
        (">&", None, None),
        (">>", 3, "log"),
    ]


def test_coproc_is_not_understood():
    assert analyze_command("coproc rm", HOME)[0][0].problems


def test_time_keyword_is_looked_through():
    parsed = parse_shell("time -p git status && ls | time cat", HOME)
    assert parsed.problems == []
    assert [[w.value for w in c.words] for c in parsed.commands] == [
        ["time", "-p", "git", "status"],
        ["ls"],
        ["time", "cat"],
    ]


def test_substitution_spans_follow_bash_quoting():
    assert substitution_spans("a$(b)c`d`") == [(1, 5, "$"), (6, 9, "`")]
    assert substitution_spans("'$(x)'") == []
    assert substitution_spans("$'\\'$(x)'") == []
    assert substitution_spans('"$(echo ")")"') == [(1, 12, "$")]
    assert substitution_spans("$(echo hi # )\nrm)") == [(0, 17, "$")]
    assert substitution_spans("$((1))") is None


def parts(command: str):
    ps, problems = analyze_command(command, HOME)
    return ps, problems


def test_wrappers_are_looked_through():
    ps, _ = parts("FOO=1 timeout -s KILL 5 nice -n 3 env BAR=2 nohup stdbuf -o0 command git status")
    (p,) = ps
    assert [w.value for w in p.words] == ["git", "status"]
    assert len(p.layers) == 7
    assert [n for n, _ in p.assigns] == ["FOO", "BAR"]


def test_shell_strings_are_parsed_again():
    ps, problems = parts("bash -c 'git status; rm -rf x' && sh -c \"ls\"")
    assert problems == []
    assert [[w.value for w in p.words][:2] for p in ps] == [
        ["bash", "-c"],
        ["git", "status"],
        ["rm", "-rf"],
        ["sh", "-c"],
        ["ls"],
    ]
    ps, _ = parts('bash -c "$X"')
    assert ps[0].problems


def test_xargs_and_find_exec_become_parts_of_their_own():
    ps, _ = parts("ls | xargs -0 rm -f")
    assert [w.value for w in ps[1].words] == ["rm", "-f", None]
    ps, _ = parts("find . -name x -exec grep -l y {} + -execdir rm {} \\;")
    assert [[w.value for w in p.words] for p in ps[1:]] == [["grep", "-l", "y", "."], ["rm", None]]


def test_dangers_are_tied_to_the_word_that_causes_them():
    ps, _ = parts("git -c core.pager=x log --output=/tmp/x")
    assert [i for i, _ in ps[0].fx.dangers] == [1, 4]
    ps, _ = parts("sed -n -e p -e 'w /x' f")
    assert [i for i, _ in ps[0].fx.dangers] == [5]
    ps, _ = parts("find . -delete")
    assert [i for i, _ in ps[0].fx.dangers] == [2]


@pytest.mark.parametrize(
    "script, ok",
    [
        ("p", True),
        ("1,5p", True),
        ("$d", True),
        ("/foo/d", True),
        ("s/a/b/g", True),
        ("s|a|b|2", True),
        ("s/a\\/b/c/", True),
        ("1~2p;3q", True),
        ("y/abc/xyz/", True),
        ("1i header", True),
        ("/x/!d", True),
        ("1{p}", True),
        ("w /tmp/x", False),
        ("s/a/b/w /tmp/x", False),
        ("s/a/b/e", False),
        ("1e id", False),
        ("r /etc/shadow", False),
        ("R x", False),
        ("W x", False),
        ("1{w x}", False),
        ("1!w x", False),
        ("s/a/b", False),
        ("F", False),
        ("v", False),
        ("e", False),
    ],
)
def test_sed_scripts(script, ok):
    assert sed_script_ok(script) is ok


def test_read_only_classification():
    ro = {
        c: parts(c)[0][0].fx
        for c in [
            "ls -la",
            "cat a",
            "git status",
            "git log -p",
            "git branch",
            "git branch -a",
            "find . -name x",
            "sort -u a",
            "sed -n 1p a",
            "grep -r x .",
            "rg x",
            "echo hi",
            "tree",
            "date +%s",
        ]
    }
    assert all(fx.readonly and not fx.dangers for fx in ro.values())
    not_ro = [
        parts(c)[0][0].fx
        for c in [
            "find . -delete",
            "sort -o x a",
            "git branch -D x",
            "sed -i s/a/b/ f",
            "git diff --ext-diff",
            "rg --pre sh x",
            "uniq a b",
            "tree -o x",
            "date -s now",
            "git branch new",
            "git config a.b c",
        ]
    ]
    assert all(fx.dangers for fx in not_ro)
    assert not parts("awk '{print}' f")[0][0].fx.readonly
    assert not parts("npm test")[0][0].fx.readonly


# ---------------------------------------------------------------- differential test against bash

FRAGMENTS = [
    "a",
    "b",
    "-x",
    "x=",
    "~/",
    ":~",
    "'q r'",
    '"d q"',
    "\\ ",
    "\\'",
    '\\"',
    "$'\\x41'",
    "$'\\n'",
    "$'\\''",
    '"\\$"',
    '"\\\\"',
    "=",
    "~",
    "%",
    ",",
    "{a}",
    "''",
    '""',
    "\\\\",
    "'#'",
    "x#y",
    "\\;",
    '"$"',
    "@",
    "+",
    ".",
    "/",
    "==",
    "=~",
    "\\\n",
    "#",
    "-",
    "!",
]
SEPARATORS = [" ; ", " && ", "\n", " ;\n", " # c\n", " ;\\\n "]


def random_command(rng: random.Random) -> str:
    cmds = []
    for _ in range(rng.randint(1, 3)):
        ws = ["".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 4))]
        cmds.append("printf '[%s]' " + " ".join(ws))
    out = cmds[0]
    for c in cmds[1:]:
        out += rng.choice(SEPARATORS) + c
    return out


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_words_and_commands_match_what_bash_runs(tmp_path):
    """Run random printf commands in bash and compare each word it received with ours."""
    rng = random.Random(20240611)
    checked = 0
    for _ in range(600):
        command = random_command(rng)
        parsed = parse_shell(command, str(tmp_path))
        if parsed.problems:
            continue
        ws = [c.words for c in parsed.commands]
        if any(w.value is None or w.glob for c in ws for w in c) or any(c[0].value != "printf" for c in ws):
            continue  # (a comment ending in a backslash leaves the next line to start with any word)
        expected = "".join("".join(f"[{w.value}]" for w in c[2:]) if len(c) > 2 else "[]" for c in ws)
        got = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        ).stdout
        assert got == expected, command
        checked += 1
    assert checked > 300


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_here_documents_run_what_bash_runs(tmp_path):
    """Random here-documents (quoted or not, <<-, odd delimiter lines): every command bash runs from
    one is found, or the command is reported as not understood."""
    delims = ["EOF", "EOF", "'EOF'", "'EOF'", '"EOF"', "\\EOF", "E\\OF", "'E'OF", "EOF'", "E$x"]
    run = "printf %s_%s {0} {0} >&2"
    lines = [
        "$(" + run + ")",
        "'$(" + run + ")'",
        "\\$(" + run + ")",
        "\\\\$(" + run + ")",
        "`" + run + "`",
        '"$(' + run + ')"',
        "$'$(" + run + ")'",
        "# $(" + run + ")",
        "$(" + run,
        ")",
        "EOF",
        "\tEOF",
        " EOF",
        "EOF ",
        "EOF\\",
        "x",
        "${{x:-a}}",
        "$x",
        "\\",
        "a\\",
        "x",
        "$x y",
        "a 'b' \"c\"",
    ]
    rng = random.Random(20250101)
    understood = 0
    for _ in range(500):
        body = "\n".join(rng.choice(lines) for _ in range(rng.randint(0, 4))).format("S")
        command = (
            f"cat{rng.choice(['', ' -'])} {rng.choice(['<<', '<<-', '<< '])}{rng.choice(delims)}"
            f"{rng.choice(['', ' | cat', ' > /dev/null', ' && ' + run.format('U'), ';'])}\n{body}\nEOF"
            f"{rng.choice(['', chr(10) + run.format('T'), ' '])}"
        )
        parsed = parse_shell(command, str(tmp_path))
        if parsed.problems:
            continue
        understood += 1
        err = subprocess.run(
            ["bash", "-c", command], cwd=tmp_path, capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}
        ).stderr
        ran = {c for c in "STU" if f"{c}_{c}" in err}
        found = {c.words[2].value for c in parsed.commands if len(c.words) > 2 and c.words[0].value == "printf"}
        assert ran <= found, command
    assert understood > 100  # many are meant to be odd (delimiters that do not match, unbalanced $( )


@pytest.mark.parametrize(
    "command, commands",
    [
        ("cat <<'EOF'\n$(rm -rf ~)\nEOF", [["cat"]]),  # a quoted delimiter: the body is text
        ('cat <<"EOF"\n`rm -rf ~`\nEOF', [["cat"]]),
        ("cat <<\\EOF\n$(rm -rf ~)\nEOF", [["cat"]]),
        ("cat <<EOF\n$(rm -rf ~)\nEOF", [["cat"], ["rm", "-rf", HOME]]),  # unquoted: the body is expanded
        ("cat <<EOF\n'$(rm -rf ~)'\nEOF", [["cat"], ["rm", "-rf", HOME]]),  # quotes are not special there
        ("cat <<-EOF\n\tx `date`\n\tEOF\necho done", [["cat"], ["date"], ["echo", "done"]]),
        ("python3 - <<'PY'\nprint(f\"{x} $(date)\")\nPY", [["python3", "-"]]),
        ("cat <<EOF | sh\nrm -rf ~\nEOF", [["cat"], ["sh"]]),
        ("cat > notes.md <<'EOF'\n# $(title)\nEOF", [["cat"]]),
    ],
)
def test_here_documents(command, commands):
    parsed = parse_shell(command, HOME)
    assert parsed.problems == []
    assert [[w.value for w in c.words] for c in parsed.commands] == commands


def test_the_small_model_profile_python_blocks_are_understood():
    from drivetrain.small.codeact import to_command

    code = 'import os\nx = "$(rm -rf ~)"\nprint(f"{x} `date`", os.listdir("."))\n'
    parsed = parse_shell(to_command("python", code), HOME)
    assert parsed.problems == [] and [[w.value for w in c.words] for c in parsed.commands] == [["python3", "-"]]
