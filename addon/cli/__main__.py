"""`python -m byok.cli ...` = `cursor-byok ...`."""

import sys

from byok.cli import main

sys.exit(main())
