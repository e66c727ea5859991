import json
import re
import sys
from pathlib import Path

root = sys.argv[1]
sys.path.insert(0, root)
import transformer_book
from transformer_book import listings

assert transformer_book.__file__.startswith(root), transformer_book.__file__

ns = {}
exec(
    """
import transformer_book as tb
from transformer_book import *
from transformer_book import attention, masks, positional, layers, models, decoding, training, prompting, embeddings
from transformer_book.embeddings import evaluation
from transformer_book.models import bert, elmo, finetuning
from transformer_book.data import pretraining
from transformer_book.tokenizers.subword import SubwordTokenizer
from transformer_book.models.elmo import BiLM, LSTMCell, ScalarMix
from transformer_book.data.incontext import InContextTask
""",
    ns,
)
out = {}
for nb in sorted(Path(root, "book").glob("[0-9]*.ipynb")):
    for c in json.load(open(nb))["cells"]:
        if c["cell_type"] == "code":
            for m in re.finditer(r"show_source\(([^)]*)\)", "".join(c["source"])):
                name = m.group(1)
                try:
                    obj = eval(name, ns)
                    out[f"{nb.stem[:2]} {name}"] = listings.show_source(obj)._repr_markdown_()
                except Exception as e:
                    out[f"{nb.stem[:2]} {name}"] = f"ERR {e}"
json.dump(out, open(sys.argv[2], "w"))
