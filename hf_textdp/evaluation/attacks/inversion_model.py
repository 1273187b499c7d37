"""The inversion attack's model for :func:`~.run.run_attack`: trained on the attacker's privatized public rows
(one ε, or pooled over a family's), kept in memory for the pool and in the cache folder by what it was trained on."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from ...config import PrivatizerConfig
from ...privatizer import Privatizer
from ...utils.cache_path import cache_dir
from .corpus import ReleasedCorpus, release_corpus
from .inversion import InversionAttack, load_encoder
from .settings import INVERSION_SPLIT, AttackSettings, attacker


__all__ = ["inversion_model"]

_POOLED: dict[str, InversionAttack] = {}


def _inversion_key(
    config: PrivatizerConfig, settings: AttackSettings, victim: Privatizer, train_texts: Sequence[str]
) -> str:
    """What a trained inversion model depends on, hashed: the configuration (less ε for a model pooled over several),
    the pool, the budget, the attacker's key, the space and the public rows (never a private row or the victim's
    key), and the versions."""
    import transformers

    from ...version import __version__

    h = hashlib.sha256(b"hf_textdp/attacks/inversion/v1\x00")
    parts = (
        repr(replace(config, epsilon=1.0) if settings.inversion_pool else config),
        repr(settings.inversion_pool),
        repr(settings.budget()),
        str(settings.attacker_seed),
        victim.engine.space.space_hash,
        __version__,
        torch.__version__,
        transformers.__version__,
    )
    for part in (*parts, *train_texts):
        h.update(part.encode("utf-8") + b"\x00")
    return h.hexdigest()


def inversion_model(
    config: PrivatizerConfig,
    settings: AttackSettings,
    victim: Privatizer,
    train_texts: list[str],
    train_all: ReleasedCorpus | None,
    say: Callable[[str], None],
) -> InversionAttack:
    """The inversion attack trained on the attacker's privatized public rows (one ε, or pooled over a family's);
    a model kept in the cache (``settings.inversion_cache``) is read back instead of trained again."""
    budget = settings.budget()
    pool = settings.inversion_pool
    key = _inversion_key(config, settings, victim, train_texts)
    if pool and key in _POOLED:
        say(f"inversion: the model pooled over ε ∈ {list(pool)} is reused")
        return _POOLED[key]
    space = victim.engine.space
    pad = getattr(space.tokenizer, "pad_token_id", None) if space.tokenizer is not None else None
    inv = InversionAttack(
        encoder=load_encoder(config.model),
        candidate_ids=space.candidate_ids.clone(),
        pad_id=int(pad or 0),
        budget=budget,
        seed=settings.attacker_seed % 2**31,
    )
    saved = cache_dir() / "attacks" / "inversion" / f"{key}.pt"
    if settings.inversion_cache and saved.is_file():
        info = inv.load(saved)
        say(f"inversion: read the model trained earlier ({info['steps']} steps) from {saved}")
    else:
        if pool:
            corpora = []
            for j, eps in enumerate(pool):
                cfg = replace(config, epsilon=eps)
                texts = train_texts[j :: len(pool)][: budget.rows // len(pool)]
                corpora.append(
                    (release_corpus(attacker(cfg, settings, f"{INVERSION_SPLIT}-{j}"), texts, keep_rows=True), eps)
                )
        else:
            assert train_all is not None
            corpora = [(train_all, float(config.epsilon))]
        info = inv.fit(corpora, progress=say)
        info["pool"] = list(pool)
        say(f"inversion trained: {info['steps']} steps, final loss {info['final_loss']:.3f} ({info['stopped']})")
        if settings.inversion_cache:
            inv.save(saved)
    if pool:
        _POOLED.clear()
        _POOLED[key] = inv
    return inv
