"""Privatizer on tiny BERT WordPiece and GPT-2 BPE models (testing.md §5, issue 3 tests)."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.errors import ColumnNotFoundError, InvalidParameterError, InvalidRowError
from hf_textdp.space import CANDIDATE, STRUCTURAL
from tests.utils import corpus


MODELS = ["tiny_bert", "tiny_gpt2"]


@pytest.fixture(params=MODELS)
def model(request):
    return request.getfixturevalue(request.param)


def _columns(priv, texts, ids=None):
    return priv({"text": list(texts)}, list(range(len(texts))) if ids is None else ids)


def test_specials_unchanged_and_uncounted(model):
    priv = Privatizer(PrivatizerConfig(epsilon=1.0, model=model), seed=2**40 + 11)
    texts = corpus(20, seed=3) + ["", "   "]
    out = _columns(priv, texts)
    tok = priv.engine.space.tokenizer
    for text, ids_out, n in zip(texts, out["input_ids"], out["dp_tokens"], strict=False):
        ids_in = tok(text, add_special_tokens=True, split_special_tokens=True)["input_ids"]
        assert len(ids_out) == len(ids_in)
        cls, _ = priv.engine.space.classify(np.array(ids_in))
        structural = cls == STRUCTURAL
        assert [i for i, s in zip(ids_out, structural, strict=False) if s] == [
            i for i, s in zip(ids_in, structural, strict=False) if s
        ]
        assert n == int((cls == CANDIDATE).sum())
    assert out["attention_mask"] == [[1] * len(i) for i in out["input_ids"]]
    assert out["text"][-2] == ""  # an empty string privatizes to an empty string


def test_spelled_special_tokens_are_text(tiny_bert, tiny_gpt2):
    for model, spelled in ((tiny_bert, "[CLS] [SEP] [PAD]"), (tiny_gpt2, "<|endoftext|>")):
        priv = Privatizer(PrivatizerConfig(epsilon=math.inf, model=model, options={"test_mode": True}), seed=2**40 + 1)
        out = _columns(priv, [spelled])
        tok = priv.engine.space.tokenizer
        special = set(tok.all_special_ids)
        inner = out["input_ids"][0]
        n_template = len(tok("", add_special_tokens=True)["input_ids"])
        assert sum(i in special for i in inner) == n_template  # only the template's specials
        assert out["dp_tokens"][0] == len(inner) - n_template > 0


def test_out_of_range_ids_never_emitted(tiny_bert):
    """10,000 draws at ε = 0.01, where outputs spread widely: every id is a candidate (testing.md §5)."""
    priv = Privatizer(PrivatizerConfig(epsilon=0.01, model=tiny_bert), seed=2**40 + 12)
    text = " ".join(["good movie"] * 2500)
    out = _columns(priv, [text, text])
    ids = np.array(out["input_ids"][0][1:-1] + out["input_ids"][1][1:-1])
    assert ids.size >= 10_000
    cand = set(priv.engine.space.candidate_ids.tolist())
    assert set(ids.tolist()) <= cand
    assert ids.max() < len(priv.engine.space.tokenizer)
    # outputs do spread, over the piece classes of the inputs (space.md §7: classes are preserved)
    class_of = dict(
        zip(priv.engine.space.candidate_ids.tolist(), priv.engine.space.position_class().tolist(), strict=True)
    )
    inputs = priv.engine.space.tokenizer("good movie", add_special_tokens=False)["input_ids"]
    pool = {i for i, c in class_of.items() if c in {class_of[j] for j in inputs}}
    assert set(ids.tolist()) <= pool
    assert len(set(ids.tolist())) > 0.5 * len(pool)


def test_long_text_privatized_whole_without_warning(tiny_bert, recwarn, caplog):
    priv = Privatizer(PrivatizerConfig(epsilon=5.0, model=tiny_bert), seed=2**40 + 13)
    text = " ".join(["movie"] * 5000)
    out = _columns(priv, [text])
    assert out["dp_tokens"][0] >= 5000
    assert len(recwarn) == 0
    assert "longer than" not in caplog.text


@pytest.mark.parametrize("batch_size", [1, 7, 64])
def test_batch_size_invariance_with_seed(model, batch_size):
    import datasets

    texts = corpus(40, seed=4)
    ds = datasets.Dataset.from_dict({"text": texts})
    cfg = PrivatizerConfig(epsilon=3.0, model=model)
    ref = ds.map(
        Privatizer(cfg, seed=2**63 + 5), batched=True, with_indices=True, batch_size=40, load_from_cache_file=False
    )
    got = ds.map(
        Privatizer(cfg, seed=2**63 + 5),
        batched=True,
        with_indices=True,
        batch_size=batch_size,
        load_from_cache_file=False,
    )
    for col in ("text", "input_ids", "dp_tokens", "dp_epsilon"):
        assert got[col] == ref[col]


@pytest.mark.slow
def test_num_proc_invariance_with_seed(tiny_bert):
    import datasets

    texts = corpus(60, seed=5)
    ds = datasets.Dataset.from_dict({"text": texts})
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    one = ds.map(
        Privatizer(cfg, seed=2**40 + 77),
        batched=True,
        with_indices=True,
        batch_size=8,
        num_proc=1,
        load_from_cache_file=False,
    )
    two = ds.map(
        Privatizer(cfg, seed=2**40 + 77),
        batched=True,
        with_indices=True,
        batch_size=8,
        num_proc=2,
        load_from_cache_file=False,
    )
    for col in ("text", "input_ids", "dp_tokens", "dp_epsilon"):
        assert one[col] == two[col]


def test_privatize_list_matches_map(tiny_bert):
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    texts = corpus(10, seed=6)
    assert Privatizer(cfg, seed=2**40 + 9).privatize(texts) == _columns(Privatizer(cfg, seed=2**40 + 9), texts)["text"]


def test_fresh_randomness_without_seed(tiny_bert):
    cfg = PrivatizerConfig(epsilon=5.0, model=tiny_bert)
    text = " ".join(corpus(40, seed=7))
    a = Privatizer(cfg).privatize([text])[0]
    b = Privatizer(cfg).privatize([text])[0]
    p = Privatizer(cfg)
    c, d = p.privatize([text])[0], p.privatize([text])[0]
    assert a != b and c != d


def test_split_and_stream_change_the_noise(tiny_bert):
    cfg = PrivatizerConfig(epsilon=5.0, model=tiny_bert)
    text = [" ".join(corpus(20, seed=8))]
    base = Privatizer(cfg, seed=2**40 + 5).privatize(text)
    assert Privatizer(cfg, seed=2**40 + 5, split="test").privatize(text) != base
    assert Privatizer(cfg, seed=2**40 + 5, stream=1).privatize(text) != base
    assert Privatizer(cfg, seed=2**40 + 5).privatize(text) == base


def test_repeated_word_gets_many_replacements(tiny_bert):
    """A word repeated 60 times yields ≥ 5 distinct outputs (shared noise yields exactly 1)."""
    from hf_textdp.tools.calibrate import calibrate

    epsilon = calibrate(target_rate=0.8, model=tiny_bert).epsilon  # keep rate 0.2 (testing.md §5)
    priv = Privatizer(PrivatizerConfig(epsilon=epsilon, model=tiny_bert), seed=2**40 + 14)
    tok = priv.engine.space.tokenizer
    word = "movie"
    assert len(tok(word, add_special_tokens=False)["input_ids"]) == 1
    out = _columns(priv, [" ".join([word] * 60)])
    ids = out["input_ids"][0][1:-1]
    assert len(ids) == 60
    kept = sum(i == tok.convert_tokens_to_ids(word) for i in ids)
    assert 0 < kept < 60, "the test needs an epsilon with keep rate strictly between 0 and 1"
    assert len(set(ids)) >= 5


def test_huge_epsilon_keeps_every_token(model):
    """ε = 1e9 keeps every token of 100 random texts (catches excluded-input post-processing)."""
    priv = Privatizer(PrivatizerConfig(epsilon=1e9, model=model), seed=2**40 + 15)
    texts = corpus(100, seed=9)
    out = _columns(priv, texts)
    tok = priv.engine.space.tokenizer
    for text, ids in zip(texts, out["input_ids"], strict=False):
        assert ids == tok(text, add_special_tokens=True, split_special_tokens=True)["input_ids"]


def test_global_rng_untouched(tiny_bert):
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    texts = corpus(5, seed=10)
    torch.manual_seed(0)
    t_state, np_state, py_state = torch.get_rng_state(), np.random.get_state(), random.getstate()
    a = Privatizer(cfg, seed=2**40 + 3).privatize(texts)
    assert torch.equal(torch.get_rng_state(), t_state)
    assert all(np.array_equal(x, y) for x, y in zip(np.random.get_state()[1:2], np_state[1:2], strict=False))
    assert random.getstate() == py_state
    torch.manual_seed(1)
    assert Privatizer(cfg, seed=2**40 + 3).privatize(texts) == a


def test_dp_epsilon_is_product_of_tokens_and_token_epsilon(line_vocab):
    """Line vocabulary, ε = 2, madlib: five tokens → dp_epsilon = 5·ε·diam = 30.0 (accounting.md §7)."""
    priv = Privatizer(PrivatizerConfig(epsilon=2.0, model=line_vocab), seed=2**40 + 16)
    out = priv({"text": ["w0 w1 w2 w3 w0", "", "w1 unknown w2"]}, [0, 1, 2])
    assert out["dp_tokens"] == [5, 0, 2]
    assert out["dp_epsilon"] == [30.0, 0.0, 12.0]
    assert "attention_mask" not in out and "dp_delta" not in out
    assert out["input_ids"][2][1] == -1 and out["text"][2].split()[1] == "<unk>"  # passthrough="placeholder"
    report = priv.privacy_report()
    assert report["totals"]["passthrough_tokens"] == 1
    assert report["epsilon_token"] == 6.0


def test_static_vectors_keep_separators(tmp_path):
    from tests.utils import write_vectors

    p = write_vectors(tmp_path / "v.txt", ["a", "b", "c"], np.array([[0.0], [10.0], [20.0]]))
    priv = Privatizer(PrivatizerConfig(epsilon=math.inf, model=str(p), options={"test_mode": True}), seed=2**40 + 1)
    text = "  a\tb \n c  zz "
    assert priv.privatize([text]) == ["  a\tb \n c  <unk> "]  # 'zz' is not in the file: the placeholder


def test_bad_rows_name_the_row(tiny_bert):
    priv = Privatizer(PrivatizerConfig(epsilon=1.0, model=tiny_bert), seed=2**40 + 1)
    with pytest.raises(InvalidRowError, match=r"row 17: expected str in column 'text', got NoneType"):
        priv({"text": ["ok", None]}, [16, 17])
    with pytest.raises(ColumnNotFoundError, match=r"text_column='txt'.*\['text'\]"):
        Privatizer(PrivatizerConfig(epsilon=1.0, model=tiny_bert), text_column="txt")({"text": ["x"]}, [0])
    with pytest.raises(InvalidParameterError, match="with_indices=True"):
        priv({"text": ["x"]})


def test_id_column_equals_index(tiny_bert):
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    texts = corpus(6, seed=11)
    by_index = Privatizer(cfg, seed=2**40 + 21)({"text": texts}, [10, 11, 12, 13, 14, 15])
    by_id = Privatizer(cfg, seed=2**40 + 21, id_column="rid")({"text": texts, "rid": [10, 11, 12, 13, 14, 15]})
    assert by_index["input_ids"] == by_id["input_ids"]


def test_keep_original_only_when_asked(tiny_bert):
    texts = ["a secret text"]
    out = Privatizer(PrivatizerConfig(epsilon=1.0, model=tiny_bert), seed=2**40 + 1)({"text": texts}, [0])
    assert "text_original" not in out
    cfg = PrivatizerConfig(epsilon=1.0, model=tiny_bert, keep_original=True)
    assert Privatizer(cfg, seed=2**40 + 1)({"text": texts}, [0])["text_original"] == texts


def test_repr_and_pickle_hide_nothing_secret_and_hash_fast(tiny_bert):
    from datasets.fingerprint import Hasher

    seed = 918273645
    priv = Privatizer(PrivatizerConfig(epsilon=3.0, model=tiny_bert), seed=seed, allow_weak_seed=True)
    priv.privatize(["warm the space up"])  # loaded matrices must not enter the hash
    assert str(seed) not in repr(priv)
    t0 = time.perf_counter()
    h = Hasher.hash(priv)
    assert time.perf_counter() - t0 < 0.05
    code = (
        "from hf_textdp import Privatizer, PrivatizerConfig; from datasets.fingerprint import Hasher; "
        f"print(Hasher.hash(Privatizer(PrivatizerConfig(epsilon=3.0, model={tiny_bert!r}), seed={seed}, "
        "allow_weak_seed=True)))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert other == h
    assert Hasher.hash(Privatizer(PrivatizerConfig(epsilon=3.0, model=tiny_bert))) != Hasher.hash(
        Privatizer(PrivatizerConfig(epsilon=3.0, model=tiny_bert))
    )


def _count_processing(monkeypatch) -> dict[str, int]:
    """Count the batches privatizers process (``calls["n"]``): a map served from the cache processes none."""
    calls = {"n": 0}
    original = Privatizer._process

    def counting(self, *args):  # patched on the class, so it is not part of the pickled state
        calls["n"] += 1
        return original(self, *args)

    monkeypatch.setattr(Privatizer, "_process", counting)
    return calls


def test_cache_hit_with_seed_and_fresh_noise_without(tiny_bert, tmp_path, monkeypatch):
    import datasets

    path = tmp_path / "in.jsonl"
    datasets.Dataset.from_dict({"text": corpus(30, seed=12)}).to_json(str(path))
    ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    cfg = PrivatizerConfig(epsilon=3.0, model=tiny_bert)
    calls = _count_processing(monkeypatch)
    first = ds.map(Privatizer(cfg, seed=2**40 + 99), batched=True, with_indices=True)
    n_first = calls["n"]
    second = ds.map(Privatizer(cfg, seed=2**40 + 99), batched=True, with_indices=True)
    assert n_first > 0 and calls["n"] == n_first, "a seeded rerun must be a cache hit"
    assert first.cache_files == second.cache_files and first["text"] == second["text"]
    third = ds.map(Privatizer(cfg), batched=True, with_indices=True)
    assert calls["n"] > n_first, "an unseeded rerun must draw fresh noise"
    assert third.cache_files != first.cache_files


def test_an_edited_vector_file_is_not_served_from_the_cache(tmp_path, monkeypatch):
    """The fingerprint holds the files' identity (size, mtime): editing the vectors misses the cache, in this
    process too (the space is loaded again), while the unchanged file still hits it."""
    import datasets

    from tests.utils import write_vectors

    vectors = tmp_path / "v.txt"
    words = ["alpha", "beta", "gamma", "delta"]
    write_vectors(vectors, words, np.eye(4, dtype=np.float32))
    path = tmp_path / "in.jsonl"
    datasets.Dataset.from_dict({"text": ["alpha beta gamma", "delta alpha"] * 5}).to_json(str(path))
    ds = datasets.load_dataset("json", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache"))
    cfg = PrivatizerConfig(epsilon=1e6, model=str(vectors))  # ε huge: every word is its own nearest
    calls = _count_processing(monkeypatch)
    first = ds.map(Privatizer(cfg, seed=2**40 + 5), batched=True, with_indices=True)
    n = calls["n"]
    again = ds.map(Privatizer(cfg, seed=2**40 + 5), batched=True, with_indices=True)
    assert calls["n"] == n and again.cache_files == first.cache_files, "an unchanged file must hit the cache"
    write_vectors(vectors, ["alpha", "beta", "omega", "delta"], np.eye(4, dtype=np.float32))  # 'gamma' renamed
    edited = ds.map(Privatizer(cfg, seed=2**40 + 5), batched=True, with_indices=True)
    assert calls["n"] > n, "an edited vector file must not be served from the cache"
    assert first["input_ids"][0] == [0, 1, 2] and edited["input_ids"][0] == [0, 1, -1]  # 'gamma': now passthrough


def test_release_positions_is_privatize_on_classified_tokens(tiny_bert):
    """The public entry point of tokenizers/collators gives what privatize() gives for the same row and stream."""
    cfg = PrivatizerConfig(epsilon=5.0, model=tiny_bert)
    texts = [" ".join(corpus(12, seed=s)) for s in (3, 4)]
    priv = Privatizer(cfg, seed=2**40 + 11)
    out = _columns(priv, texts, [7, 9])["input_ids"]
    from hf_textdp.tokens import make_tokens

    space = priv.engine.space
    positions, expected = [], []
    for enc, ids in zip(make_tokens(space).encode(texts), out, strict=True):
        cls, pos = space.classify(np.asarray(enc.ids, dtype=np.int64))
        _, new_pos = space.classify(np.asarray(ids, dtype=np.int64))
        positions.append(torch.from_numpy(pos[cls == CANDIDATE]))
        expected.append(new_pos[cls == CANDIDATE].tolist())
    got = priv.engine.release_positions(positions, [7, 9])
    assert [g.tolist() for g in got] == expected and any(
        e != p.tolist() for e, p in zip(expected, positions, strict=True)
    )
    other = Privatizer(cfg, seed=2**40 + 11, stream=1).engine.release_positions(positions, [7, 9])
    assert [g.tolist() for g in priv.engine.release_positions(positions, [7, 9], stream=1)] == [
        o.tolist() for o in other
    ]
    assert priv.stream == 0  # the override does not change the privatizer
    with pytest.raises(InvalidParameterError, match="stream"):
        priv.engine.release_positions(positions, [7, 9], stream=-1)
    # the device part alone (what the bench's kernel-only pass times): the rows' keyed streams given
    from hf_textdp.rng import streams_for_rows

    streams = streams_for_rows(priv.engine.row_keys([7, 9]), [int(p.numel()) for p in positions])
    flat = priv.engine.release_streams(torch.cat(positions), streams)
    assert flat.tolist() == [x for e in expected for x in e]


def test_hashing_a_privatizer_never_downloads(monkeypatch):
    """The fingerprint resolves a hub id from the local cache only, even where downloads are allowed."""
    from datasets.fingerprint import Hasher

    import hf_textdp.io.models as models

    calls = []

    def snapshot_download(repo_id, local_files_only=False, **kwargs):
        calls.append(local_files_only)
        raise OSError("not cached")

    monkeypatch.setattr(models, "snapshot_download", snapshot_download)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    Hasher.hash(Privatizer(PrivatizerConfig(epsilon=3.0, model="someone/not-cached-model"), seed=2**40 + 1))
    assert calls == [True]
