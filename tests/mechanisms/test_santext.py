"""Tests of ``santext`` and ``santext_plus`` (santext.md §1, §2).

Known answers are the numbers printed by ``docs/mechanisms/kat/santext.py`` (hard-coded, never recomputed by
package code). Statistical tests follow testing.md §1: fixed seeds unique per test, α = 1e-3 per test.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from hf_textdp.errors import InvalidParameterError, ParameterTypeError, UnknownOptionError
from hf_textdp.io.frequencies import check_not_input, load_frequencies, resolve_count_options
from hf_textdp.mechanisms import get_mechanism_class
from hf_textdp.mechanisms.santext import Santext, sensitive_set
from hf_textdp.mechanisms.santext_plus import SantextPlus
from tests.mechanisms.test_tem import (
    L12,
    AcceptAllSampler,
    DoubledScaleSampler,
    _MaxNumel,
    chi2_gof_pvalue,
    draw,
    exp_mech_law,
    min_row_pvalue,
    worst_ratio,
)
from tests.utils import T5, synthetic_space


ALPHA = 1e-3
COUNTS_T5 = {"t0": 50, "t1": 7, "t2": 3, "t3": 3, "t4": 900}

# santext.md §1, T5, ε = 2
SANTEXT_T5 = np.array(
    [
        [0.5543662583, 0.2039399493, 0.2039399493, 0.0276002708, 0.0101535722],
        [0.2087228921, 0.5673676449, 0.1379365691, 0.0767848609, 0.0091880330],
        [0.2160041976, 0.1427484911, 0.5871602853, 0.0248540367, 0.0292329893],
        [0.0403398892, 0.1096551877, 0.0342971796, 0.8102483332, 0.0054594103],
        [0.0167874012, 0.0148429210, 0.0456328877, 0.0061757398, 0.9165610503],
    ]
)
# santext.md §2, T5, ε = 2, counts [50, 7, 3, 3, 900], w = 0.6, p = 0.3 → V_S = {1, 2, 3}
PLUS_T5 = np.array(
    [
        [0.7, 0.1404931593, 0.1404931593, 0.0190136815, 0.0],
        [0.0, 0.7254514391, 0.1763693849, 0.0981791760, 0.0],
        [0.0, 0.1891302654, 0.7779401358, 0.0329295989, 0.0],
        [0.0, 0.1149183684, 0.0359433604, 0.8491382712, 0.0],
        [0.0, 0.0668082949, 0.2053945725, 0.0277971326, 0.7],
    ]
)


def plus_law(E: np.ndarray, eps: float, counts: np.ndarray, w: float, p: float) -> np.ndarray:
    """Independent float64 reference of santext_plus's law (santext.md §2)."""
    V = len(E)
    n_s = int(np.floor(w * V + 1e-12))
    S = np.sort(np.lexsort((np.arange(V), counts))[:n_s])
    Q = exp_mech_law(E, eps)[:, S]
    Q = Q / Q.sum(1, keepdims=True)
    P = np.zeros((V, V))
    for x in range(V):
        sens = x in S
        P[x, S] = (1.0 if sens else p) * Q[x]
        if not sens:
            P[x, x] += 1 - p
    return P


pytestmark = pytest.mark.usefixtures("module_textdp_cache")  # one fresh $HF_TEXTDP_CACHE per module


# --------------------------------------------------------------------------- santext (santext.md §1)
def test_santext_known_answers():
    P = exp_mech_law(T5, 2.0)
    np.testing.assert_allclose(P, SANTEXT_T5, rtol=1e-9, atol=1e-10)
    assert worst_ratio(P, T5, 2.0) == pytest.approx(0.5891, abs=5e-5)
    PL = exp_mech_law(L12, 2.0)
    assert PL[0, 0] == pytest.approx(0.3756270484, abs=5e-11)
    assert worst_ratio(PL, L12, 2.0) == pytest.approx(0.9011, abs=5e-5)
    assert worst_ratio(exp_mech_law(L12, 2.0, factor=1.0), L12, 2.0) == pytest.approx(1.7884, abs=5e-5)


@pytest.mark.parametrize("w", range(5), ids=[f"w{w}" for w in range(5)])
def test_santext_chi2_against_exact_law(t5, w):
    """χ² of n = 400,000 draws from input w of T5 (ε = 2, chunk_size 2) against the exact row; α = 1e-3."""
    counts = draw(Santext(epsilon=2.0, chunk_size=2), t5, w, 400_000, seed=9100 + w)
    assert chi2_gof_pvalue(counts, SANTEXT_T5[w]) > ALPHA


