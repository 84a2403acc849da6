"""``python -m tether.cli``: the same as the ``tether`` command."""

import sys

from tether.cli import main

sys.exit(main())
