"""transformer_book: the companion package of the executable Transformer textbook.

Modules, one idea each (import what a chapter needs)::

    transformer_book.attention    scaled dot-product and multi-head attention    (ch. 1, 3)
    transformer_book.masks        padding, causal and combined masks (True = excluded) (ch. 2)
    transformer_book.positional   sinusoidal, learned, relative, rotary, Fourier (ch. 4)
    transformer_book.layers       LayerNorm, FFN, encoder and decoder layers     (ch. 5-6)
    transformer_book.models       the Transformer (ch. 6), RNN baselines (ch. 7), GPT (ch. 9),
                                  ELMo (ch. 12), BERT (ch. 13), fine-tuning heads (ch. 14)
    transformer_book.twins        torch.nn twins with copied weights, for checks
    transformer_book.training     loss, schedules, the fit loop, resumable checkpoints (ch. 7-)
    transformer_book.decoding     greedy decoding of a batch, translate()        (ch. 7-)
    transformer_book.metrics      BLEU and chrF (sacrebleu), BLEU by source length (ch. 7-),
                                  SQuAD's exact match and F1 (ch. 14)
    transformer_book.small_bert   chapter 13's BERT, loaded or pretrained     (ch. 14-15)
    transformer_book.pretrained   Hugging Face BERT and GPT-2 weights in the book's models (ch. 15)
    transformer_book.prompting    zero-shot cloze and next-token classification (ch. 15)
    transformer_book.results      headline numbers of full-profile runs (the Results page)
    transformer_book.runtime      device, seeds, profiles, environment, sources
    transformer_book.plotting     attention heatmaps
    transformer_book.text         word tokenisation and vocabularies
    transformer_book.subword      BPE subword tokeniser (SentencePiece), special ids (ch. 7-)
    transformer_book.wordpiece    BERT's WordPiece tokeniser                   (ch. 13-)
    transformer_book.embeddings   co-occurrence counts, PPMI, SVD word vectors   (ch. 1, 10)
    transformer_book.data         pinned, checksummed corpora, their loaders, batching

Importing the package downloads nothing and changes no global state.
"""

__version__ = "0.1.0"
