"""Test helpers: tiny static-vector files, tiny HF models and tokenizers built in the test."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np


if TYPE_CHECKING:
    from hf_textdp.rng import Streams
    from hf_textdp.space import EmbeddingSpace


WORDS = (
    "the a an and or but if then movie film story actor actress plot scene music good bad great terrible "
    "boring funny sad happy long short review service food waiter table price cheap expensive slow fast "
    "phone battery screen camera love hate like dislike never always very quite rather really nice awful "
    "hotel room bed clean dirty staff friendly rude doctor nurse patient pain medicine hospital visit"
).split()


def corpus(n_lines: int = 400, seed: int = 0) -> list[str]:
    """Random sentences of common words and random pseudo-words (so tokenizers learn V ≈ 500–2,000)."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    pseudo = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 8))) for _ in range(600)]
    lines = []
    for _ in range(n_lines):
        k = rng.randint(3, 14)
        words = [rng.choice(WORDS) if rng.random() < 0.6 else rng.choice(pseudo) for _ in range(k)]
        lines.append(" ".join(words) + rng.choice([".", "!", "?", ""]))
    return lines


def write_vectors(path: Path, words: list[str], matrix: np.ndarray, fmt: str = "glove") -> Path:
    """Write a GloVe (no header) or word2vec text file."""
    matrix = np.asarray(matrix, dtype=np.float32)
    lines = []
    if fmt == "word2vec":
        lines.append(f"{len(words)} {matrix.shape[1]}")
    for w, row in zip(words, matrix, strict=False):
        lines.append(w + " " + " ".join(repr(float(x)) for x in row))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def line_vocabulary(path: Path) -> Path:
    """Fixture (A) of testing.md §3: words w0..w3 at 0, 1, 2, 3 (d = 1)."""
    return write_vectors(path, ["w0", "w1", "w2", "w3"], np.array([[0.0], [1.0], [2.0], [3.0]]))


def tiny_random_vocabulary(path: Path) -> Path:
    """Fixture (B) of testing.md §3: default_rng(0).standard_normal((8, 2)) as fp32."""
    E = np.random.default_rng(0).standard_normal((8, 2)).astype(np.float32)
    return write_vectors(path, [f"w{i}" for i in range(8)], E)


def cluster_vocabulary(path: Path) -> Path:
    """Fixture (C) of testing.md §3: 1-D points 0, 1, 2.00, 2.01, …, 2.09 (V = 12)."""
    pts = np.concatenate([[0.0, 1.0], 2.0 + 0.01 * np.arange(10)])
    return write_vectors(path, [f"c{i}" for i in range(12)], pts.reshape(-1, 1))


# T5 of santext.md (tem, santext, mahalanobis known answers): rows (0,0), (1,0), (0,1), (3,0), (0,4), ids 0-4.
T5 = np.array([[0, 0], [1, 0], [0, 1], [3, 0], [0, 4]], dtype=np.float64)


def row_key(seed: int, row: int, split: str = "", stream: int = 0) -> int:
    """The Philox key the pipeline uses for ``row`` (``mech.perturb(x, key)`` reproduces that row)."""
    from hf_textdp.rng import derive_row_seed

    return derive_row_seed(seed, row, split, stream)


def one_row(key: int, n: int, device: str = "cpu") -> Streams:
    """The streams of one row of ``n`` tokens with Philox key ``key`` (positions 0 … n − 1)."""
    from hf_textdp.rng import streams_for_rows

    return streams_for_rows([key], [n], device)


def make_space(tmp_dir: Path, E: np.ndarray, name: str = "vocab.txt") -> EmbeddingSpace:
    """``load_space`` of E written as a GloVe file with words t0, t1, …"""
    from hf_textdp.io.models import load_space

    path = write_vectors(tmp_dir / name, [f"t{i}" for i in range(len(E))], E)
    return load_space(str(path))


