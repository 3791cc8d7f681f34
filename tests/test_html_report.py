"""``drivetrain report SESSION_ID --html``: a session run against the scripted server, its report written by the
real CLI, and the page rendered by a real headless Chromium to check the chart was drawn."""

import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

import cli_process
from drivetrain import Agent, tool
from drivetrain.models.anthropic import AnthropicModel
from drivetrain.sessions.file import FileStore
from drivetrain.sessions.html import turns_from_records
from drivetrain.testing import ScriptedServer, reply, respond, tool_call
from test_cli import DRIVETRAIN

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs chromium (Debian package chromium)")


@tool
def note(text: str) -> str:
    """Write a note down."""
    return f"noted {text}"


def usage(i: int, o: int, w: int, r: int) -> dict:
    return {"input_tokens": i, "output_tokens": o, "cache_creation_input_tokens": w, "cache_read_input_tokens": r}


# the context each turn sends grows (cache reads), and turn 3 repeats turn 2's call
USAGES = [
    usage(1500, 80, 3000, 0),
    usage(400, 60, 900, 3000),
    usage(300, 50, 800, 3900),
    usage(200, 70, 700, 4700),
    usage(100, 40, 0, 5400),
]
CALLS = [("note", {"text": "a"}), ("note", {"text": "b"}), ("note", {"text": "b"}), ("note", {"text": "c"})]


TASK = "note a, b and c <script>alert(1)</script>"  # shown escaped, never run


def sonnet_cost(u):  # claude-sonnet-4-6: 3, 15, 3.75, 0.30 USD per million tokens
    return (
        u["input_tokens"] * 3
        + u["output_tokens"] * 15
        + u["cache_creation_input_tokens"] * 3.75
        + u["cache_read_input_tokens"] * 0.30
    ) / 1e6


async def make_session() -> str:
    steps = [respond([tool_call(name, args)], usage=u) for (name, args), u in zip(CALLS, USAGES)]
    steps.append(reply("All noted.", usage=USAGES[-1]))
    with ScriptedServer(steps) as server:
        model = AnthropicModel.from_env(
            "claude-sonnet-4-6", {"ANTHROPIC_BASE_URL": server.url, "ANTHROPIC_API_KEY": "k"}, backoff=0.01
        )
        run = Agent(model=model, tools=[note], strict=True, store=FileStore()).start(TASK)
        result = await run.finish()
    assert result.subtype == "success" and result.num_turns == 5
    return run.session_id


async def test_turns_come_from_the_session_records():
    sid = await make_session()
    turns = turns_from_records(FileStore().read(sid))
    assert [t.turn for t in turns] == [1, 2, 3, 4, 5]
    assert [t.stop_reason for t in turns] == ["tool_use"] * 4 + ["end_turn"]
    assert [[(c.name, c.input) for c in t.calls] for t in turns] == [[c] for c in CALLS] + [[]]
    assert [[c.repeated for c in t.calls] for t in turns] == [[False], [False], [True], [False], []]
    assert [t.context_tokens for t in turns] == [4500, 4300, 5000, 5600, 5500]
    assert [t.cost_usd for t in turns] == pytest.approx([sonnet_cost(u) for u in USAGES])
    assert turns[-1].cumulative_cost_usd == pytest.approx(sum(map(sonnet_cost, USAGES)))