def test_santext_missing_half_mutant_is_rejected(t5):
    """Exponent without ½ (Gumbel scale 1/ε): χ² with n = 20,000 rejects at 1e-3 (testing.md §4)."""

    class NoHalf(Santext):
        EXPONENT_FACTOR = 1.0

    counts = draw(NoHalf(epsilon=2.0), t5, 0, 20_000, seed=9150)
    assert chi2_gof_pvalue(counts, SANTEXT_T5[0]) < ALPHA


def test_santext_candidate_set_is_the_space(t5):
    """Outputs range over all of C (never a data-derived vocabulary): at ε = 0.01 every candidate occurs."""
    counts = draw(Santext(epsilon=0.01), t5, 0, 2_000, seed=9160)
    assert (counts > 0).all()


def test_santext_claim(t5):
    mech = Santext(epsilon=2.0)
    claim = mech.claim(t5)
    assert claim.guarantee == "metric_dp" and claim.metric == "euclidean" and claim.certified
    assert claim.epsilon_token == pytest.approx(10.0, rel=1e-12)  # ε·diam, diam = 5
    assert claim.pair_bound is not None
    assert claim.pair_bound(0, 4) == pytest.approx(8.0, rel=1e-12)
    assert "gamma" not in mech.details(t5)
    assert set(mech.parameters()) == {"epsilon", "chunk_size"}


