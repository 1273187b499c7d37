"""Words/s of hf-textdp's dp_mlm and of the reference package dpmlm 1.3.0: same model, same sentences, this CPU.

The model is a *random* RobertaForMaskedLM of roberta-base's shape (``RobertaConfig()``: 12 layers, hidden 768,
vocabulary 50,265) built from its config, with a byte-level BPE tokenizer trained on the sentences' words: no
download. Its outputs mean nothing; only the time is measured. Both sides get the same sentences and the same
number of threads; the model is loaded before the clock starts and each side runs once untimed first.

- dpmlm: ``DPMLM.privatize`` (one forward per word, its ``dpmlm_rewrite`` loop) and ``DPMLM.privatize_batch``
  (16 masked copies per forward, its ``dpmlm_rewrite_batch``), CONCAT=True (its default: the clean sentence and
  the masked one, twice the length), every word of the sentence privatized (``nltk`` Treebank words, punctuation
  included, so that both sides release every word; its stopword skipping is not used);
- hf-textdp: a seeded :class:`~hf_textdp.Privatizer` with ``mechanism="dp_mlm"``, ``context="each"`` (one masked
  forward per subword position, batched) and ``context="once"`` (one forward per row), every subword released.

words/s = Treebank words of the sentences / wall seconds. dpmlm needs nltk's stopword list at import; this
machine cannot download it, so a stand-in list is written to a temporary NLTK_DATA (unused by the calls timed).

Usage (dpmlm and its dependencies in their own environment, hf-textdp importable)::

    python scripts/dp_mlm_vs_dpmlm.py --model-dir /tmp/roberta-base-random --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


SENTENCES = [
    "The waiter was rude, but the food at this small hotel was very good and surprisingly cheap.",
    "My doctor said the new medicine would help with the pain within a week or two.",
    "I really hated the ending of the movie because the plot made no sense at all.",
]


def build_model(folder: Path) -> None:
    """A random roberta-base-shaped masked LM and a byte-level BPE tokenizer trained on the sentences."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, RobertaConfig, RobertaForMaskedLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES * 20, trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>", pad_token="<pad>",
        cls_token="<s>", sep_token="</s>", mask_token="<mask>", model_max_length=512,
    )  # fmt: skip
    torch.manual_seed(0)
    model = RobertaForMaskedLM(RobertaConfig())  # roberta-base's shape: 12 × 768, vocabulary 50,265
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    fast.save_pretrained(folder)


def words(sentence: str) -> list[str]:
    from nltk.tokenize.treebank import TreebankWordTokenizer

    return list(TreebankWordTokenizer().tokenize(sentence))


def dpmlm_runners(folder: Path, eps: float) -> dict[str, Callable[[], None]]:
    """dpmlm's two methods over every word of the sentences (the model loaded, one untimed warm-up)."""
    nltk_data = Path(tempfile.mkdtemp(prefix="nltk_data_"))
    (nltk_data / "corpora" / "stopwords").mkdir(parents=True)
    (nltk_data / "corpora" / "stopwords" / "english").write_text("a\nan\nthe\nand\nor\n")  # stand-in (see above)
    import nltk
    import numpy as np

    nltk.data.path.insert(0, str(nltk_data))
    from dpmlm import DPMLM  # noqa: PLC0415 - only in the bench environment

    np.random.seed(0)  # dpmlm draws from numpy's global generator
    m = DPMLM(MODEL=str(folder))
    toks = [words(s) for s in SENTENCES]
    m.privatize(toks[0], toks[0][1], 1, CONCAT=True, epsilon=eps)  # untimed warm-up

    def one_by_one() -> None:
        for t in toks:
            for i, w in enumerate(t):
                m.privatize(t, w, i, CONCAT=True, epsilon=eps)

    def batched() -> None:
        for t in toks:
            m.privatize_batch(t, list(range(len(t))), [eps] * len(t), CONCAT=True, batch_size=16)

    return {"dpmlm privatize (one forward per word)": one_by_one, "dpmlm privatize_batch (16)": batched}


def ours_runner(folder: Path, eps: float, context: str) -> Callable[[], None]:
    from hf_textdp import Privatizer, PrivatizerConfig

    cfg = PrivatizerConfig(mechanism="dp_mlm", epsilon=eps, model=str(folder), options={"context": context})
    priv = Privatizer(cfg, seed=2**40 + 44)
    priv.privatize(SENTENCES[:1])  # untimed warm-up (model load)
    return lambda: priv.privatize(SENTENCES) and None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model-dir", type=Path, default=Path(tempfile.gettempdir()) / "roberta-base-random")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved passes; the median time of each is reported")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if not (args.model_dir / "config.json").is_file():
        build_model(args.model_dir)
    n_words = sum(len(words(s)) for s in SENTENCES)
    print(
        f"model: random RobertaForMaskedLM, roberta-base shape, {args.model_dir}; threads {args.threads}; "
        f"{n_words} words in {len(SENTENCES)} sentences; torch {torch.__version__}; median of {args.repeats} "
        "interleaved passes"
    )
    runs = {f"hf-textdp dp_mlm context={c}": ours_runner(args.model_dir, args.epsilon, c) for c in ("each", "once")}
    try:
        runs.update(dpmlm_runners(args.model_dir, args.epsilon))
    except ImportError as err:
        print(f"dpmlm 1.3.0 not importable here ({err}); no comparison")
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(args.repeats):  # interleaved: a load change on the shared machine hits every side
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    rate = {k: n_words / statistics.median(v) for k, v in times.items()}
    for k, v in rate.items():
        print(f"{k}: {v:.2f} words/s (passes: {', '.join(f'{t:.1f}' for t in times[k])} s)")
    names = list(rate)
    if len(names) == 4:
        each, once, seq, bat = (rate[k] for k in names)
        print(
            f"ratio: each/privatize {each / seq:.1f}x, each/privatize_batch {each / bat:.1f}x, "
            f"once/privatize_batch {once / bat:.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