def synthetic_space(E: np.ndarray, *, words: bool = False) -> EmbeddingSpace:
    """An in-memory static space over the rows of E (fp32, CPU), with words t0, t1, … when asked."""
    import torch

    from hf_textdp.space import EmbeddingSpace

    V = E.shape[0]
    return EmbeddingSpace(
        model_id="synthetic",
        kind="glove",
        candidate_ids=torch.arange(V),
        E=torch.from_numpy(E.astype(np.float32)),
        n_rows=V,
        vocab_size=V,
        structural_ids=frozenset(),
        unk_id=None,
        device=torch.device("cpu"),
        words=[f"t{i}" for i in range(V)] if words else None,
    )


# Exact-search near ties N1-N5 (name, E, q, k, expected nearest positions): madlib's and the fast search's tests.
F32 = np.float32
N4_A, N4_B = F32(2.0**-30 * (1 + 2.0**-23)), F32(-(2.0**-30))
N_CASES = [
    ("N1-duplicate-rows", np.array([[0, 0], [1, 2], [5, 5], [1, 2]], F32), np.array([[1, 2]], F32), 1, [1]),
    ("N2-exact-midpoint", np.array([[0, 0, 0], [1, 0, 0], [9, 9, 9]], F32), np.array([[0.5, 0, 0]], F32), 1, [0]),
    ("N3-top2-tie-origin", np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], F32), np.array([[0, 0]], F32), 2, [0, 1]),
    ("N3-top2-tie-diag", np.array([[1, 0], [0, 1], [-1, 0], [0, -1]], F32), np.array([[0.25, 0.25]], F32), 2, [0, 1]),
    ("N4-float64-wrong", np.array([[0, N4_A], [0, N4_B]], F32), np.array([[1, 0]], F32), 1, [1]),
    (
        "N5-fp32-tie",
        np.array([[21, 39, -62], [21 + 2.0**-19, 39, -62]], F32),
        np.array([[1066, -1755, 3928]], F32),
        1,
        [1],
    ),
]


