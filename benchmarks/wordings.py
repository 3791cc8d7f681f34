"""How a user might ask for each task kind: several wordings per kind, in English and in Chinese.

A wording is a ``str.format`` template over the fields the kind's generator makes (file names, identifiers,
values), so every wording of a kind asks for the same work on the same workspace and shares its checker.
The wordings differ in shape, not in a swapped word: a terse imperative, a user describing their situation,
a numbered or structured request, and Chinese as a developer would write it. File names, paths, code and
commands stay ASCII in every language.

``en-1`` of the first fifteen kinds is the one wording they had before, word for word: results recorded
before wordings existed used it, and the small profile was tuned on it. Which wordings are tuned on and
which are held out is decided in ``tasks.split_of``.
"""

from __future__ import annotations

from taskkit import Wording as W

_LINECOUNT = (
    W("en-1", "Count the lines of each .py file in this directory, write the total to {out}, and report the total."),
    W(
        "en-2",
        "I'm trying to get a feel for how big this little project is. Could you figure out how many lines the "
        "Python files here add up to? Please save that number in {out} as well, and let me know what you got.",
    ),
    W(
        "en-3",
        "Please do the following:\n1. Go through every .py file in the current folder and get its line count.\n"
        "2. Add those counts together.\n3. Put the sum in {out} (just the number).\n4. Reply with the sum.",
    ),
    W("zh-1", "帮我统计一下当前目录下所有 .py 文件加起来一共有多少行，把总行数写进 {out}，然后告诉我结果。"),
    W("zh-2", "这个目录里的 Python 代码总共多少行？算好后存到 {out}，顺便回复我这个数。"),
)

