"""A warm start builds a model's space from the cached tokenizer facts without importing transformers, and
privatizes exactly as a cold one (issue 41, cold start)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hf_textdp.io.cache import DiskCache
from hf_textdp.io.tokenizer_facts import cached_facts, facts_of


# Privatizes two rows with a fixed (weak, test-only) seed and says whether transformers was imported.
_SCRIPT = """
import json, sys
from hf_textdp import Privatizer, PrivatizerConfig
priv = Privatizer(PrivatizerConfig(model=sys.argv[1], epsilon=30.0), seed=12345, allow_weak_seed=True)
out = priv.privatize(["the quick brown fox", "jumps over the lazy dog again"])
print(json.dumps({"out": out, "transformers": "transformers" in sys.modules}))
"""


def _run(model: str, cache: Path) -> dict[str, object]:
    env = {**os.environ, "HF_TEXTDP_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, model], env=env, capture_output=True, text=True, check=True, timeout=300
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_warm_start_skips_transformers_and_privatizes_the_same(tmp_path: Path, tiny_bert: str) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    cache = tmp_path / "cache"
    cold = _run(str(model), cache)
    warm = _run(str(model), cache)
    assert cold["transformers"] is True  # the first start reads the tokenizer with transformers ...
    assert warm["transformers"] is False  # ... the second from the facts it kept
    assert warm["out"] == cold["out"]
    # an edited model folder is read again (its identity changed), with the same result for the same files
    os.utime(model / "tokenizer.json", ns=(1, 1))
    edited = _run(str(model), cache)
    assert edited["transformers"] is True
    assert edited["out"] == cold["out"]


def test_cached_facts_match_the_tokenizer(tmp_path: Path, tiny_bert: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoConfig, AutoTokenizer

    from hf_textdp.io.models import load_space

    monkeypatch.setenv("HF_TEXTDP_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    shutil.copytree(tiny_bert, model)
    store = DiskCache()
    assert cached_facts(model, store) is None
    space = load_space(str(model))
    facts = cached_facts(model, store)
    assert facts is not None
    tok = AutoTokenizer.from_pretrained(model)
    assert facts == facts_of(tok, AutoConfig.from_pretrained(model), facts.embedding)
    assert facts.tokens == tok.convert_ids_to_tokens(list(range(len(tok))))
    assert facts.embedding is not None and (model / facts.embedding[0]).is_file()
    assert space.backend_json == facts.backend
    # an entry of another layout is not read
    path = store.path("tokenizer", next(p.stem for p in (tmp_path / "cache" / "tokenizer").iterdir()))
    path.write_text(json.dumps({"backend": "x"}), encoding="utf-8")
    assert cached_facts(model, store) is None


def test_lazy_tokenizer_loads_on_first_use(tmp_path: Path, tiny_bert: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from hf_textdp.space import EmbeddingSpace

    monkeypatch.setenv("HF_TEXTDP_CACHE", str(tmp_path / "cache"))
    from hf_textdp.io.models import _load_hf_space, parse_candidates, parse_device

    args = (Path(tiny_bert), "tiny", None, parse_device("cpu"), parse_candidates("all"))
    _load_hf_space(*args, model=tiny_bert)  # cold: keeps the facts
    space = _load_hf_space(*args, model=tiny_bert)  # warm: no tokenizer object yet
    assert space.__dict__.get("_tokenizer") is None
    part = space.class_parts()[0].space  # the parts share the space's tokenizer without loading it
    assert isinstance(part, EmbeddingSpace) and part.backend_json == space.backend_json
    assert space.__dict__.get("_tokenizer") is None and part.__dict__.get("_tokenizer") is None
    tok = space.tokenizer  # loaded now, from the model folder, and kept
    assert tok.backend_tokenizer.to_str() == space.backend_json
    assert space.__dict__["_tokenizer"] is tok
