"""The same module as :mod:`transformer_book.recipes.bert` (its name before the recipes had a
package of their own; the chapters that still import it keep working)."""

import sys

from transformer_book.recipes import bert as _recipe

sys.modules[__name__] = _recipe
