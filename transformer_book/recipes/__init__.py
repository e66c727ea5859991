"""The book's trained models as recipes: every choice of a training run in one dataclass, and one
call that a later chapter makes to get the model a chapter trained.

* :mod:`~transformer_book.recipes.translator`: chapter 7's German-to-English Transformers
  (Multi30k and Tatoeba), used again by chapters 8 and 12;
* :mod:`~transformer_book.recipes.gpt`: chapter 9's GPT language models, the ten-minute Tiny
  Shakespeare model for a later chapter;
* :mod:`~transformer_book.recipes.bert`: chapter 13's small BERT and the compute study that
  chose it, used again by chapters 14 and 15.

Each module has the same small interface: a frozen dataclass ``Recipe`` (every choice of a
training run; ``Recipe.model_config(vocab_size)`` is its model's typed configuration, and the
model's sizes are typed fields, never a dict: a ``Sizes`` preset in the translator's and the GPT's,
the recipe's own in BERT's), and five functions: ``recipe(...)``, the chapter's
recipe for the profile; ``train(...)``; ``checkpoint_path(profile=None, ...)``, the file named after
the chapter and the profile; ``save(...)``, which writes the model with
:func:`~transformer_book.checkpoints.save_model`; and ``load_or_train(...)`` beside it, which reads
that file back through :func:`load_or_train` (here, shared) when it is there, else trains the
model and saves it, so that every chapter still runs on its own.
"""

from transformer_book.recipes.loading import checkpoint_file, load_or_train

__all__ = ["checkpoint_file", "load_or_train"]
