"""`python -m shardrec_train ...` is the `shardrec` command."""

import sys

from shardrec_train.cli import main

sys.exit(main())
