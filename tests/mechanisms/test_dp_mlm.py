"""dp_mlm (dp_mlm.md): the law against the model's own clipped logits, mutations, counting, specials, invariance.

Tiny random masked LMs are built here (BERT + WordPiece, RoBERTa + byte-level BPE). The reference law is
computed independently of the package: a full ``model(...).logits`` forward of the masked (or unmasked) row,
the candidate columns, clipped, ``exp(ε·u/(2Δ))`` normalised in numpy float64. Statistical tests follow
testing.md §1: fixed seeds unique per test, α = 1e-3.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.errors import InvalidParameterError, ParameterTypeError
from hf_textdp.io.masked_lm import load_masked_lm
from hf_textdp.io.models import load_space
from hf_textdp.mechanisms.context import RowContext
from hf_textdp.mechanisms.dp_mlm import DpMlm, inverse_cdf
from hf_textdp.rng import streams_for_rows
from hf_textdp.tools.mlm_bounds import clip_bounds
from tests.mechanisms.mlm_models import build_tiny_bert_mlm, build_tiny_roberta_mlm
from tests.mechanisms.test_tem import chi2_gof_pvalue
from tests.utils import corpus, row_key


ALPHA = 1e-3
TEXT = "the waiter was rude but the food was very good"
ROWS = [
    "the movie was good and the food was cheap",
    "a nurse visit to the hotel room is very nice",
    "never boring , always funny !",
    "the plot is long but the actress is great",
    "phone battery and screen are slow",
    "i love the camera",
    "rude staff , dirty bed , awful price .",
]

pytestmark = pytest.mark.usefixtures("module_textdp_cache")


@pytest.fixture(scope="module")
def bert_mlm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_bert_mlm(tmp_path_factory.mktemp("bert_mlm")))


@pytest.fixture(scope="module")
def roberta_mlm(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(build_tiny_roberta_mlm(tmp_path_factory.mktemp("roberta_mlm")))


@pytest.fixture(params=["bert", "roberta"])
def mlm(request: pytest.FixtureRequest, bert_mlm: str, roberta_mlm: str) -> str:
    return bert_mlm if request.param == "bert" else roberta_mlm


# --------------------------------------------------------------------------- the independent reference
def reference_logits(folder: str, text: str, j: int, context: str) -> tuple[np.ndarray, list[int]]:
    """The full model's logits at index j of the row (masked for ``"each"``), by a plain transformers forward."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForMaskedLM.from_pretrained(folder).eval()
    ids = tok(text)["input_ids"]
    x = list(ids)
    if context == "each":
        x[j] = tok.mask_token_id
    with torch.no_grad():
        out = model(input_ids=torch.tensor([x])).logits[0, j].double().numpy()
    return out, ids


def reference_law(logits: np.ndarray, eps: float, clip: tuple[float, float]) -> np.ndarray:
    a, b = clip
    s = eps * np.clip(logits, a, b) / (2.0 * (b - a))
    w = np.exp(s - s.max())
    return w / w.sum()


def draws(mech: DpMlm, folder: str, text: str, j: int, n: int, seed: int) -> np.ndarray:
    """n draws at index j of ``text`` (n copies of the row, each its own key): candidate positions."""
    space = load_space(folder, "cpu", "all")
    mech.bind(load_masked_lm(folder, space))
    ids = space.tokenizer(text)["input_ids"]
    ctx = RowContext.from_rows([ids] * n, [[j]] * n)
    st = streams_for_rows([row_key(seed, r) for r in range(n)], [1] * n)
    out = mech.sample(space, torch.zeros(n, dtype=torch.int64), st, context=ctx)
    return np.bincount(out.numpy(), minlength=space.V)


def law_setup(folder: str, context: str, j: int = 3) -> tuple[np.ndarray, tuple[float, float], np.ndarray]:
    """The candidate logits at index j, clip bounds that clip 20 % on each side, and C's ids."""
    space = load_space(folder, "cpu", "all")
    logits, _ = reference_logits(folder, TEXT, j, context)
    cand = space.candidate_ids.numpy()
    x = logits[cand]
    return x, (float(np.quantile(x, 0.2)), float(np.quantile(x, 0.8))), cand


