"""``python run_src.py SRC[:LIB] ARGS…``: drivetrain's CLI from another checkout's ``src/`` (a ``src:`` config),
with a folder of packages after it (a ``lib:`` config: another llama_cpp build), both before the virtualenv's.

Not through PYTHONPATH: set in the CLI's environment, it would reach every shell the agent runs, and the two
sides of a paired comparison would differ by more than their code.
"""

import os
import runpy
import sys

if __name__ == "__main__":
    sys.path[:0] = sys.argv.pop(1).split(os.pathsep)
    runpy.run_module("drivetrain", run_name="__main__", alter_sys=True)
