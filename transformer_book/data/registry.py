"""The catalogue of corpora used by the book: where each file lives, its checksum and its licence.

Every file is pinned to one git commit of one public GitHub repository and to its sha256, so
the bytes a reader gets are exactly the bytes the book was run on.
"""

from __future__ import annotations

from dataclasses import dataclass


class UnknownCorpusError(KeyError, ValueError):
    """Raised by :func:`get_corpus` for a name that is not in :data:`CORPORA`."""

    def __str__(self) -> str:  # KeyError would otherwise quote the whole message
        return str(self.args[0]) if self.args else ""


class UnknownFileError(KeyError, ValueError):
    """Raised by :meth:`Corpus.file` for a file name the corpus does not have."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _check_path_part(value: object, what: str) -> None:
    """A corpus or file name becomes one folder or file name in the cache: refuse one that
    would lead elsewhere (``../x``, ``a/b``, an absolute path) or name no file (``""``, ``.``)."""
    if (
        not isinstance(value, str)
        or value in ("", ".", "..")
        or "/" in value
        or "\\" in value
        or "\0" in value
        or value != value.strip()
    ):
        raise ValueError(f"{what} must be a plain file name (no '/', '\\', '..' or surrounding spaces), got {value!r}")


@dataclass(frozen=True)
class RemoteFile:
    """One downloadable file.

    ``name`` is the local file name (inside the corpus folder), ``url`` the pinned upstream
    address, ``sha256`` the hex digest of the exact bytes and ``size`` the length in bytes.
    """

    name: str
    url: str
    sha256: str
    size: int | None

    def __post_init__(self) -> None:
        _check_path_part(self.name, "RemoteFile: name")


@dataclass(frozen=True)
class Corpus:
    """A named data set: provenance, licence, citation and its files.

    ``citation`` is a BibTeX key of the book's bibliography; ``attribution`` is the credit
    line the licence requires (``""`` when none is required).
    """

    name: str
    description: str
    licence: str
    citation: str
    attribution: str
    homepage: str
    files: tuple[RemoteFile, ...]

    def __post_init__(self) -> None:
        _check_path_part(self.name, "Corpus: name")

    @property
    def file_names(self) -> tuple[str, ...]:
        """The local names of this corpus's files, in catalogue order."""
        return tuple(remote.name for remote in self.files)

    def file(self, name: str) -> RemoteFile:
        """Return the file called ``name``.

        Raises:
            UnknownFileError: no such file (a KeyError); the message lists the available ones.
        """
        for remote in self.files:
            if remote.name == name:
                return remote
        raise UnknownFileError(
            f"corpus {self.name!r} has no file {name!r}; available files: " + ", ".join(self.file_names)
        )


def _raw(repository: str, commit: str, path: str) -> str:
    """GitHub's raw-file address of ``path`` in ``repository`` ("owner/name") at ``commit``."""
    return f"https://raw.githubusercontent.com/{repository}/{commit}/{path}"


_CHAR_RNN = ("karpathy/char-rnn", "6f9487a6fe5b420b7ca9afb0d7c078e37c1d1b4e")
_RANDOM_WORDS = ("ReliableDragon/RandomWords", "0d2d0f29a675c0ab78286381b4a279a7ce067feb")
_TRANSLATION = ("rioyshky/translation", "de48b7027f7318d77010a6e08ed928c10748c23d")
_MULTI30K = ("multi30k/dataset", "a3d2e0d26b56f3846f66a952536ffed4e401d05a")
_PYTORCH_EXAMPLES = ("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8")
_AUTOPROMPT = ("eyalbd2/Reproducing-AutoPrompt", "6288fb5bec9c572f2492875ae0111df5b6daed11")

_MULTI30K_FILES = (
    ("train.de.gz", "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6", 637044),
    ("train.en.gz", "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f", 568929),
    ("val.de.gz", "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a", 24681),
    ("val.en.gz", "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28", 21650),
    ("test_2016_flickr.de.gz", "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8", 22890),
    ("test_2016_flickr.en.gz", "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9", 21077),
)