def _rss_script(V: int, d: int, n: int) -> str:
    return textwrap.dedent(
        f"""
        import numpy as np, torch
        from hf_textdp.space import EmbeddingSpace
        from hf_textdp.mechanisms.santext import Santext

        def status(key):
            with open("/proc/self/status") as fh:
                return next(int(line.split()[1]) for line in fh if line.startswith(key + ":"))

        E = torch.from_numpy(np.random.default_rng(9200).standard_normal(({V}, {d})).astype(np.float32))
        space = EmbeddingSpace(model_id="s", kind="glove", candidate_ids=torch.arange({V}), E=E, n_rows={V},
                               vocab_size={V}, structural_ids=frozenset(), unk_id=None, device=torch.device("cpu"))
        mech = Santext(epsilon=1.0)
        g = torch.Generator().manual_seed(9201)
        mech.sample(space, torch.arange(4), g)  # warm-up: index, thread pools
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the peak (VmHWM) to the current RSS
        before = status("VmRSS")
        out = mech.sample(space, torch.arange(0, {V}, {V} // {n})[:{n}], g)
        peak = status("VmHWM")
        assert out.shape == ({n},) and int(out.min()) >= 0 and int(out.max()) < {V}
        print((peak - before) / 1024.0)
        """
    )


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset the peak RSS")
def test_santext_memory_v200k():
    """V = 200,000, d = 8: sampling 1,000 tokens raises the peak RSS by < 400 MB (a V × V fp32 matrix is 160 GB).

    Runs in a fresh interpreter; the peak (VmHWM) is reset just before the call, so it is this call's own, and
    every allocation of 64 KB or more is its own mapping (``MALLOC_MMAP_THRESHOLD_``), so that the call cannot
    reuse memory the warm-up freed unseen (without it, 4.5–17 MB were measured and once less). Expected: about
    215 MB with torch's int32 bound product of one group of GROUP = 256 tokens (256 × 200,064 × 4 bytes); with the
    CPU's key kernel one group's block maxima, bounds and weights, O(G·V′/64): 40 MB measured (36 MB before the
    bounds moved to C).
    """
    res = subprocess.run(
        [sys.executable, "-c", _rss_script(200_000, 8, 1_000)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(Path(__file__).resolve().parents[2]),
        env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"},
    )
    assert res.returncode == 0, res.stderr
    growth_mb = float(res.stdout.strip().splitlines()[-1])
    assert 10.0 < growth_mb < 400.0  # the lower end shows the measurement sees the call at all


def test_santext_no_tensor_beyond_batch_times_chunk():
    """V = 200,000: no op in ``sample`` allocates more than one group's integer product (B × V for
    B = 16 tokens, the exact sampler's bound) or a V × d pass over E; never V × V."""
    from hf_textdp.mechanisms.exponential import BLOCK

    V, B, d = 200_000, 16, 8
    space = synthetic_space(np.random.default_rng(9210).standard_normal((V, d)), words=True)
    _ = space.index
    mech = Santext(epsilon=1.0)
    mech.sampler_for(space)  # the exact sampler's int8 operands: built once per space, O(V·d)
    with _MaxNumel() as mode:
        out = mech.sample(space, torch.arange(B), torch.Generator().manual_seed(9211))
    assert out.shape == (B,)
    # a V × d pass over E itself (norms, a copy) is allowed, anything of V × V elements is not;
    # the rejection sampler's bound is one int32 product per group of tokens (rows padded to 32).
    v_pad = -(-V // BLOCK) * BLOCK
    assert mode.max_numel <= max(32 * v_pad, V * (d + 8))
    assert mode.max_numel < V * V


# --------------------------------------------------------------------------- santext_plus (santext.md §2)
def test_santext_plus_known_answers():
    counts = np.array([50, 7, 3, 3, 900])
    P = plus_law(T5, 2.0, counts, 0.6, 0.3)
    np.testing.assert_allclose(P, PLUS_T5, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(P.sum(1), 1.0, rtol=1e-12)
    # w = 1 reproduces the santext matrix exactly
    np.testing.assert_allclose(plus_law(T5, 2.0, counts, 1.0, 0.3), SANTEXT_T5, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("w", range(5), ids=[f"x{w}" for w in range(5)])
def test_santext_plus_chi2_against_exact_law(t5, w):
    """χ² of n = 400,000 draws from input x of T5 (ε = 2, w = 0.6, p = 0.3) against the exact row; α = 1e-3.

    Outputs of probability 0 (outside V_S, other than the input itself) never occur.
    """
    mech = SantextPlus(epsilon=2.0, p=0.3, w=0.6, frequencies=COUNTS_T5, chunk_size=2)
    counts = draw(mech, t5, w, 400_000, seed=9300 + w)
    assert chi2_gof_pvalue(counts, PLUS_T5[w]) > ALPHA


def test_santext_plus_w1_matches_santext(t5):
    """w = 1: the law is santext's (χ² for input 3, n = 400,000, α = 1e-3) and the claim is metric DP."""
    mech = SantextPlus(epsilon=2.0, p=0.3, w=1.0, frequencies=COUNTS_T5)
    assert chi2_gof_pvalue(draw(mech, t5, 3, 400_000, seed=9310), SANTEXT_T5[3]) > ALPHA
    claim = mech.claim(t5)
    assert claim.guarantee == "metric_dp"
    assert claim.epsilon_token == pytest.approx(10.0, rel=1e-12)
    assert mech.details(t5)["metric_dp"] == {"epsilon": 2.0, "metric": "euclidean"}


def test_santext_plus_mutant_sanitising_sensitive_tokens_with_p_is_rejected(t5):
    """Sanitisation probability applied to V_S tokens too: χ² for input 1 ∈ V_S rejects (n = 20,000)."""

    class PForAll(SantextPlus):
        def sanitise_mask(self, u, is_sensitive):
            return u < self.p

    mech = PForAll(epsilon=2.0, p=0.3, w=0.6, frequencies=COUNTS_T5)
    counts = draw(mech, t5, 1, 20_000, seed=9320)
    assert chi2_gof_pvalue(counts, PLUS_T5[1]) < ALPHA


class _SantextAcceptAll(Santext):
    def sampler_for(self, space):
        return AcceptAllSampler(space.E)


class _SantextDoubledScale(Santext):
    def sampler_for(self, space):
        return DoubledScaleSampler(space.E)


class _PlusWithSampler(SantextPlus):
    """santext_plus whose draw over V_S uses the sampler class ``SAMPLER`` (a mutant of the exact one)."""

    SAMPLER: Any = None

    def _prepare(self, space):
        st = super()._prepare(space)
        if not isinstance(st.sampler, self.SAMPLER):
            st.sampler = self.SAMPLER(space.E, st.sensitive)
        return st


class _PlusAcceptAll(_PlusWithSampler):
    SAMPLER = AcceptAllSampler


class _PlusDoubledScale(_PlusWithSampler):
    SAMPLER = DoubledScaleSampler


def test_exact_sampler_mutants_accepting_every_proposal_are_rejected(t5):
    """The exact sampler with an acceptance that ignores the bound: the smallest χ² p-value over the 5
    inputs of T5 (n = 400,000 each) is below α/5, for santext (seeds 9400 + w) and santext_plus (9410 + w)."""
    assert min_row_pvalue(_SantextAcceptAll(epsilon=2.0), t5, SANTEXT_T5, 400_000, 9400) < ALPHA / 5
    plus = _PlusAcceptAll(epsilon=2.0, p=0.3, w=0.6, frequencies=COUNTS_T5)
    assert min_row_pvalue(plus, t5, PLUS_T5, 400_000, 9410) < ALPHA / 5


def test_exact_sampler_mutants_doubled_scale_are_rejected(t5):
    """The sampler run at scale ε (not ε/2): χ² of input 0 (santext, seed 9420) and input 1 ∈ V_S
    (santext_plus, seed 9421) rejects, n = 20,000."""
    assert chi2_gof_pvalue(draw(_SantextDoubledScale(epsilon=2.0), t5, 0, 20_000, seed=9420), SANTEXT_T5[0]) < ALPHA
    plus = _PlusDoubledScale(epsilon=2.0, p=0.3, w=0.6, frequencies=COUNTS_T5)
    assert chi2_gof_pvalue(draw(plus, t5, 1, 20_000, seed=9421), PLUS_T5[1]) < ALPHA


def test_santext_plus_claim_and_details(t5):
    mech = SantextPlus(epsilon=2.0, p=0.3, w=0.6, frequencies=COUNTS_T5)
    claim = mech.claim(t5)
    assert claim.guarantee == "umldp" and claim.metric == "euclidean" and claim.certified
    assert claim.pair_bound is not None
    assert claim.epsilon_token == pytest.approx(10.0 + 1.2039728043259361, rel=1e-12)
    assert claim.pair_bound(0, 1) == pytest.approx(2.0 + 1.2039728043259361, rel=1e-12)
    assert any("sensitive set" in line for line in claim.not_covered)
    det = mech.details(t5)
    assert det["p"] == 0.3 and det["w"] == 0.6 and det["n_sensitive"] == 3
    assert det["epsilon0"] == pytest.approx(1.2039728043259361, rel=1e-12)
    assert det["metric_dp"] is None
    assert len(det["frequency_source"]["sha256"]) == 64
    assert "1 - p" in det["note"]
    # p = 1: ε₀ = 0
    assert SantextPlus(epsilon=2.0, p=1.0, w=0.6, frequencies=COUNTS_T5).details(t5)["epsilon0"] == 0.0


@pytest.mark.parametrize(
    ("counts", "w", "expected"),
    [
        pytest.param([50, 7, 3, 3, 900], 0.6, [1, 2, 3], id="kat_t5"),
        pytest.param([5, 1, 5, 1, 5, 5], 0.5, [0, 1, 3], id="tie_at_boundary_lower_id_wins"),
        pytest.param([2, 2, 2, 2], 0.5, [0, 1], id="all_equal"),
        pytest.param([0, 0, 9, 0], 0.75, [0, 1, 3], id="zeros_first"),
        pytest.param([3, 1, 2], 1.0, [0, 1, 2], id="w1_everything"),
        pytest.param([3, 1, 2], 0.3, [], id="floor_to_zero"),
        pytest.param([4.5, 4.25, 10.0, 4.25], 0.5, [1, 3], id="float_counts_tie"),
    ],
)
def test_sensitive_set(counts, w, expected):
    assert sensitive_set(counts, w).tolist() == expected


def test_sensitive_set_sizes_minilm():
    """n_S = ⌊w·V + 1e-12⌋: 27,465 at w = 0.9 and 15,258 at w = 0.5 for V = 30,517 (santext.md §2)."""
    counts = np.zeros(30_517)
    assert sensitive_set(counts, 0.9).size == 27_465
    assert sensitive_set(counts, 0.5).size == 15_258


def test_frequency_sources_agree(tmp_path):
    """A mapping, a JSON file, a TSV file and a counted corpus (txt and jsonl) give the same V_S and hash."""
    E = np.random.default_rng(9400).standard_normal((6, 3))
    words = ["a", "b", "c", "d", "e", "f"]
    path = write_words(tmp_path, words, E)
    from hf_textdp.io.models import load_space

    space = load_space(str(path))
    counts = {"a": 4, "b": 1, "d": 2, "e": 4, "zz": 7}  # c, f absent: count 0; zz is not a candidate
    (tmp_path / "f.json").write_text(json.dumps(counts), encoding="utf-8")
    (tmp_path / "f.tsv").write_text("".join(f"{k}\t{v}\n" for k, v in counts.items()), encoding="utf-8")
    lines = ["a a b", "a d e", "a e e zz", "d zz zz zz zz zz zz", "e", ""]
    (tmp_path / "corpus.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in lines), encoding="utf-8")
    sources: list[dict[str, Any]] = [
        {"frequencies": counts},
        {"frequencies": str(tmp_path / "f.json")},
        {"frequencies": tmp_path / "f.tsv"},
        {"frequency_corpus": str(tmp_path / "corpus.txt")},
        {"frequency_corpus": str(tmp_path / "corpus.jsonl")},
    ]
    hashes = set()
    for src in sources:
        mech = SantextPlus(epsilon=1.0, w=0.5, **resolve_count_options(src))
        mech.setup(space)
        assert mech.candidate_counts(space).tolist() == [4, 1, 0, 2, 4, 0]
        det = mech.details(space)
        assert det["n_sensitive"] == 3
        assert mech._prepare(space).sensitive.tolist() == [1, 2, 5]
        hashes.add(det["frequency_source"]["sha256"])
        json.dumps(mech.parameters())
    assert len(hashes) == 1


def write_words(tmp_path: Path, words: list[str], E: np.ndarray) -> Path:
    from tests.utils import write_vectors

    return write_vectors(tmp_path / "vec.txt", words, E)


def test_frequency_corpus_with_hf_tokenizer(tiny_bert, tmp_path):
    """An HF space counts corpus tokens with its own tokenizer (specials excluded); keys are vocab tokens."""
    from hf_textdp.io.models import load_space

    space = load_space(tiny_bert)
    (tmp_path / "corpus.txt").write_text("the movie the film\nthe [CLS] movie\n", encoding="utf-8")
    mech = SantextPlus(epsilon=1.0, **resolve_count_options({"frequency_corpus": str(tmp_path / "corpus.txt")}))
    counts = mech.candidate_counts(space)
    tokens = SantextPlus.candidate_tokens(space)
    by_token = {t: int(c) for t, c in zip(tokens, counts, strict=True) if c}
    assert by_token["the"] == 3 and by_token["movie"] == 2 and by_token["film"] == 1
    assert "[CLS]" not in tokens
    mapping = SantextPlus(epsilon=1.0, frequencies=by_token)
    np.testing.assert_array_equal(mapping.candidate_counts(space), counts)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        pytest.param({}, InvalidParameterError, "frequencies / frequency_corpus", id="no_counts"),
        pytest.param(
            {"frequencies": {"a": 1}, "frequency_corpus": "x.txt"},
            InvalidParameterError,
            "frequencies / frequency_corpus",
            id="both_sources",
        ),
        pytest.param({"frequencies": [1, 2]}, ParameterTypeError, "frequencies", id="frequencies_list"),
        pytest.param({"frequencies": {"a": -1}}, InvalidParameterError, "frequencies", id="negative_count"),
        pytest.param({"frequencies": {"a": math.nan}}, InvalidParameterError, "frequencies", id="nan_count"),
        pytest.param({"frequencies": {"a": "3"}}, ParameterTypeError, "frequencies", id="str_count"),
        pytest.param({"frequencies": {3: 1}}, ParameterTypeError, "frequencies", id="non_str_key"),
        pytest.param({"frequencies": "/nonexistent/f.json"}, InvalidParameterError, "frequencies", id="missing_file"),
        pytest.param(
            {"frequency_corpus": "/nonexistent/c.txt"}, InvalidParameterError, "frequency_corpus", id="missing_corpus"
        ),
        pytest.param({"frequency_corpus": 3}, ParameterTypeError, "frequency_corpus", id="corpus_int"),
        pytest.param({"frequencies": {"a": 1}, "p": 0.0}, InvalidParameterError, "p", id="p_zero"),
        pytest.param({"frequencies": {"a": 1}, "p": 1.5}, InvalidParameterError, "p", id="p_above_one"),
        pytest.param({"frequencies": {"a": 1}, "w": 0.0}, InvalidParameterError, "w", id="w_zero"),
        pytest.param({"frequencies": {"a": 1}, "w": 1.01}, InvalidParameterError, "w", id="w_above_one"),
        pytest.param({"frequencies": {"a": 1}, "w": "0.5"}, ParameterTypeError, "w", id="w_str"),
        pytest.param({"frequencies": {"a": 1}, "chunk_size": 0}, InvalidParameterError, "chunk_size", id="chunk_zero"),
        pytest.param({"frequencies": {"a": 1}, "beta": 0.1}, UnknownOptionError, "beta", id="unknown_option"),
    ],
)
def test_santext_plus_invalid_parameters(kwargs, error, match):
    with pytest.raises(error, match=match):
        SantextPlus(epsilon=1.0, **resolve_count_options(kwargs))


@pytest.mark.parametrize(
    ("content", "match"),
    [
        pytest.param("a\t1\nb 2\n", "line 2", id="tsv_no_tab"),
        pytest.param("a\t1\nb\tmany\n", "line 2", id="tsv_not_a_number"),
        pytest.param('{"a": 1,', "not valid JSON", id="json_truncated"),
        pytest.param("a\t-4\n", "line 1", id="tsv_negative"),
    ],
)
def test_malformed_frequency_files(tmp_path, content, match):
    path = tmp_path / "freq.txt"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InvalidParameterError, match=match):
        load_frequencies(path)


def test_tsv_tokens_may_contain_spaces(tmp_path):
    path = tmp_path / "freq.tsv"
    path.write_text("new york\t12\n\nx\t0.5\n", encoding="utf-8")
    assert load_frequencies(path) == {"new york": 12, "x": 0.5}


def test_empty_sensitive_set_raises_at_setup(t5):
    mech = SantextPlus(epsilon=1.0, w=0.1, frequencies=COUNTS_T5)  # ⌊0.1·5⌋ = 0
    with pytest.raises(InvalidParameterError, match="w"):
        mech.setup(t5)


@pytest.mark.parametrize(
    ("corpus", "source", "raises"),
    [
        pytest.param("data/public.txt", "data/private.jsonl", False, id="different_paths"),
        pytest.param("data/reviews.jsonl", "./data/reviews.jsonl", True, id="same_path_spelled_differently"),
        pytest.param("user/reviews", "user/reviews", True, id="same_hub_id"),
        pytest.param(None, "data/private.jsonl", False, id="no_corpus"),
    ],
)
def test_check_not_input_paths(corpus, source, raises):
    if raises:
        with pytest.raises(InvalidParameterError, match="frequency_corpus"):
            check_not_input(corpus, source)
    else:
        check_not_input(corpus, source)


def test_check_not_input_fingerprints(tmp_path):
    class Fake:
        def __init__(self, fp: str) -> None:
            self._fingerprint = fp

    with pytest.raises(InvalidParameterError, match="frequency_corpus"):
        check_not_input(Fake("abc"), Fake("abc"))
    check_not_input(Fake("abc"), Fake("def"))
    real = tmp_path / "a.txt"
    real.write_text("x\n", encoding="utf-8")
    link = tmp_path / "b.txt"
    link.symlink_to(real)
    with pytest.raises(InvalidParameterError, match="frequency_corpus"):
        check_not_input(str(link), real)


def test_registered_under_their_names():
    assert get_mechanism_class("santext") is Santext
    assert get_mechanism_class("santext_plus") is SantextPlus


# --------------------------------------------------------------------------- end to end
@pytest.mark.parametrize(
    ("mechanism", "options", "guarantee"),
    [
        pytest.param("santext", {}, "metric_dp", id="santext"),
        pytest.param(
            "santext_plus", {"frequencies": {"the": 100, "was": 80, "movie": 3}, "w": 0.5}, "umldp", id="santext_plus"
        ),
    ],
)
def test_privatizer_end_to_end(tmp_path, mechanism, options, guarantee):
    from hf_textdp import Privatizer, PrivatizerConfig

    words = ["the", "movie", "was", "good", "bad", "plot", "film", "great"]
    path = write_words(tmp_path, words, np.random.default_rng(9500).standard_normal((len(words), 4)))
    cfg = PrivatizerConfig(mechanism=mechanism, epsilon=2.0, model=str(path), options=options)
    priv = Privatizer(cfg, seed=2**40 + 1)
    batch = {"text": ["the movie was good", "bad plot zzz"]}
    out = priv(batch, [0, 1])
    assert {"text", "input_ids", "dp_tokens", "dp_epsilon"} <= set(out)
    assert out["dp_tokens"] == [4, 2]
    assert out["text"][1].endswith(" <unk>")  # a missing word: the placeholder, never the word
    assert set(out["text"][0].split()) <= set(words)
    assert Privatizer(cfg, seed=2**40 + 1)(batch, [0, 1])["text"] == out["text"]
    report = priv.privacy_report()
    assert report["guarantee"] == guarantee
    assert report["mechanism"] == mechanism
    json.dumps(report, allow_nan=False)
    if mechanism == "santext_plus":
        assert report["details"]["n_sensitive"] == 4
        assert report["parameters"]["frequencies"] == "mapping (3 entries)"
        assert report["epsilon_token"] == pytest.approx(2.0 * report["scale"]["diam"] + math.log(1 / 0.3), rel=1e-12)
