"""``python run_src.py SRC ARGS…``: drivetrain's CLI from another checkout's ``src/`` (a ``src:`` config).

Not through PYTHONPATH: set in the CLI's environment, it would reach every shell the agent runs, and the two
sides of a paired comparison would differ by more than their code.
"""

import runpy
import sys

if __name__ == "__main__":
    sys.path.insert(0, sys.argv.pop(1))
    runpy.run_module("drivetrain", run_name="__main__", alter_sys=True)