# --------------------------------------------------------------------------- the law
def test_scorer_equals_full_forward(mlm: str) -> None:
    """The batched scorer (encoder, then the head at read positions) gives the full forward's logits."""
    space = load_space(mlm, "cpu", "all")
    scorer = load_masked_lm(mlm, space)
    for context in ("each", "once"):
        ids = space.tokenizer(TEXT)["input_ids"]
        js = list(range(1, len(ids) - 1))
        ctx = RowContext.from_rows([ids, space.tokenizer(ROWS[0])["input_ids"]], [js, [1]])
        got = {}
        for t, lg in scorer.logits(ctx, context):
            for k, row in zip(t.tolist(), lg, strict=True):
                got[k] = row.double().numpy()
        assert sorted(got) == list(range(len(js) + 1))
        for k, j in enumerate(js):
            ref, _ = reference_logits(mlm, TEXT, j, context)
            np.testing.assert_allclose(got[k], ref, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize(("family", "context", "seed"), [("bert", "each", 4401), ("roberta", "once", 4402)])
def test_law_chi2_against_clipped_logits(
    bert_mlm: str, roberta_mlm: str, family: str, context: str, seed: int
) -> None:
    """χ² of n = 20,000 draws at one position against exp(ε·clip(logit)/(2Δ)) normalised; α = 1e-3."""
    folder = bert_mlm if family == "bert" else roberta_mlm
    x, clip, _ = law_setup(folder, context)
    mech = DpMlm(epsilon=12.0, clip=list(clip), context=context)
    counts = draws(mech, folder, TEXT, 3, 20_000, seed)
    law = reference_law(x, 12.0, clip)
    assert law.max() / law.min() > 100  # far from uniform: the mutations below move it
    assert chi2_gof_pvalue(counts, law) > ALPHA


class _Unclipped(DpMlm):
    def utility(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.to(torch.float64)


class _EpsilonScale(DpMlm):
    def score_scale(self) -> float:
        return self.epsilon


@pytest.mark.slow
def test_mutations_rejected(bert_mlm: str) -> None:
    """Unclipped logits, ε instead of ε/(2Δ), and the percentile bug: χ² with n = 10,000 rejects at 1e-3."""
    x, clip, _ = law_setup(bert_mlm, "each")
    law = reference_law(x, 12.0, clip)
    unclipped = draws(_Unclipped(epsilon=12.0, clip=list(clip)), bert_mlm, TEXT, 3, 10_000, 4411)
    assert chi2_gof_pvalue(unclipped, law) < ALPHA
    scaled = draws(_EpsilonScale(epsilon=12.0, clip=list(clip)), bert_mlm, TEXT, 3, 10_000, 4412)
    assert chi2_gof_pvalue(scaled, law) < ALPHA
    # the percentile bug: bounds from np.percentile(public, 0.01 / 0.99) (a 0–100 scale read as fractions)
    public = _public_logits(bert_mlm)
    good = clip_bounds(public)
    bad = (float(np.percentile(public, 0.01)), float(np.percentile(public, 0.99)))
    eps = 40.0
    law_good = reference_law(x, eps, good)
    assert law_good.max() / law_good.min() > 100
    assert (
        chi2_gof_pvalue(draws(DpMlm(epsilon=eps, clip=list(good)), bert_mlm, TEXT, 3, 20_000, 4413), law_good) > ALPHA
    )
    buggy = draws(DpMlm(epsilon=eps, clip=list(bad)), bert_mlm, TEXT, 3, 10_000, 4414)
    assert chi2_gof_pvalue(buggy, law_good) < ALPHA


def _public_logits(folder: str) -> np.ndarray:
    """Unmasked logits over C at every candidate position of 60 public test lines (an independent forward)."""
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForMaskedLM.from_pretrained(folder).eval()
    cand = load_space(folder, "cpu", "all").candidate_ids.numpy()
    out = []
    for line in corpus(60, 77):
        ids = tok(line)["input_ids"]
        with torch.no_grad():
            lg = model(input_ids=torch.tensor([ids])).logits[0, 1:-1].double().numpy()
        out.append(lg[:, cand].ravel())
    return np.concatenate(out)


def test_clip_bounds_are_fractions_not_percents() -> None:
    """On N(0, 1) values the bounds are ±Φ⁻¹(1 − 10⁻⁴) = ±3.7190 (scipy), not the bug's −3.71 / −2.33."""
    v = np.random.default_rng(4420).standard_normal(2_000_000)
    a, b = clip_bounds(v)
    assert a == pytest.approx(-3.7190, abs=0.05) and b == pytest.approx(3.7190, abs=0.05)
    assert float(np.percentile(v, 0.99)) == pytest.approx(-2.33, abs=0.02)  # what the bug would have used


def test_inverse_cdf_known_answers() -> None:
    """P ∝ (1, e, e²): the CDF steps at 1/(1+e+e²) = 0.0900 and (1+e)/(1+e+e²) = 0.3348 (float64)."""
    s = torch.tensor([[0.0, 1.0, 2.0]] * 4, dtype=torch.float64)
    u = torch.tensor([0.0899, 0.0901, 0.3347, 0.3349], dtype=torch.float64)
    assert inverse_cdf(s, u).tolist() == [0, 1, 1, 2]


# --------------------------------------------------------------------------- through the Privatizer
def _privatize(folder: str, rows: list[str], *, eps: float = 8.0, batch: int | None = None, **options: object) -> dict:
    cfg = PrivatizerConfig(mechanism="dp_mlm", epsilon=eps, model=folder, options={"clip": [-1.0, 1.0], **options})
    priv = Privatizer(cfg, seed=2**40 + 4430)
    batch = batch or len(rows)
    out: dict[str, list] = {}
    for a in range(0, len(rows), batch):
        res = priv({"text": rows[a : a + batch]}, indices=list(range(a, a + batch))[: len(rows[a : a + batch])])
        for k, v in res.items():
            out.setdefault(k, []).extend(v)
    out["_priv"] = [priv]
    return out


def test_every_position_counted_and_no_special(mlm: str) -> None:
    """dp_tokens = every non-structural position; dp_epsilon = n·ε; released ids never special and class-preserved."""
    out = _privatize(mlm, ROWS, eps=0.5)
    priv = out["_priv"][0]
    tok = priv.engine.space.tokenizer
    special = set(tok.all_special_ids)
    classes = priv.engine.space.position_class()
    pos_of = {int(i): k for k, i in enumerate(priv.engine.space.candidate_ids.tolist())}
    for r, text in enumerate(ROWS):
        ids = tok(text)["input_ids"]
        # [CLS]/<s> and [SEP]/</s> are structural; an unknown piece (",": not in the tiny vocabulary) passes through
        n = sum(i not in special for i in ids)
        assert out["dp_tokens"][r] == n
        assert out["dp_epsilon"][r] == pytest.approx(n * 0.5, rel=1e-12)
        new = out["input_ids"][r]
        assert len(new) == len(ids) and new[0] == ids[0] and new[-1] == ids[-1]
        for a, b in zip(ids, new, strict=True):
            if a in special:
                assert b == a
                continue
            assert b not in special
            assert classes[pos_of[b]] == classes[pos_of[a]]  # class-preserving replacement
    changed = sum(
        a != b for r, t in enumerate(ROWS) for a, b in zip(tok(t)["input_ids"], out["input_ids"][r], strict=True)
    )
    assert changed > 0.8 * sum(out["dp_tokens"])  # ε = 0.5 per position: almost every token replaced
    report = priv.privacy_report()
    assert report["totals"]["dp_tokens"] == sum(out["dp_tokens"])


@pytest.mark.parametrize("context", ["each", "once"])
def test_seeded_output_identical_across_batch_sizes(mlm: str, context: str) -> None:
    """A seeded row's output depends on its key only: batch sizes 1, 3 and all rows, forward sizes 16 and 8192."""
    full = _privatize(mlm, ROWS, context=context)["input_ids"]
    assert _privatize(mlm, ROWS, batch=1, context=context)["input_ids"] == full
    assert _privatize(mlm, ROWS, batch=3, context=context, batch_tokens=16)["input_ids"] == full


def test_long_rows_are_windowed(bert_mlm: str) -> None:
    """A row longer than the model's positions (64) is read in windows; every position is still released."""
    text = " ".join(["the food was good"] * 30)
    n = len(load_space(bert_mlm, "cpu", "all").tokenizer(text)["input_ids"]) - 2
    assert n > 64
    for context in ("each", "once"):
        out = _privatize(bert_mlm, [text], context=context)
        assert out["dp_tokens"][0] == n
        assert len(out["input_ids"][0]) == n + 2


# --------------------------------------------------------------------------- errors
def test_refusals(tiny_bert: str, bert_mlm: str) -> None:
    with pytest.raises(InvalidParameterError, match="masked-LM head"):
        _privatize(tiny_bert, ["a b"])
    cfg = PrivatizerConfig(mechanism="dp_mlm", epsilon=1.0, model=bert_mlm)
    priv = Privatizer(cfg, seed=2**40 + 4440)
    with pytest.raises(InvalidParameterError, match="contextual"):
        priv.engine.release_positions([torch.tensor([3, 4])], [0])
    with pytest.raises(InvalidParameterError, match="a < b"):
        DpMlm(epsilon=1.0, clip=[1.0, 1.0])
    with pytest.raises(ParameterTypeError, match="clip"):
        DpMlm(epsilon=1.0, clip="1,2")
    with pytest.raises(InvalidParameterError, match="finite"):
        DpMlm(epsilon=1.0, clip=[-math.inf, 1.0])


def test_claim_and_details(bert_mlm: str) -> None:
    cfg = PrivatizerConfig(mechanism="dp_mlm", epsilon=3.0, model=bert_mlm, options={"clip": [-2.0, 6.0]})
    priv = Privatizer(cfg, seed=2**40 + 4450)
    claim = priv.engine.claim
    assert (claim.guarantee, claim.metric, claim.epsilon_token, claim.delta_token) == ("dp", None, 3.0, 0.0)
    d = priv.engine.mechanism.details(priv.engine.space)
    assert d["sensitivity"] == 8.0 and d["exponent_scale"] == pytest.approx(3.0 / 16.0, rel=1e-15)


def test_default_clip_is_the_reference_roberta_base_pair() -> None:
    assert DpMlm(epsilon=1.0).clip == (-3.2093127, 16.304797887802124)


# --------------------------------------------------------------------------- the guarantee, and the report
@pytest.mark.parametrize("context", ["each", "once"])
def test_any_change_of_the_row_moves_the_law_by_at_most_epsilon(bert_mlm: str, context: str) -> None:
    """Pairs of unrelated rows: at index 3 the exact laws (whose draws the χ² tests check) differ by a factor ≤ e^ε
    for every candidate, whatever the rows hold."""
    cand = load_space(bert_mlm, "cpu", "all").candidate_ids.numpy()
    rows = [TEXT, "rude staff and awful price", "phone battery screen camera love hate"]
    xs = [reference_logits(bert_mlm, r, 3, context)[0][cand] for r in rows]
    clip = (float(np.quantile(xs[0], 0.45)), float(np.quantile(xs[0], 0.55)))
    for x1 in xs:
        for x2 in xs:
            worst = np.abs(np.log(reference_law(x1, 2.0, clip)) - np.log(reference_law(x2, 2.0, clip))).max()
            assert worst <= 2.0 + 1e-12


def test_the_worst_pair_of_utilities_reaches_epsilon_exactly() -> None:
    """Logits at b for y and a elsewhere, against a for y and b elsewhere (the extreme rows): the implementation's
    scores give the closed-form log-ratio, just below ε; without the clip (a mutation) wider logits exceed it."""
    mech = DpMlm(epsilon=1.5, clip=[-1.0, 3.0])
    V = 50
    lo, hi = torch.full((1, V), -1.0), torch.full((1, V), 3.0)
    x1, x2 = lo.clone(), hi.clone()
    x1[0, 7], x2[0, 7] = 3.0, -1.0

    def log_law(m: DpMlm, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(m.scores(x), 1)[0]

    # closed form, c = ε/(2Δ): 4c + ln((e^{-c} + 49e^{3c}) / (e^{3c} + 49e^{-c})) → 8c = ε as V grows
    c = 1.5 / 8.0
    exact = 4 * c + math.log((math.exp(-c) + 49 * math.exp(3 * c)) / (math.exp(3 * c) + 49 * math.exp(-c)))
    worst = float((log_law(mech, x1) - log_law(mech, x2)).abs().max())
    assert worst == pytest.approx(exact, rel=1e-12) and 0.95 * 1.5 < worst < 1.5
    wild1, wild2 = x1 * 3.0, x2 * 3.0  # logits outside [a, b]: clipped, the bound holds
    assert float((log_law(mech, wild1) - log_law(mech, wild2)).abs().max()) == pytest.approx(exact, rel=1e-12)
    bad = _Unclipped(epsilon=1.5, clip=[-1.0, 3.0])
    assert float((log_law(bad, wild1) - log_law(bad, wild2)).abs().max()) > 1.5 * 2


def test_report_keys_and_counts(bert_mlm: str) -> None:
    """The privacy report of a dp_mlm release has the spec's keys; ε_tok = ε; the seed is not in it."""
    import json

    from hf_textdp import privacy_report
    from tests.core.test_report import REPORT_KEYS, TOTALS_KEYS

    out = _privatize(bert_mlm, ROWS[:3], eps=2.0)
    report = privacy_report(out["_priv"][0])
    assert set(report) == REPORT_KEYS and set(report["totals"]) == TOTALS_KEYS
    assert (report["mechanism"], report["guarantee"], report["epsilon_token"]) == ("dp_mlm", "dp", 2.0)
    assert report["details"]["clip"] == [-1.0, 1.0] and report["details"]["context"] == "each"
    assert report["totals"]["max_row_dp_epsilon"] == 2.0 * max(out["dp_tokens"])
    text = json.dumps(report)
    assert str(2**40 + 4430) not in text and format(2**40 + 4430, "x") not in text


def test_once_runs_the_encoder_once_per_batch(bert_mlm: str) -> None:
    """context="once": the piece classes of a batch share one encoder pass (one forward for these short rows);
    "each" runs one masked sequence per privatized token."""
    from hf_textdp.mechanisms.mlm_logits import split_head

    out = _privatize(bert_mlm, ROWS[:1], context="once")  # loads the model and the classes
    priv = out["_priv"][0]
    scorer = priv.engine.class_mechanisms[0][1]._scorer
    assert len(priv.engine.classes) == 2
    parts = split_head(scorer.model)
    assert parts is not None
    calls: list[int] = []
    handle = parts[0].register_forward_hook(
        lambda m, a, kw, o: calls.append(int(kw["input_ids"].shape[0])), with_kwargs=True
    )
    try:
        priv({"text": ROWS}, indices=list(range(len(ROWS))))
        assert len(calls) == 1
        calls.clear()
        each = Privatizer(
            PrivatizerConfig(mechanism="dp_mlm", epsilon=1.0, model=bert_mlm, options={"clip": [-1.0, 1.0]}),
            seed=2**40 + 4480,
        )
        res = each({"text": ROWS}, indices=list(range(len(ROWS))))
        assert sum(calls) == sum(res["dp_tokens"])  # sequences through the encoder: one per privatized token
    finally:
        handle.remove()


@pytest.mark.slow
def test_seeded_output_identical_across_num_proc_and_streaming(bert_mlm: str) -> None:
    """datasets.map with num_proc 1 and 2 (the privatizer pickled into workers) and a streamed map: the same rows."""
    import datasets

    cfg = PrivatizerConfig(mechanism="dp_mlm", epsilon=4.0, model=bert_mlm, options={"clip": [-1.0, 1.0]})
    ds = datasets.Dataset.from_dict({"text": corpus(24, 4490)})
    kw = {"batched": True, "with_indices": True, "load_from_cache_file": False}
    one = ds.map(Privatizer(cfg, seed=2**40 + 4491), batch_size=8, num_proc=1, **kw)
    two = ds.map(Privatizer(cfg, seed=2**40 + 4491), batch_size=5, num_proc=2, **kw)
    streamed = list(
        ds.to_iterable_dataset().map(Privatizer(cfg, seed=2**40 + 4491), batched=True, with_indices=True, batch_size=7)
    )
    for col in ("text", "input_ids", "dp_tokens", "dp_epsilon"):
        assert one[col] == two[col] == [r[col] for r in streamed]
