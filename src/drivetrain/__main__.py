"""``python -m drivetrain``: the same as the ``drivetrain`` command."""

import sys

from drivetrain.cli.main import main

sys.exit(main())
