"""Write tests/durations.txt from a whole run's junit XML: each test file's seconds (setup, call and teardown of
its tests), longest first. conftest.py starts the files in that order.

    python -m pytest -q --junitxml=/tmp/run.xml && python tests/durations.py /tmp/run.xml
"""

import collections
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HEADER = (
    "# Seconds each test file took (setup, call and teardown of its tests) in a whole run (4 workers, 2 cores); conftest.py\n"
    "# starts the longest first. Made from a run's junit XML: see tests/durations.py.\n"
)


def main(junit_xml: str) -> None:
    seconds: collections.Counter[str] = collections.Counter()
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")  # tests.test_x or tests.test_x.TestClass
        seconds[f"{module[0]}/{module[1]}.py"] += float(case.get("time", "0"))
    lines = "".join(f"{t:.1f} {path}\n" for path, t in seconds.most_common())
    (Path(__file__).parent / "durations.txt").write_text(HEADER + lines)


if __name__ == "__main__":
    main(sys.argv[1])
