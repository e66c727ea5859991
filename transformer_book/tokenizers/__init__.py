"""The book's tokenizers, from words to bytes: one module each.

* :mod:`~transformer_book.tokenizers.text`: words and vocabularies (chapters 1, 10-12);
* :mod:`~transformer_book.tokenizers.subword`: SentencePiece BPE and the special ids of the
  translators and GPTs (chapters 7-9);
* :mod:`~transformer_book.tokenizers.wordpiece`: BERT's WordPiece (chapters 13-15);
* :mod:`~transformer_book.tokenizers.bytebpe`: GPT-2's byte-level BPE, no unknown token (chapter 16).

Each follows :class:`~transformer_book.contracts.Tokenizer`; import the one you need from its module.
"""