def write_report(sid: str, out: Path) -> str:
    proc = cli_process.run(
        [DRIVETRAIN, "report", sid, "--html", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    return out.read_text()


async def test_report_is_one_self_contained_page(tmp_path):
    sid = await make_session()
    page = write_report(sid, tmp_path / "out.html")
    assert sid in page and "claude-sonnet-4-6" in page
    assert "note a, b and c &lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert page.count("class='ctx-bar'") == 5 and "id='cost-line'" in page and "↻ repeated" in page
    # nothing to fetch: no scripts, stylesheets, images or links; the only URL is the SVG namespace
    assert not re.search(r"<(script|link|img|iframe)\b|\b(src|href)=|@import|url\(", page)
    assert set(re.findall(r"https?://[^\s'\"]+", page)) == {"http://www.w3.org/2000/svg"}
    assert f"${sum(map(sonnet_cost, USAGES)):.4f}" in page


def test_report_of_an_unknown_session_says_so(tmp_path):
    proc = cli_process.run(
        [DRIVETRAIN, "report", "no-such-session", "--html", str(tmp_path / "x.html")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and "no-such-session" in proc.stderr and not (tmp_path / "x.html").exists()


# measures the drawn chart in the browser and writes the numbers into the DOM, for --dump-dom to read back
MEASURE = """<script>
const box = e => { const b = e.getBBox(); return [b.x, b.y, b.width, b.height]; };
const out = {bars: [...document.querySelectorAll('#chart .ctx-bar')].map(box),
             line: box(document.querySelector('#chart #cost-line')),
             svg: document.querySelector('#chart').getBoundingClientRect().toJSON()};
const pre = document.createElement('pre'); pre.id = 'measured'; pre.textContent = JSON.stringify(out);
document.body.appendChild(pre);
</script>"""


def chromium(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            "--hide-scrollbars",
            "--no-first-run",
            "--disable-dev-shm-usage",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@needs_chromium
async def test_chromium_draws_the_chart(tmp_path):
    sid = await make_session()
    page = write_report(sid, tmp_path / "report.html")
    measured_page = tmp_path / "measured.html"
    measured_page.write_text(page.replace("</body>", MEASURE + "</body>"))
    proc = chromium(f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", measured_page.as_uri())
    found = re.search(r'<pre id="measured">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"the page's script did not run: {proc.stderr[-2000:]}"
    m = json.loads(found.group(1).replace("&quot;", '"'))
    bars = m["bars"]
    assert len(bars) == 5 and all(w > 1 and h > 1 for _, _, w, h in bars)
    # the bars' heights follow the context sizes, the tallest filling the plot
    contexts = [4500, 4300, 5000, 5600, 5500]
    heights = [h for *_, h in bars]
    assert [round(h / max(heights), 3) for h in heights] == [round(c / max(contexts), 3) for c in contexts]
    assert [x for x, *_ in bars] == sorted(x for x, *_ in bars)  # left to right by turn
    _x, _y, w, h = m["line"]
    assert w > 100 and h > 10  # the cumulative cost line spans the turns and rises
    assert m["svg"]["width"] > 500 and m["svg"]["height"] > 200

    shot = tmp_path / "shot.png"
    chromium(
        f"--user-data-dir={tmp_path / 'profile2'}",
        "--window-size=1000,1200",
        f"--screenshot={shot}",
        (tmp_path / "report.html").as_uri(),
    )
    width, height, pixels = read_png(shot.read_bytes())
    svg = m["svg"]  # the chart's area in the screenshot: count the bars' and the line's colours there
    area = [
        pixels[yy][xx]
        for yy in range(int(svg["top"]), min(height, int(svg["bottom"])))
        for xx in range(int(svg["left"]), min(width, int(svg["right"])))
    ]
    blue = sum(1 for p in area if near(p, (0x7A, 0xA6, 0xD6)))
    red = sum(1 for p in area if near(p, (0xD9, 0x53, 0x4F)))
    assert blue > 5000, f"the context bars are not on the screenshot ({blue} px)"
    assert red > 200, f"the cost line is not on the screenshot ({red} px)"


def near(p, rgb, tolerance=12):
    return all(abs(a - b) <= tolerance for a, b in zip(p, rgb))


def read_png(data: bytes):
    """(width, height, rows of (r, g, b)) of an 8-bit RGB or RGBA, non-interlaced PNG, as Chromium writes."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        chunk = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for r in range(height):
        f, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1 : (r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i : i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return width, height, rows


def test_png_reader_reads_what_it_is_given():
    # a 2x1 RGB PNG, filter 0: one red pixel, one blue one
    raw = zlib.compress(b"\x00" + bytes([255, 0, 0, 0, 0, 255]))

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 1, 8, 2, 0, 0, 0)) + chunk(b"IDAT", raw)
    assert read_png(png) == (2, 1, [[(255, 0, 0), (0, 0, 255)]])
    assert os.environ.get("DRIVETRAIN_HOME")  # the report's store is the test's own home (conftest)
