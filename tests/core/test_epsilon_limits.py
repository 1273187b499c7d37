"""Epsilons that would carry no privacy are refused before any row (issue 53, S2): a release that is the identity
in floating point, a row bound that overflows, a sensitive ε weaker than the others' ε."""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.accounting import Claim
from hf_textdp.errors import InvalidParameterError
from hf_textdp.mechanisms.base import AdditiveMechanism
from hf_textdp.mechanisms.limits import MAX_ROW_TOKENS, SELECTION_LIMIT, refuse_unusable_epsilon
from hf_textdp.rng import as_streams
from tests.utils import CLI, error_lines, write_jsonl


SEED = 2**40 + 3
LARGEST = re.compile(r"is not the identity here is ([0-9.e+]+)\.$")


@pytest.mark.parametrize("mechanism", ["madlib", "laplace", "gaussian", "privemb", "mahalanobis"])
def test_an_additive_release_that_is_the_identity_in_floating_point_is_refused(mechanism, tiny_bert):
    """At ε = 1e300 every finite per-token and row bound holds on paper, but the noise is below the float32
    resolution of the vectors: the output copies the input. The message's largest ε is released with noise."""
    cfg = PrivatizerConfig(mechanism=mechanism, epsilon=1e300, model=tiny_bert)
    with pytest.raises(InvalidParameterError, match=r"^epsilon=1e\+300 is too large: .*identity in floating point"):
        Privatizer(cfg, seed=SEED).privacy_report()
    if mechanism == "madlib":
        with pytest.raises(InvalidParameterError) as info:
            Privatizer(cfg, seed=SEED).privacy_report()
        largest = float(LARGEST.search(str(info.value))[1])  # type: ignore[index]
        assert 1e6 < largest < 1e300
        assert Privatizer(PrivatizerConfig(epsilon=largest, model=tiny_bert), seed=SEED).privacy_report()["certified"]


def test_a_selection_release_beyond_float64_is_refused_and_tem_is_not(tiny_bert):
    """santext at ε·diam > 2·ln(1/2**-1074) ≈ 1489: its sampler cannot represent the likelihood ratios. TEM's bound
    stays ε·γ ≈ 26 at any ε (γ shrinks as ε grows), and its release is not the identity: it is accepted."""
    santext = PrivatizerConfig(mechanism="santext", epsilon=1e6, model=tiny_bert)
    with pytest.raises(InvalidParameterError, match="identity in floating point") as info:
        Privatizer(santext, seed=SEED).privacy_report()
    largest = float(LARGEST.search(str(info.value))[1])  # type: ignore[index]
    ok = Privatizer(PrivatizerConfig(mechanism="santext", epsilon=largest, model=tiny_bert), seed=SEED)
    assert ok.engine.claim.epsilon_token is not None and ok.engine.claim.epsilon_token <= SELECTION_LIMIT
    tem = Privatizer(PrivatizerConfig(mechanism="tem", epsilon=1e308, model=tiny_bert), seed=SEED)
    assert tem.engine.claim.epsilon_token is not None and tem.engine.claim.epsilon_token < 100


class _Overflowing(AdditiveMechanism):
    """A fake additive mechanism whose per-token bound is ε·1e299 and whose noise is always visible (1.0)."""

    name = "overflowing"

    def claim(self, space: Any) -> Claim:
        return Claim(
            guarantee="metric_dp",
            metric="euclidean",
            epsilon=self.epsilon,
            delta=None,
            epsilon_token=self.epsilon * 1e299,
            delta_token=0.0,
            certified=True,
        )

    def perturb(self, x: torch.Tensor, streams: Any) -> torch.Tensor:
        return x + as_streams(streams, x.shape[0]).uniforms(0, x.shape[1]).to(x.dtype)


def test_a_row_bound_that_overflows_is_refused(tiny_space):
    """ε_tok = 1e299 is finite, but a row of 2**32 tokens would sum to infinity (every row's ε would be null)."""
    mech = _Overflowing(epsilon=1.0)
    claim = mech.claim(tiny_space)
    with pytest.raises(InvalidParameterError, match=r"a row's bound, .* = 1e\+299, overflows to infinity from") as e:
        refuse_unusable_epsilon(1.0, claim, [(mech, tiny_space, claim)], lambda eps: _Overflowing(epsilon=eps))
    largest = float(LARGEST.search(str(e.value))[1])  # type: ignore[index]
    assert math.isfinite(largest * 1e299 * MAX_ROW_TOKENS) and not math.isfinite(largest * 1.001e299 * MAX_ROW_TOKENS)
    ok = _Overflowing(epsilon=largest)
    refuse_unusable_epsilon(largest, ok.claim(tiny_space), [(ok, tiny_space, ok.claim(tiny_space))], _Overflowing)


@pytest.mark.parametrize(
    ("sensitive", "message"),
    [
        ({"epsilon": 100.0, "detectors": ["email"]}, r'sensitive\["epsilon"\]=100.0 is larger than epsilon=10.0'),
        ({"epsilon": 10.0, "detectors": ["email"]}, None),  # equal: both classes get the same protection
        ({"epsilon": 100.0, "detectors": ["email"], "others": "keep"}, None),  # the others have no ε
    ],
)
def test_a_sensitive_epsilon_weaker_than_the_others_is_refused(sensitive, message):
    if message is None:
        PrivatizerConfig(epsilon=10.0, sensitive=sensitive)
        return
    with pytest.raises(InvalidParameterError, match=message):
        PrivatizerConfig(epsilon=10.0, sensitive=sensitive)


def test_a_huge_sensitive_epsilon_with_others_kept_is_refused(tiny_bert):
    cfg = PrivatizerConfig(
        epsilon=10.0, model=tiny_bert, sensitive={"epsilon": 1e308, "detectors": ["email"], "others": "keep"}
    )
    with pytest.raises(InvalidParameterError, match=r'^sensitive\["epsilon"\]=1e\+308 is too large: .*identity'):
        Privatizer(cfg, seed=SEED).privacy_report()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epsilon", "1e308"], r"epsilon=1e\+308 is too large: the release would carry no privacy"),
        (
            ["--epsilon", "10", "--sensitive-epsilon", "1e308", "--sensitive-detectors", "email"],
            r'sensitive\["epsilon"\]=1e\+308 is larger than epsilon=10.0',
        ),
        (
            ["--epsilon", "10", "--sensitive-epsilon", "1e308", "--sensitive-detectors", "email", "--others", "keep"],
            r'sensitive\["epsilon"\]=1e\+308 is too large',
        ),
    ],
)
def test_the_issue_commands_exit_2_with_one_line(args, message, tiny_bert, tmp_path: Path):
    src = write_jsonl(tmp_path / "in.jsonl", [f"write to user{i}@domain{i}.example today" for i in range(5)])
    out = tmp_path / "o.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_TEXTDP_CACHE": str(tmp_path / "cache")}
    done = subprocess.run(
        [*CLI, "privatize", str(src), str(out), "--model", tiny_bert, *args], capture_output=True, text=True, env=env
    )
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = error_lines(done.stderr)
    assert re.search(message, line), line
    assert not out.exists()
