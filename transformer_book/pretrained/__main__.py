"""``python -m transformer_book.pretrained [list | fetch [NAME ...]]``: the catalogue, or fetch checkpoints."""

import sys

from transformer_book.pretrained.catalogue import _cli

raise SystemExit(_cli(sys.argv[1:]))