_CORPUS_LIST = (
    Corpus(
        name="tinyshakespeare",
        description="Tiny Shakespeare: ~1.1 MB of Shakespeare's plays, 65 distinct characters (Karpathy's char-rnn).",
        licence="Public-domain text (Shakespeare); the char-rnn repository is MIT.",
        citation="karpathy2015charrnn",
        attribution="",
        homepage="https://github.com/karpathy/char-rnn",
        files=(
            RemoteFile(
                "input.txt",
                _raw(*_CHAR_RNN, "data/tinyshakespeare/input.txt"),
                "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
                1115394,
            ),
        ),
    ),
    Corpus(
        name="odyssey",
        description="Homer's Odyssey, tr. Samuel Butler (1900), Project Gutenberg eBook #1727, "
        "with the Gutenberg header and licence (use load_odyssey() for the clean text).",
        licence="Public domain (Butler died 1902); the Gutenberg header and licence are removed by the loader.",
        citation="butler1900odyssey",
        attribution="",
        homepage="https://www.gutenberg.org/ebooks/1727",
        files=(
            RemoteFile(
                "odyssey_pg1727.txt",
                _raw(*_RANDOM_WORDS, "sources/classics/odyssey.txt"),
                "aa99c1d597c030db9814da86d52e6559d0dadb011bf30da9b15c0a2dba71ae5f",
                717897,
            ),
        ),
    ),
    Corpus(
        name="tatoeba_deu_eng",
        description="Tatoeba English-German sentence pairs (manythings.org/anki deu-eng.zip, "
        "2018-05-13): deu.txt with 169,813 lines 'English<TAB>German'.",
        licence="CC BY 2.0",
        citation="tatoeba",
        attribution="www.manythings.org/anki and tatoeba.org",
        homepage="https://www.manythings.org/anki/",
        files=(
            RemoteFile(
                "deu-eng.zip",
                _raw(*_TRANSLATION, "deu-eng.zip"),
                "b7688f84f99fa33c17397c14d8bd9cef1fdeb2ee0bf50074767023aee8926e28",
                4012023,
            ),
        ),
    ),
    Corpus(
        name="multi30k",
        description="Multi30k task 1, raw English-German image captions (train 29,000, "
        "val 1,014, test_2016_flickr 1,000), gzipped, one sentence a line.",
        licence="No open licence: non-commercial research and education only (Flickr30K "
        "terms); cite Elliott et al. 2016.",
        citation="elliott2016multi30k",
        attribution="",
        homepage="https://github.com/multi30k/dataset",
        files=tuple(
            RemoteFile(name, _raw(*_MULTI30K, f"data/task1/raw/{name}"), sha256, size)
            for name, sha256, size in _MULTI30K_FILES
        ),
    ),
    Corpus(
        name="wikitext2",
        description="WikiText-2 v1, tokenised (with <unk> and @-@): train/valid/test of 2.09M / 218k / 246k tokens.",
        licence="CC BY-SA (Wikipedia text); share derivatives of the text alike.",
        citation="merity2016pointer",
        attribution="",
        homepage="https://arxiv.org/abs/1609.07843",
        # All three are pinned at pytorch/examples. The train.txt blob there (git blob id
        # 2d84b35af79e411d73ea7cae83c73964c6ac83b4) was not in the snapshot used to make the
        # shared copy; that copy was rebuilt from another encoding and has the same blob id,
        # so the sha256 below is that of the upstream file.
        files=(
            RemoteFile(
                "train.txt",
                _raw(*_PYTORCH_EXAMPLES, "word_language_model/data/wikitext-2/train.txt"),
                "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f",
                10797148,
            ),
            RemoteFile(
                "valid.txt",
                _raw(*_PYTORCH_EXAMPLES, "word_language_model/data/wikitext-2/valid.txt"),
                "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
                1121681,
            ),
            RemoteFile(
                "test.txt",
                _raw(*_PYTORCH_EXAMPLES, "word_language_model/data/wikitext-2/test.txt"),
                "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
                1256449,
            ),
        ),
    ),
    Corpus(
        name="sst2",
        description="GLUE SST-2 (Stanford Sentiment Treebank, binary): train 67,349 and dev 872 "
        "labelled rows 'sentence<TAB>label', test unlabelled.",
        licence="No explicit licence: research and teaching use; cite Socher et al. 2013.",
        citation="socher2013recursive",
        attribution="",
        homepage="https://nlp.stanford.edu/sentiment/",
        files=(
            # Upstream calls the full training set train_full.tsv; locally it is train.tsv.
            RemoteFile(
                "train.tsv",
                _raw(*_AUTOPROMPT, "glue_data/SST-2/train_full.tsv"),
                "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1",
                3806081,
            ),
            RemoteFile(
                "dev.tsv",
                _raw(*_AUTOPROMPT, "glue_data/SST-2/dev.tsv"),
                "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0",
                94931,
            ),
            RemoteFile(
                "test.tsv",
                _raw(*_AUTOPROMPT, "glue_data/SST-2/test.tsv"),
                "69a938605609b3e6663b4487918fe1565eb293734e6e520d0366d1d412fd2a13",
                197335,
            ),
        ),
    ),
)

CORPORA: dict[str, Corpus] = {corpus.name: corpus for corpus in _CORPUS_LIST}
"""Every corpus the book uses, by name."""


def get_corpus(name: str) -> Corpus:
    """Return the registered corpus called ``name``.

    Raises:
        UnknownCorpusError: no such corpus (a KeyError and ValueError); the message names
            ``name`` and lists the known corpora.
    """
    try:
        return CORPORA[name]
    except KeyError:
        raise UnknownCorpusError(f"unknown corpus {name!r}; known corpora: " + ", ".join(sorted(CORPORA))) from None
