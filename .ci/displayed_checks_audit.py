import ast, inspect, json, re, sys, textwrap
from pathlib import Path
root = sys.argv[1] if len(sys.argv) > 1 else "/work/main"
sys.path.insert(0, root)
ns = {}
exec("""
import transformer_book as tb
from transformer_book import *
from transformer_book import attention, masks, positional, layers, models, decoding, training, prompting, embeddings
from transformer_book.embeddings import evaluation
from transformer_book.models import bert, elmo, finetuning
from transformer_book.data import pretraining
from transformer_book.subword import SubwordTokenizer
from transformer_book.models.elmo import BiLM, LSTMCell, ScalarMix
from transformer_book.data.incontext import InContextTask
""", ns)
def is_check(stmt):
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        f = stmt.value.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        base = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else ""
        return "check" in name or base == "checks" or name.startswith("_require")
    if isinstance(stmt, (ast.If, ast.For)):
        raises = any(isinstance(n, ast.Raise) for n in ast.walk(stmt))
        assigns = any(isinstance(n, (ast.Assign, ast.AugAssign, ast.Return, ast.AnnAssign)) for n in ast.walk(stmt))
        return raises and not assigns
    return False
def audit(fn):
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant): body = body[1:]
    lead = 0; i = 0
    while i < len(body) and is_check(body[i]):
        lead += body[i].end_lineno - body[i].lineno + 1; i += 1
    later = sum(s.end_lineno - s.lineno + 1 for s in body[i:] if is_check(s))
    total = sum(s.end_lineno - s.lineno + 1 for s in body)
    return lead, later, total
names = set()
for nb in sorted(Path(root, "book").glob("[0-9]*.ipynb")):
    for c in json.load(open(nb))["cells"]:
        if c["cell_type"] == "code":
            for m in re.finditer(r"show_source\(([^)]*)\)", "".join(c["source"])):
                names.add((nb.stem[:2], m.group(1)))
bad = 0
for ch, name in sorted(names):
    try:
        obj = eval(name, ns)
    except Exception:
        continue
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(obj)))
    except TypeError:
        continue
    node = tree.body[0]
    fns = [node] if not isinstance(node, ast.ClassDef) else [n for n in node.body if isinstance(n, ast.FunctionDef)]
    for fn in fns:
        lead, later, total = audit(fn)
        flag = "" if lead <= 1 and later == 0 else "  <-- FIX"
        bad += bool(flag)
        if flag or "-v" in sys.argv:
            print(f"{ch} {name}{'' if fn is node else '.' + fn.name}: lead {lead}, later {later}, total {total}{flag}")
print("to fix:", bad)
