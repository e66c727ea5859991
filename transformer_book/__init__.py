"""transformer_book: the companion package of the executable Transformer textbook.

Modules, one idea each (import what a chapter needs)::

    transformer_book.runtime      device, seeds, profiles, environment
    transformer_book.listings     the package's own code, shown in a chapter (show_source)
    transformer_book.tokenizers   text        word tokenisation and vocabularies
                                  subword     BPE subword tokeniser (SentencePiece), special ids (ch. 7-)
                                  wordpiece   BERT's WordPiece tokeniser                   (ch. 13-)
                                  bytebpe     GPT-2's byte-level BPE, no unknown token      (ch. 16)
    transformer_book.contracts    what data and models share: IGNORE_INDEX, padding, batch
                                  types, the tokenizer / encoder-decoder / LM interfaces
    transformer_book.data         pinned, checksummed corpora, their loaders, batching
    transformer_book.atomic       files written whole or not at all
    transformer_book.checkpoints  checksummed checkpoints; save_model / load_model of every model
    transformer_book.attention    scaled dot-product and multi-head attention    (ch. 1, 3)
    transformer_book.tiled_attention  online softmax, tiled (FlashAttention) attention, its
                                  peak memory                                    (ch. 17)
    transformer_book.grouped_attention  grouped- and multi-query attention, KV-cache size (ch. 17-18)
    transformer_book.masks        padding, causal and combined masks (True = excluded) (ch. 2)
    transformer_book.positional   sinusoidal, learned, relative, rotary, ALiBi, Fourier (ch. 4, 13)
    transformer_book.layers       LayerNorm, FFN, encoder and decoder layers     (ch. 5-6)
    transformer_book.modern_layers  RMSNorm, SwiGLU, the modern decoder block     (ch. 18)
    transformer_book.models       the Transformer (ch. 6), RNN baselines (ch. 7), GPT (ch. 9),
                                  ELMo (ch. 12), BERT (ch. 13), fine-tuning heads (ch. 14),
                                  the modern GPT (ch. 18)
    transformer_book.twins        torch.nn twins with copied weights, for checks
    transformer_book.objectives   label-smoothed cross-entropy, seq2seq and LM losses (ch. 7, 9)
    transformer_book.schedules    warm-up learning-rate schedules                (ch. 7)
    transformer_book.training     the resumable fit loop (AMP, compile, DDP)     (ch. 7-)
    transformer_book.flops        a GPT's training FLOPs and MFU                 (ch. 9)
    transformer_book.scaling      scaling laws: the Chinchilla fit, the compute-optimal
                                  frontier                                       (ch. 19)
    transformer_book.lora         low-rank adaptation: LoRALinear, apply, merge  (ch. 20)
    transformer_book.decoding     greedy, sampling, beam search, with a KV cache (ch. 7-9)
    transformer_book.metrics      BLEU and chrF (sacrebleu), BLEU by source length (ch. 7-),
                                  SQuAD's exact match and F1 (ch. 14)
    transformer_book.recipes      the training recipes of chapter 7's translators, chapter 9's GPT
                                  and chapter 13's BERT; their models loaded or trained
    transformer_book.quantization the 4- and 8-bit blocks of GGUF files (Q4_1, Q8_0)    (ch. 18)
    transformer_book.pretrained   real checkpoints: a catalogue with pinned hashes, fetched offline
                                  first; all-MiniLM-L6-v2 in the book's BERT; Hugging Face BERT and
                                  GPT-2 weights by name mapping                  (ch. 13-15, 20)
    transformer_book.prompting    zero-shot cloze and next-token classification (ch. 15)
    transformer_book.incontext    in-context learning in a small GPT            (ch. 15)
    transformer_book.embeddings   co-occurrence, PPMI, SVD, GloVe, word2vec      (ch. 1, 10-11)
    transformer_book.results      headline numbers of full-profile runs (the Results page)
    transformer_book.plotting     attention heatmaps

Importing the package downloads nothing and changes no global state.
"""

__version__ = "0.1.0"
