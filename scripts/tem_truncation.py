"""TEM's truncation on MiniLM with the default candidates (docs/attacks.md §8): per ε, the share of draws that land
beyond the piece class's γ (the ⊥ set), sampled with the mechanism on the candidate tokens of 16 MR rows, and the
exact probability of ⊥ for the same inputs (tem.md §3: n_out·e^{−εγ/2} over the class's normaliser).

Run from the repository root: HF_HUB_OFFLINE=1 python scripts/tem_truncation.py
"""

import numpy as np
import torch

from hf_textdp import Privatizer, PrivatizerConfig
from hf_textdp.evaluation.attacks.corpus import release_corpus
from hf_textdp.evaluation.tasks import load_task


texts = load_task("mr", data_dir="../shared/data/senteval", max_rows=16, seed=4040).texts["all"]
for eps in (15.0, 20.0, 40.0):
    p = Privatizer(PrivatizerConfig(mechanism="tem", epsilon=eps), seed=2**40 + 4040, allow_weak_seed=True)
    rep = p.privacy_report()
    classes = rep["candidate_set"]["per_class"]
    space = p.engine.space
    E = space.E.double()
    toks = space.tokenizer.convert_ids_to_tokens(space.candidate_ids.tolist())
    cont = np.array([t.startswith("##") for t in toks])
    c = release_corpus(p, texts)
    x, y = torch.as_tensor(c.inputs), torch.as_tensor(c.released)
    d_xy = torch.linalg.vector_norm(E[x] - E[y], dim=1).numpy()
    is_cont = cont[c.inputs]
    gam = np.where(is_cont, classes[1]["details"]["gamma"], classes[0]["details"]["gamma"])
    beyond = d_xy > gam
    # exact ⊥ mass: n_out·e^{−εγ/2} / Σ_c e^{−ε/2·min(d, γ)} over the input's class
    exact = np.empty(len(x))
    for flag in (False, True):
        sel = np.flatnonzero(is_cont == flag)
        if sel.size == 0:
            continue
        Ec = E[torch.as_tensor(np.flatnonzero(cont == flag))]
        d = torch.cdist(E[torch.as_tensor(c.inputs[sel])], Ec).numpy()
        g = gam[sel][:, None]
        logw = -(eps / 2) * np.minimum(d, g)
        m = logw.max(1, keepdims=True)
        w = np.exp(logw - m)
        exact[sel] = (w * (d > g)).sum(1) / w.sum(1)
    print(
        f"ε={eps:g}: γ word-initial {classes[0]['details']['gamma']:.3f} (diam {classes[0]['diam']:.3f}), "
        f"continuation {classes[1]['details']['gamma']:.3f} (diam {classes[1]['diam']:.3f}); "
        f"{len(x)} tokens of 16 MR rows, replaced {float(np.mean(c.inputs != c.released)):.3f}; "
        f"draws beyond γ (⊥): {int(beyond.sum())} = {beyond.mean():.4f}; "
        f"exact P(⊥) mean {exact.mean():.2e}, max {exact.max():.2e}"
    )