WORDINGS: dict[str, tuple[W, ...]] = {
    "linecount": _LINECOUNT,
    "linecount-nowc": _LINECOUNT,
    "todos": (
        W("en-1", "Find every TODO comment in the .py files here and list them in {out}, one per line, as file:line."),
        W(
            "en-2",
            "Before the release I want to see what's still unfinished. The Python files have TODO comments "
            "scattered around; can you collect where each one is into {out}? One entry per line, written like "
            "app.py:42.",
        ),
        W(
            "en-3",
            "Task: inventory the TODO comments.\n- Look in: the .py files in this folder\n- Output file: {out}\n"
            "- Format: one `file:line` entry per line, nothing else",
        ),
        W(
            "zh-1",
            "把这里所有 .py 文件里的 TODO 注释都找出来，写到 {out}，每行一条，格式是 文件名:行号（例如 app.py:12）。",
        ),
    ),
    "fix-test": (
        W(
            "en-1",
            "python3 {test} fails. Find the bug in {module}.py and fix it so the test passes; don't change the test.",
        ),
        W(
            "en-2",
            "When I run python3 {test} I get an assertion error. I'm fairly sure the test itself is right "
            "and the problem is in {module}.py. Can you track it down and fix it? Please leave the test file alone.",
        ),
        W(
            "en-3",
            "1. Run `python3 {test}` and look at how it fails.\n2. Find the bug in {module}.py and fix it.\n"
            "3. Do not edit {test}.\n4. Run the test again to confirm it passes.",
        ),
        W("zh-1", "运行 python3 {test} 会报错。问题出在 {module}.py 里，请修好它，让测试通过。测试文件本身不要改。"),
        W("zh-2", "{test} 跑不过，帮我看看 {module}.py 哪里写错了并修掉（别改测试）。"),
    ),
    "rename": (
        W(
            "en-1",
            "Rename the function {old} to {new} everywhere in this project: its definition and every use. "
            "python3 main.py must still work.",
        ),
        W(
            "en-2",
            "The name {old} doesn't describe what that function does anymore, so I'd like it called {new}. It's "
            "defined in one file and used in a couple of others; please update all of them so that python3 "
            "main.py keeps working.",
        ),
        W(
            "en-3",
            "Refactor:\n1. Rename function `{old}` -> `{new}`.\n2. Update every import and call site in the "
            "project.\n3. Check that `python3 main.py` still runs.",
        ),
        W("zh-1", "把函数 {old} 重命名为 {new}，定义和所有调用的地方都要改，改完后 python3 main.py 要能正常运行。"),
        W("zh-2", "项目里的 {old} 统一改名叫 {new}（定义、import、调用都改），保证 main.py 还能跑。"),
    ),
    "off-by-one": (
        W("en-1", "{func} in {module}.py is off by one. It should {doc}. Please fix it."),
        W(
            "en-2",
            "I think {func} in {module}.py has an off-by-one error: it's supposed to {doc}, but the results are "
            "slightly off at the edges. Could you fix it?",
        ),
        W(
            "en-3",
            "Bug report\nFunction: {func} ({module}.py)\nExpected: it should {doc}\nActual: off by one\n"
            "Please fix the function.",
        ),
        W("zh-1", "{module}.py 里的 {func} 有个差一（off-by-one）错误。它应该{doc_zh}，请修正。"),
    ),
    "create-json": (
        W("en-1", "Create {file} holding a JSON object with exactly these keys and values: {desc}."),
        W(
            "en-2",
            "The deploy script expects a file called {file}. Could you set it up as a JSON object? It should "
            "contain only these keys and values: {desc}.",
        ),
        W(
            "en-3",
            "Create the file {file}. It must be a JSON object with exactly these entries:{desc_lines}\nNo other keys.",
        ),
        W("zh-1", "新建 {file}，内容是一个 JSON 对象，只包含以下键值：{desc_zh}。"),
    ),
    "create-function": (
        W("en-1", "Create {module}.py with a function {func}({params}) that {desc}."),
        W(
            "en-2",
            "I keep rewriting the same helper, so let's put it in a module: please add {module}.py containing "
            "{func}({params}), which {desc}.",
        ),
        W("en-3", "New file: {module}.py\nFunction: {func}({params})\nBehaviour: {desc}"),
        W("zh-1", "新建 {module}.py，在里面写一个函数 {func}({params})，功能是：{desc_zh}。"),
    ),
    "locate": (
        W("en-1", "Which file and line define the function {func}? Answer as path:line."),
        W(
            "en-2",
            "I keep seeing calls to {func} but I can't find where it's actually defined. Where does it live? "
            "Give me the file and line number, like name.py:12.",
        ),
        W("en-3", "Question: where is the function {func} defined?\nAnswer format: path:line"),
        W("zh-1", "函数 {func} 是在哪个文件的第几行定义的？请按 path:line 的格式回答。"),
    ),
    "csv-sum": (
        W("en-1", "Add up the {col} column of {csv}, write the sum to {out}, and tell me what it is."),
        W(
            "en-2",
            "I've got {csv} here and I need to know the total of its {col} column. Can you work it out, put the "
            "figure in {out}, and tell me the number?",
        ),
        W(
            "en-3",
            '1. Open {csv}.\n2. Sum all the values in the "{col}" column.\n3. Save the result to {out}.\n'
            "4. Tell me the result.",
        ),
        W("zh-1", "{csv} 里 {col} 这一列加起来是多少？请把合计写入 {out}，并在回复里告诉我。"),
        W("zh-2", "帮忙算下 {csv} 的 {col} 列总和，结果保存到 {out}，再跟我说一声是多少。"),
    ),
    "config-edit": (
        W("en-1", "In {file}, change {key} to {new}. Leave the other settings as they are."),
        W(
            "en-2",
            "We're moving things around and {key} needs to be {new} now. It's set in {file}; can you update it "
            "there? Please don't touch anything else in that file.",
        ),
        W(
            "en-3",
            "Config change:\n- file: {file}\n- setting: {key}\n- new value: {new}\nEverything else in the file "
            "stays exactly the same.",
        ),
        W("zh-1", "把 {file} 里的 {key} 改成 {new}，其他配置项保持不变。"),
        W("zh-2", "部署环境变了，{key} 现在要用 {new}。这个配置在 {file} 里，帮我改一下，其余的别动。"),
    ),
    "find-files": (
        W(
            "en-1",
            {
                "count": "How many .{ext} files are there in this folder, subfolders included? Write the number to "
                "{out} and tell me.",
                "largest": "Which file is the largest one in this folder (subfolders included)? Write its path to "
                "{out} and tell me which it is.",
            },
        ),
        W(
            "en-2",
            {
                "count": "I need a quick inventory: how many .{ext} files does this project contain, counting the "
                "ones in subdirectories too? Save the count in {out} and tell me what it is.",
                "largest": "Something in this project takes up more space than it should. Can you find the biggest "
                "file, looking in the subdirectories too, put its path in {out}, and tell me which one "
                "it is?",
            },
        ),
        W(
            "en-3",
            {
                "count": "Steps:\n1. Search this folder and all of its subfolders for files ending in .{ext}.\n"
                "2. Count them.\n3. Write the count to {out}.\n4. Report the count.",
                "largest": "Steps:\n1. Look at every file in this folder and its subfolders.\n2. Find the one with "
                "the largest size.\n3. Write its path to {out}.\n4. Tell me which file it is.",
            },
        ),
        W(
            "zh-1",
            {
                "count": "这个文件夹里（包括子文件夹）一共有多少个 .{ext} 文件？把数量写到 {out}，再告诉我。",
                "largest": "找出这个文件夹里（子文件夹也算）体积最大的文件，把它的路径写进 {out}，并告诉我是哪个文件。",
            },
        ),
    ),
    "syntax-fix": (
        W("en-1", "python3 {script} fails with a syntax error. Fix it so the script runs."),
        W(
            "en-2",
            "I tried to run python3 {script} and Python refuses to even start it; it says there's a syntax "
            "error. Can you repair it so the script runs again?",
        ),
        W(
            "en-3",
            "1. Run `python3 {script}`; it stops with a SyntaxError.\n2. Fix the broken line, changing as "
            "little as possible.\n3. Make sure the script runs to the end.",
        ),
        W("zh-1", "python3 {script} 运行时报语法错误，帮我修一下，让脚本能正常跑起来。"),
    ),
    "log-count": (
        W("en-1", "How many {level} lines are in {log}? Write the count to {out} and report it."),
        W(
            "en-2",
            "Our service has been acting up. Could you check {log} and tell me how many {level} entries it has? "
            "Please also leave the number in {out}.",
        ),
        W(
            "en-3",
            "Input: {log}\nCount: lines at level {level}\nWrite the count to: {out}\nThen give me the count in "
            "your reply.",
        ),
        W("zh-1", "统计一下 {log} 里有多少行 {level} 日志，把数量写入 {out}，并告诉我。"),
    ),
    "unique-lines": (
        W("en-1", "Write the lines of {src} to {out} sorted alphabetically, with duplicates removed."),
        W(
            "en-2",
            "{src} has a lot of repeated entries. Can you produce a clean copy in {out}, with every distinct "
            "line once, in alphabetical order?",
        ),
        W(
            "en-3",
            "1. Read {src}.\n2. Drop the duplicate lines.\n3. Sort what is left alphabetically.\n"
            "4. Write the result to {out}.",
        ),
        W("zh-1", "把 {src} 的内容去重并按字母顺序排好，结果写到 {out}。"),
    ),
    "move-function": (
        W(
            "en-1",
            "Move the function {func} out of {app} into a new module {new}.py, and have {app} import it from "
            "there. python3 {app} must print the same as before.",
        ),
        W(
            "en-2",
            "{app} has grown too big. I'd like {func} to live in its own module, {new}.py, with {app} importing "
            "it from there instead of defining it. Running python3 {app} should give exactly the same output "
            "as it does now.",
        ),
        W(
            "en-3",
            "Refactoring steps:\n1. Create {new}.py and move {func} into it.\n2. Delete the definition of {func} "
            "from {app}.\n3. Import {func} in {app} from {new}.\n4. Check that `python3 {app}` prints the same "
            "output as before.",
        ),
        W(
            "zh-1",
            "把 {app} 里的函数 {func} 挪到新模块 {new}.py 中，{app} 改成从 {new} 导入它。改完后 python3 {app} "
            "的输出要和原来完全一样。",
        ),
    ),
    "exact-output": (
        W("en-1", "Make python3 {script} print exactly this line and nothing else:\n{line}"),
        W(
            "en-2",
            "Another tool parses the output of {script}, and it's very strict. Right now the output isn't "
            "what it expects. Could you change the script so that running it prints only this one line, character for "
            "character?\n\n{line}",
        ),
        W(
            "en-3",
            "Requirements for {script}:\n1. The output is a single line.\n2. That line is exactly `{line}`.\n"
            "3. No extra text, punctuation or spaces.",
        ),
        W("zh-1", "修改 {script}，让 python3 {script} 只输出下面这一行，一个字符都不能差：\n{line}"),
        W("zh-2", "{script} 的输出格式不对。我需要它运行后只打印一行，内容必须和 `{line}` 完全一致。"),
        # written when zh-1 moved to tune (docs/benchmarks.md, "Moved to tune"): held out in its place
        W(
            "zh-3",
            "下游程序会解析 {script} 的输出，可现在格式对不上。请改一下这个脚本，运行后应当只输出：\n\n{line}\n\n"
            "多一个空格或者标点都不行。",
        ),
    ),
    "pytest-fix": (
        W("en-1", "The pytest suite fails. Fix {module}.py so that the tests pass; do not change the tests."),
        W(
            "en-2",
            "CI went red on this repo: pytest reports failures in {test}. The tests are correct; the bug is in "
            "{module}.py. Can you fix the code so pytest passes again?",
        ),
        W(
            "en-3",
            "1. Run the tests with pytest.\n2. Find out why {test} fails.\n3. Fix {module}.py (leave the tests "
            "as they are).\n4. Run pytest again and make sure everything passes.",
        ),
        W("zh-1", "用 pytest 跑测试有用例失败。测试本身没问题，请修改 {module}.py 让所有测试通过，不要改测试文件。"),
        W(
            "zh-3",
            "CI 挂了：pytest 报 {test} 里有测试没过。测试是对的，问题出在 {module}.py，麻烦修一下让 pytest 重新通过。",
        ),
    ),
    "dedupe-order": (
        W(
            "en-1",
            "Remove the duplicate lines from {file}, keeping the first occurrence of each line in its original place.",
        ),
        W(
            "en-2",
            "{file} ended up with some lines repeated. Could you clean it up so each line appears only once? "
            "The order matters, so keep each line where it first appears.",
        ),
        W(
            "en-3",
            "Edit {file} in place:\n- delete every line that already appeared earlier in the file\n"
            "- keep all other lines in their current order",
        ),
        W("zh-1", "{file} 里有重复的行，帮我去掉重复，每行只保留第一次出现的那一条，原来的顺序不要变。"),
    ),
    "data-stat": (
        W("en-1", "Compute {stat} in {data}, write it to {out}, and tell me the value."),
        W(
            "en-2",
            "I'm putting together a quick summary from {data}. What is {stat}? Please save the number in {out} too.",
        ),
        W(
            "en-3",
            "1. Load the records from {data}.\n2. Work out {stat}.\n3. Write just that number to {out}.\n"
            "4. Report the number in your answer.",
        ),
        W("zh-1", "根据 {data} 里的数据，算出 {stat_zh}，把结果写入 {out}，并告诉我是多少。"),
        W("zh-2", "{data} 中 {stat_zh}是多少？结果存到 {out}，回复里也写一下。"),
    ),
    "run-question": (
        W("en-1", "What does {call} return? The function is in {module}.py."),
        W(
            "en-2",
            "I'm reviewing {module}.py and I can't work out in my head what {call} would give back. Can you find "
            "out what it returns?",
        ),
        W(
            "en-3",
            "Question about {module}.py:\n- call: {call}\n- what is the return value?\nDo not change the module.",
        ),
        W("zh-1", "{module}.py 里调用 {call}，返回值是什么？"),
        W("zh-3", "帮我看看 {module}.py 里的 {call} 会返回什么。"),  # held out in place of zh-1 (moved to tune)
        # written when zh-3 moved to tune (2026-12-04): held out in its place
        W("zh-4", "同事问我 {call} 的结果是多少，代码在 {module}.py。请实际运行一下，把返回值告诉我，不要改代码。"),
    ),
    "readonly-question": (
        W(
            "en-1",
            {
                "functions": "How many functions are defined in {module}.py? Do not modify any file.",
                "setting": "What is {key} set to in {file}? Do not modify any file.",
            },
        ),
        W(
            "en-2",
            {
                "functions": "Just a question, no changes please: how many functions does {module}.py define? "
                "Don't edit or create any files.",
                "setting": "Quick question, and please don't change anything: what value does {file} give for {key}?",
            },
        ),
        W(
            "en-3",
            {
                "functions": "Read-only task (do not create, edit or delete files).\nQuestion: the number of "
                "functions defined in {module}.py.",
                "setting": "Read-only task (do not create, edit or delete files).\nQuestion: the value of {key} "
                "in {file}.",
            },
        ),
        W(
            "zh-1",
            {
                "functions": "{module}.py 里一共定义了几个函数？只需要回答，不要修改任何文件。",
                "setting": "{file} 里 {key} 的值是什么？只回答问题，不要改动任何文件。",
            },
        ),
        W(
            "zh-2",
            {
                "functions": "在不改任何文件的前提下，告诉我 {module}.py 定义了多少个函数。",
                "setting": "在不改任何文件的前提下，告诉我 {file} 中 {key} 的值。",
            },
        ),
    ),
    # the fresh kinds (split "fresh", tasks.FRESH): written for issue #44, never tuned on
    "config-migrate": (
        W(
            "en-1",
            "{app} now reads its settings from {new} instead of {old}. Migrate the settings from {old} into {new}, "
            "in the new format, so that python3 {app} starts.",
        ),
        W(
            "en-2",
            "We moved the service to a new config format and now python3 {app} crashes because {new} doesn't exist "
            "yet. All the old values are in {old}, and the new format is described at the top of {app}. Could you "
            "carry the settings over?",
        ),
        W(
            "zh-1",
            "{app} 现在改成从 {new} 读取配置，不再读 {old} 了。"
            "请把 {old} 里的配置按新格式迁移到 {new}，保证 python3 {app} 能正常启动。",
        ),
        W(
            "zh-2",
            "升级之后 python3 {app} 启动报错，因为缺少 {new}。旧配置都在 {old} 里，"
            "新格式的说明写在 {app} 文件开头。帮我把配置迁过去，值别改。",
        ),
    ),
    "cli-arg": (
        W(
            "en-1",
            "Running `{command}` fails with an error from {script}. Fix {script} so that this exact command works.",
        ),
        W(
            "en-2",
            "I'm trying to run {command} but the script just exits with a usage error. The data file is fine, I "
            "checked. Can you change {script} so the command I'm running goes through?",
        ),
        W("zh-1", "运行 `{command}` 时 {script} 报参数错误。请修改 {script}，让这条命令能正常运行。"),
        W(
            "zh-2",
            "我执行 {command} 直接报错退出了，数据文件没问题，"
            "应该是 {script} 的参数处理有问题。帮我改一下脚本，让这条命令能跑通。",
        ),
    ),
    "regex-fix": (
        W(
            "en-1",
            "The regular expression in {func} ({module}.py) is wrong, so python3 {test} fails. Fix {func}; don't "
            "change the test.",
        ),
        W(
            "en-2",
            "python3 {test} started failing, and I think the regex inside {func} in {module}.py doesn't match what "
            "it should. Could you fix the pattern so the test passes? Please leave {test} as it is.",
        ),
        W(
            "zh-1",
            "{module}.py 里 {func} 用的正则表达式写错了，导致 python3 {test} 失败。请修正 {func}，不要改测试文件。",
        ),
        W("zh-2", "python3 {test} 跑不过，我怀疑是 {func} 里的正则有问题（在 {module}.py）。帮忙修一下，测试别动。"),
    ),
    "join-data": (
        W(
            "en-1",
            "Join {people} with {events} (the {key} field refers to a row's id) and write {out}: a header line "
            "name,total, then one line per person in {people} with the sum of their {field} values (0 if they have "
            "none), sorted by name.",
        ),
        W(
            "en-2",
            "I need a quick summary for finance. {people} lists everyone and {events} has the individual records, "
            "linked through {key}. Can you put together {out} with the columns name,total? Everyone from {people} "
            "should be in it, with the total of their {field} (0 for people with no records), ordered by name.",
        ),
        W(
            "zh-1",
            "把 {people} 和 {events} 关联起来（{events} 里的 {key} 对应 {people} 的 id），生成 {out}：第一行是表头 "
            "name,total，之后每人一行，total 是这个人所有记录的 {field} 之和（没有记录的写 0），按 name 排序。",
        ),
        W(
            "zh-2",
            "帮我汇总一下：{people} 是名单，{events} 是明细，用 {key} 关联。结果输出到 {out}，表头 name,total，"
            "名单里每个人都要有（没有明细的填 0），total 是 {field} 的合计，按名字排序。",
        ),
    ),
    "markdown-table": (
        W(
            "en-1",
            'Add the option {option} (default {default}, description "{desc}") to the options table in {file}, '
            "keeping the table in alphabetical order. Don't change anything else.",
        ),
        W(
            "en-2",
            "We just added a {option} flag to the tool and the docs need to catch up. In {file}, could you add it to "
            "the Options table? The default is {default}, and the description can be: {desc}. The table is sorted "
            "alphabetically, so please put it in the right spot and leave the rest of the file alone.",
        ),
        W(
            "zh-1",
            '在 {file} 的 Options 表格里加一行：选项 {option}，默认值 {default}，说明写 "{desc}"。表格按字母顺序排列，'
            "插到正确的位置，其他内容不要动。",
        ),
        W(
            "zh-2",
            "新加了 {option} 参数（默认 {default}），文档还没更新。"
            "帮我在 {file} 的选项表里补上这一行，说明用：{desc}。注意保持字母顺序，别改其他地方。",
        ),
    ),
    "html-edit": (
        W(
            "en-1",
            'Add a link "{text}" pointing to {href} to the navigation in {file}, right after the "{after}" link, '
            "in the same style as the others. Change nothing else.",
        ),
        W(
            "en-2",
            "We're launching a {text} page. Could you add it to the nav menu in {file}? It should link to {href} and "
            "come directly after {after}. Please match how the other menu items are written and don't touch the rest "
            "of the page.",
        ),
        W(
            "zh-1",
            '在 {file} 的导航栏里加一个链接：文字 "{text}"，地址 {href}，'
            '放在 "{after}" 后面，写法和其他菜单项保持一致。其他内容不要改。',
        ),
        W(
            "zh-2",
            "{file} 的导航菜单需要新增一项 {text}（链接到 {href}），"
            "位置紧跟在 {after} 之后。格式照着现有的菜单项来，页面其他部分别动。",
        ),
    ),
    "write-test": (
        W(
            "en-1",
            "Write a test script {test} for {func} in {module}.py. It should check every behaviour the docstring of "
            "{func} describes, pass with python3 {test}, and fail if any of them breaks. Don't change {module}.py.",
        ),
        W(
            "en-2",
            "Nobody ever wrote tests for {func} ({module}.py) and I'd like to refactor it safely. Could you add "
            "{test}, a plain script I can run with python3 {test}, that exits with an error as soon as {func} stops "
            "doing what its docstring says? Edge cases included, please, and leave the module itself alone.",
        ),
        W(
            "zh-1",
            "给 {module}.py 里的 {func} 写一个测试脚本 {test}：docstring 里说明的每一条行为都要测到，"
            "用 python3 {test} 运行时要通过，任何一条行为被改坏时要报错。不要修改 {module}.py。",
        ),
        W(
            "zh-2",
            "{func}（在 {module}.py）一直没有测试，我想放心地重构它。帮我写个 {test}，直接 python3 {test} 就能跑，"
            "{func} 只要偏离 docstring 的描述（包括边界情况）就要失败。模块本身别改。",
        ),
    ),
}