def build_tiny_bert(folder: Path, vocab_size: int = 800, hidden: int = 16, seed: int = 0) -> Path:
    """A BERT WordPiece tokenizer trained on test text, and a random tiny BertModel (safetensors)."""
    import torch
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    tok.train_from_iterator(
        corpus(2000, seed) + ["abcdefghijklmnopqrstuvwxyz 0123456789 [ ] < > | ! ? . , ; : ' \" - _ ( ) / # @ &"],
        trainer,
    )
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    from tokenizers import decoders

    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    )
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=8192,
        pad_token_id=fast.pad_token_id,
    )
    model = BertModel(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def build_tiny_gpt2(folder: Path, vocab_size: int = 600, hidden: int = 16, seed: int = 1) -> Path:
    """A GPT-2 byte-level BPE tokenizer trained on test text, and a random tiny GPT2Model."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2Model, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(2000, seed), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", bos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    torch.manual_seed(seed)
    eos = fast.eos_token_id
    config = GPT2Config(
        vocab_size=len(fast), n_embd=hidden, n_layer=1, n_head=2, n_positions=8192, bos_token_id=eos, eos_token_id=eos
    )
    model = GPT2Model(config)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


# --------------------------------------------------------------------------- the CLI, files and leak scans
CLI = [sys.executable, "-m", "hf_textdp.cli"]  # the ``hf-textdp`` command, run in a child process

LEAK_SEED = 918273645  # accounting.md §7's leak-scan seed
SEED_NEEDLES = [
    b"918273645",
    b"36bbbe6d",
    b"36BBBE6D",
    LEAK_SEED.to_bytes(8, "little"),
    b"J" + LEAK_SEED.to_bytes(4, "little"),
]


def write_jsonl(path: Path, texts: list[Any], **extra: Any) -> Path:
    """A .jsonl file with a ``text`` column (and the ``extra`` columns)."""
    import datasets

    datasets.Dataset.from_dict({"text": list(texts), **extra}).to_json(str(path), force_ascii=False)
    return path


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    # split on "\n" only: str.splitlines() would also split inside texts holding U+2028 or \x1c
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line]


def small_jsonl(tmp_path: Path, n: int = 12) -> Path:
    """``tmp_path/in.jsonl``: ``n`` rows of text and an int ``label``."""
    return write_jsonl(tmp_path / "in.jsonl", corpus(n, seed=31), label=list(range(n)))


def error_lines(err: str) -> list[str]:
    """The ``hf-textdp: error:`` lines of a stderr."""
    return [line for line in err.splitlines() if line.startswith("hf-textdp: error:")]


def make_canaries(k: int) -> list[bytes]:
    """Unique random words that cannot occur by chance (24 letters: ≥ 15 WordPiece pieces, each replaced)."""
    rng = random.Random(918)
    return [("".join(rng.choice("bcdfghjklmnpqrstvwxz") for _ in range(24))).encode() for _ in range(k)]


def _file_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    if path.suffix == ".parquet":  # compressed pages: also scan the decoded values
        import pyarrow.parquet as pq

        data += json.dumps(pq.read_table(path).to_pylist(), default=repr, ensure_ascii=False).encode()
    return data


def scan(roots: Any, needles: list[bytes], allowed: Any = ()) -> dict[str, list[bytes]]:
    """Every file under ``roots`` (hidden ones included) → the needles found in it."""
    allowed = {Path(a).resolve() for a in allowed}
    hits: dict[str, list[bytes]] = {}
    for root in roots:
        root = Path(root)
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file() and path.resolve() not in allowed:
                data = _file_bytes(path)
                found = [n for n in needles if n in data]
                if found:
                    hits[str(path)] = found
    return hits


# --------------------------------------------------------------------------- tiny models of three tokenizer families
# Placeholders and foreign words added as ordinary (non-special) vocabulary (space.md §6).
RESERVED = ["[unused0]", "[unused1]", "<extra_id_0>", "madeupword0000"]
FOREIGN = ["вода", "θεος"]


def _save_family(folder: Path, tok, special: dict[str, str], seed: int) -> str:
    import torch
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    tok.add_tokens(RESERVED + FOREIGN)  # placeholders and foreign words as ordinary (non-special) vocabulary
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **special)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(fast),
        hidden_size=8,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        pad_token_id=fast.pad_token_id,
    )
    folder.mkdir(parents=True, exist_ok=True)
    BertModel(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return str(folder)


def _wordpiece(folder: Path) -> str:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    tok.train_from_iterator(
        corpus(300, 3), trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[PAD]", "[UNK]"])
    )
    return _save_family(folder, tok, {"unk_token": "[UNK]", "pad_token": "[PAD]"}, 3)


def _bytelevel(folder: Path) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<pad>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus(300, 4), trainer)
    return _save_family(folder, tok, {"pad_token": "<pad>", "eos_token": "</s>"}, 4)


def _metaspace(folder: Path) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["<pad>", "<unk>"], unk_token="<unk>")
    tok.train_from_iterator(corpus(300, 5), trainer)
    return _save_family(folder, tok, {"pad_token": "<pad>", "unk_token": "<unk>"}, 5)


FAMILIES = {"wordpiece": _wordpiece, "bytelevel": _bytelevel, "metaspace": _metaspace}


def build_wordpiece_rows(folder: Path, words: list[str], rows: np.ndarray) -> Path:
    """A WordPiece model whose vocabulary is ``[PAD] [UNK] [CLS] [SEP]`` + ``words`` and whose embedding rows
    for ``words`` are ``rows`` (special rows far away): a subword space of known geometry."""
    import torch
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    vocab = {t: i for i, t in enumerate(special + list(words))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]"
    )
    rows = np.asarray(rows, dtype=np.float64)
    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=rows.shape[1],
        num_hidden_layers=1,
        num_attention_heads=1,
        intermediate_size=4,
        pad_token_id=0,
    )
    model = BertModel(config)
    with torch.no_grad():
        weight = torch.full((len(vocab), rows.shape[1]), 50.0)
        weight[len(special) :] = torch.from_numpy(rows).float()
        model.embeddings.word_embeddings.weight.copy_(weight)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def bound_report(output: Path, report: dict[str, Any]) -> dict[str, Any]:
    """``report`` bound to the output ``output`` as a saved output's is (its content hashes, issue 37)."""
    from hf_textdp.io.reports import CONTENT_KEY, content_hashes

    return report | {CONTENT_KEY: content_hashes(output)}
