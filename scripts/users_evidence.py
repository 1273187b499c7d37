"""Per-person evidence (issue 56 item 5): utility against the budget, per-user ε, identifier survival.

MR rows (``--rows``, a stratified sample of SentEval's MR) are assigned to users with a Zipf law of rows per user
(``rng.zipf(--zipf)``, at most ``--max-rows-per-user`` rows a user). Each user gets one full name (the
``faker`` lists of ``hf_textdp.evaluation.identifiers``), inserted into each of its rows with probability
``--name-rate`` by ``inject_identifiers`` (so a user repeats its own name across rows), its span recorded.

Releases (madlib, MiniLM, seeded), all through ``privatize_dataset``:

1. ``no budget``: every user's total ε (the sum of its rows' dp_epsilon) reported, nothing bounded: the
   distribution of per-user ε;
2. ``scale`` and ``rows`` at budgets B = the 90th, 75th, 50th and 25th percentiles of that distribution:
   accuracy of the bag-of-vectors classifier (``--folds``-fold CV, ``--inner``-fold penalty search, train and test
   released) against B, with the share of tokens kept and the rows left;
3. names as sensitive (span column) at ε_s, with and without ``consistent="user"``: the share of name
   occurrences that survive (their exact string, case-folded, in the released row), the share of users whose
   name survives in at least one of its rows, and the mean per-user ε spent on names.

Writes ``summary.json``, ``README.md``, ``budget.png`` and ``users.png`` into ``--out``.
Run: ``nice -n 10 python scripts/users_evidence.py --out results/users``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import datasets
import numpy as np


MODEL = "sentence-transformers/all-MiniLM-L6-v2"
SEED = 2**40 + 5601


def users_of(n_rows: int, zipf: float, cap: int, seed: int) -> np.ndarray:
    """Each row's user: users take min(Zipf(zipf), cap) rows each until every row has one; rows shuffled."""
    rng = np.random.default_rng(seed)
    sizes: list[int] = []
    while sum(sizes) < n_rows:
        sizes.append(int(min(rng.zipf(zipf), cap)))
    sizes[-1] -= sum(sizes) - n_rows
    owner = np.repeat(np.arange(len(sizes)), sizes)
    return rng.permutation(owner)


def with_names(texts: list[str], owner: np.ndarray, rate: float, seed: int) -> tuple[list[str], list[Any]]:
    """Insert each user's own name into each of its rows with probability ``rate`` (its span recorded)."""
    from hf_textdp.evaluation.identifiers import identifier_lists, inject_identifiers

    lists = identifier_lists()
    rng = np.random.default_rng(seed + 1)
    first = rng.integers(len(lists.first_names), size=int(owner.max()) + 1)
    last = rng.integers(len(lists.last_names), size=int(owner.max()) + 1)
    out, spans = [], []
    for i, (text, u) in enumerate(zip(texts, owner.tolist(), strict=True)):
        if rng.random() >= rate:
            out.append(text)
            spans.append([])
            continue
        own = dataclasses.replace(
            lists, first_names=(lists.first_names[first[u]],), last_names=(lists.last_names[last[u]],)
        )
        row = inject_identifiers([text], seed=seed + i, kinds=["name"], per_row=(1, 1), lists=own)[0]
        out.append(row["text"])
        spans.append(row["spans"])
    return out, spans


def accuracy(texts: list[str], labels: np.ndarray, folds: int, inner: int) -> tuple[float, float]:
    from hf_textdp.evaluation.encoders import make_encoder
    from hf_textdp.evaluation.protocol import ClassifierConfig, run_protocol

    feats = make_encoder("bag_of_vectors", MODEL).encode(texts)
    res = run_protocol(
        "cv",
        feats,
        {"all": labels},
        {"released": {"all": feats}},
        ClassifierConfig(kfold=folds, inner_kfold=inner),
    )
    vals = np.asarray(res.values["released"]) * 100
    return float(vals.mean()), float(vals.std())


def release(ds: datasets.Dataset, **config: Any) -> tuple[datasets.Dataset, dict[str, Any], float]:
    from hf_textdp import PrivatizerConfig, privatize_dataset
    from hf_textdp.privatizer import Privatizer

    cfg = PrivatizerConfig(model=MODEL, **config)
    t0 = time.perf_counter()
    out = privatize_dataset(ds, cfg, seed=SEED, id_column="id")
    seconds = time.perf_counter() - t0
    # the report of these rows (privatize_dataset returns the rows; the report is recounted from them)
    from hf_textdp.run.totals import dataset_report
    from hf_textdp.run.users import user_totals

    priv = Privatizer(cfg, seed=SEED, id_column="id")
    report = dataset_report(out, {"": priv}, users=user_totals({"": out}, {"": priv}))
    return out, report, seconds


def per_user(out: datasets.Dataset, column: str = "dp_epsilon") -> dict[int, float]:
    sums: dict[int, float] = {}
    for u, e in zip(out["uid"], out[column], strict=True):
        sums[u] = sums.get(u, 0.0) + float(e)
    return sums


def kept_share(out: datasets.Dataset, source: datasets.Dataset) -> float:
    """Share of privatized tokens released unchanged (position by position, rows matched by id)."""
    from hf_textdp.io.models import load_space
    from hf_textdp.space import CANDIDATE
    from hf_textdp.tokens import make_tokens

    space = load_space(MODEL, "cpu", "no_reserved")
    tokens = make_tokens(space)
    by_id = dict(zip(source["id"], source["text"], strict=True))
    enc = tokens.encode([by_id[i] for i in out["id"]])
    same = total = 0
    for row, ids in zip(enc, out["input_ids"], strict=True):
        cls, _ = space.classify(np.asarray(row.ids))
        cand = cls == CANDIDATE
        same += int((np.asarray(row.ids)[cand] == np.asarray(ids)[cand]).sum())
        total += int(cand.sum())
    return same / max(total, 1)


def survival(out: datasets.Dataset, source: datasets.Dataset) -> tuple[float, float, int]:
    """(share of name occurrences surviving, share of users with a surviving name, occurrences)."""
    by_id = {i: (t, s) for i, t, s in zip(source["id"], source["text"], source["spans"], strict=True)}
    hits = occ = 0
    exposed: dict[int, bool] = {}
    for i, u, text in zip(out["id"], out["uid"], out["text"], strict=True):
        src, spans = by_id[i]
        for a, b in spans:
            occ += 1
            alive = src[a:b].lower() in text.lower()
            hits += alive
            exposed[u] = exposed.get(u, False) or alive
    return hits / max(occ, 1), float(np.mean(list(exposed.values()))), occ


def _g(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _reading(s: dict[str, Any]) -> list[str]:
    """The findings, worded from the numbers (so a rerun rewrites them)."""
    pct = s["user_epsilon_no_budget"]["percentiles"]
    runs = {(r["bound"], r.get("percentile")): r for r in s["budget_runs"]}
    none, s90, s25 = runs[("none", None)], runs[("scale", 90)], runs[("scale", 25)]
    r90, r25 = runs[("rows", 90)], runs[("rows", 25)]
    plain, cons = s["names"][0], s["names"][1]
    a = s["args"]
    rows = np.sort(np.bincount(users_of(a["rows"], a["zipf"], a["max_rows_per_user"], seed=5601)))[::-1]
    top = float(rows[: int(np.ceil(0.1 * rows.size))].sum() / rows.sum())

    def acc(r: dict[str, Any]) -> str:
        return f"{r['accuracy'][0]:.1f} ± {r['accuracy'][1]:.1f} %"

    return [
        f"- **Per-user ε without a budget** runs from {_g(pct['0'])} to {_g(pct['100'])}: the median user has "
        f"{_g(pct['50'])}, the heaviest {float(pct['100']) / float(pct['50']):.0f}× as much. Row-level figures hide "
        "this: every row's dp_epsilon is of the same order, and the heavy users hold many rows.",
        f"- **`scale`** holds every user at or under B (max user ε {_g(s90['users']['user_epsilon_max'])} at "
        f"B = {_g(s90['budget'])}), and releases every row. Even at the 90th percentile, where it lowers only "
        f"{100 * s90['users']['share_at_budget']:.0f} % of users, the heaviest 10 % of users hold "
        f"{100 * top:.0f} % of the rows: tokens kept fall from "
        f"{100 * none['kept']:.1f} % to {100 * s90['kept']:.1f} % and accuracy from {acc(none)} to {acc(s90)}; at the "
        f"25th percentile, {100 * s25['kept']:.1f} % kept and {acc(s25)} (chance is 50 %).",
        f"- **`rows`** also holds every user under B but releases each kept row at the full ε (kept "
        f"{100 * r90['kept']:.1f} %): at the 90th percentile {r90['rows']} of {none['rows']} rows remain, scoring "
        f"{acc(r90)}; at the 25th, {r25['rows']} rows, {acc(r25)}. Its accuracy is measured on the rows it keeps "
        "(fewer training and test rows, hence the wider spread), so it is not comparable row for row with "
        "`scale`'s: `rows` trades coverage (rows and users' later rows dropped) for per-token quality, `scale` the "
        "reverse.",
        f"- **Consistent pseudonyms** leave the per-occurrence survival of names about where it was "
        f"({100 * plain['occurrence_survival']:.1f} % without, {100 * cons['occurrence_survival']:.1f} % with: one "
        "draw has the same law) but a user whose name appears k times is exposed by one draw instead of k: users "
        f"whose name survives somewhere fall from {100 * plain['user_exposure']:.1f} % to "
        f"{100 * cons['user_exposure']:.1f} %, and the names' cost is counted once (mean user ε "
        f"{_g(plain['mean_user_epsilon_total'])} → {_g(cons['mean_user_epsilon_total'])}). The price is the "
        "equality pattern: occurrences of one name are visibly the same pseudonym (selective.md §8).",
        "- Run times include the counting pass and the release of the 2,000 rows; `scale` at low budgets builds one "
        "madlib per level used, and `rows` releases fewer rows.",
    ]


def write_report(out_dir: Path, s: dict[str, Any]) -> None:
    """README.md (tables), budget.png and users.png from ``summary.json``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = s["args"]
    runs = s["budget_runs"]
    lines = [
        "# Per person: utility against the budget, per-user ε, identifier survival",
        "",
        "Generated by `scripts/users_evidence.py` (issue 56 item 5).",
        "",
        f"- command: `nice -n 10 python scripts/users_evidence.py --out {out_dir}` (repository root, nice'd, on a "
        "shared 2-core CPU)",
        f"- data: {a['rows']} MR rows (stratified sample), assigned to {s['users']} users by a Zipf law of rows per "
        f"user (a = {a['zipf']}, at most {a['max_rows_per_user']} rows; rows per user max "
        f"{s['rows_per_user']['max']}, median {s['rows_per_user']['median']:g}); each user's own full name (faker's "
        f"lists, `hf_textdp.evaluation.identifiers`) inserted in each of its rows with probability {a['name_rate']}",
        f"- release: madlib, {s['model']}, ε = {a['epsilon']:g} per token, seed {s['seed']}, "
        "`privatize_dataset` (counting pass included in the run times)",
        f"- accuracy: bag-of-vectors, {a['folds']}-fold CV, {a['inner']}-fold penalty search, train and test "
        "released (± the std over folds); clean text: "
        f"{s['clean_accuracy'][0]:.1f} ± {s['clean_accuracy'][1]:.1f} %",
        f"- total run time: {s['seconds_total']:.0f} s",
        "",
        "## Per-user ε without a budget",
        "",
        "A user's ε is the sum of its rows' `dp_epsilon` (dp_tokens × ε_tok each). With a Zipf law of rows, a few "
        "users carry most of the loss:",
        "",
        "| percentile | " + " | ".join(s["user_epsilon_no_budget"]["percentiles"]) + " |",
        "|---" * (1 + len(s["user_epsilon_no_budget"]["percentiles"])) + "|",
        "| user ε | " + " | ".join(_g(v) for v in s["user_epsilon_no_budget"]["percentiles"].values()) + " |",
        "",
        "![per-user ε](users.png)",
        "",
        "## Utility against the budget",
        "",
        "B is set at percentiles of the per-user ε above. `scale` lowers each user's per-token ε to the level "
        "(2^(−j/8) × ε) that fits; `rows` keeps a keyed prefix of each user's rows that fits and drops the rest. "
        "Kept: privatized tokens released unchanged.",
        "",
        "| bound | B (percentile) | rows released | max user ε | users at B | kept % | accuracy % | run s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        b = "none" if r["budget"] is None else f"{_g(r['budget'])} (p{r['percentile']})"
        u = r["users"]
        share = "—" if u["share_at_budget"] is None else f"{100 * u['share_at_budget']:.0f} %"
        lines.append(
            f"| {r['bound']} | {b} | {r['rows']} | {_g(u['user_epsilon_max'])} | {share} | {100 * r['kept']:.1f} | "
            f"{r['accuracy'][0]:.1f} ± {r['accuracy'][1]:.1f} | {r['seconds']:.0f} |"
        )
    lines += [
        "",
        "![accuracy against the budget](budget.png)",
        "",
        "## Identifier survival with and without consistent pseudonyms",
        "",
        f"Names are the sensitive class (the span column) at ε_s = {a['sensitive_epsilon']:g}, the other tokens at "
        f"ε = {a['epsilon']:g}. Survival: the name's exact string (case-folded) in the released row. Exposure: users "
        "whose name survives in at least one of their rows.",
        "",
        "| consistent | name occurrences | occurrences surviving | users exposed | mean user ε | max user ε | run s |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in s["names"]:
        lines.append(
            f"| {n['consistent'] or 'none'} | {n['occurrences']} | {100 * n['occurrence_survival']:.1f} % | "
            f"{100 * n['user_exposure']:.1f} % of {n['users_with_names']} | {_g(n['mean_user_epsilon_total'])} | "
            f"{_g(n['user_epsilon_max'])} | {n['seconds']:.0f} |"
        )
    lines += ["", "## Reading", "", *_reading(s), ""]
    (out_dir / "README.md").write_text("\n".join(lines), encoding="utf-8")

    fig, ax = plt.subplots(figsize=(6, 4))
    for bound, marker in (("scale", "o"), ("rows", "s")):
        sel = [r for r in runs if r["bound"] == bound]
        ax.errorbar([r["budget"] for r in sel], [r["accuracy"][0] for r in sel], [r["accuracy"][1] for r in sel],
                    marker=marker, capsize=3, label=f"bound = {bound}")  # fmt: skip
    none = runs[0]["accuracy"][0]
    ax.axhline(none, color="gray", ls="--", label=f"no budget ({none:.1f} %)")
    ax.axhline(s["clean_accuracy"][0], color="black", ls=":", label=f"clean ({s['clean_accuracy'][0]:.1f} %)")
    ax.set_xscale("log")
    ax.set_xlabel("budget B on each user's total ε (log scale)")
    ax.set_ylabel("accuracy % (bag of vectors, released train and test)")
    ax.set_title(f"MR, madlib ε = {a['epsilon']:g} per token, {s['users']} users")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_dir / "budget.png", dpi=120)
    plt.close(fig)

    vals = np.asarray(s["user_epsilon_no_budget"]["values"])
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.step(np.sort(vals), np.arange(1, vals.size + 1) / vals.size, where="post")
    for r in runs[1:5]:
        ax.axvline(r["budget"], color="gray", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("user's total ε without a budget (sum of its rows' dp_epsilon, log scale)")
    ax.set_ylabel("share of users at or below")
    ax.set_title("per-user ε (dotted: the budgets tried)")
    fig.tight_layout()
    fig.savefig(out_dir / "users.png", dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/users")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--zipf", type=float, default=1.8)
    ap.add_argument("--max-rows-per-user", type=int, default=150)
    ap.add_argument("--name-rate", type=float, default=0.5)
    ap.add_argument("--epsilon", type=float, default=90.0)
    ap.add_argument("--sensitive-epsilon", type=float, default=60.0)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--inner", type=int, default=3)
    ap.add_argument("--report-only", action="store_true", help="rewrite README.md and the plots from summary.json")
    args = ap.parse_args()
    if args.report_only:
        write_report(Path(args.out), json.loads((Path(args.out) / "summary.json").read_text(encoding="utf-8")))
        return
    from hf_textdp.evaluation.tasks import load_task

    t_start = time.perf_counter()
    task = load_task("mr", max_rows=args.rows)
    texts, labels = task.texts["all"], task.labels["all"]
    owner = users_of(len(texts), args.zipf, args.max_rows_per_user, seed=5601)
    named, spans = with_names(texts, owner, args.name_rate, seed=5601)
    ds = datasets.Dataset.from_dict(
        {"id": list(range(len(texts))), "text": named, "label": labels.tolist(), "uid": owner.tolist(), "spans": spans}
    )
    user = {"column": "uid", "keep_column": True}
    runs: list[dict[str, Any]] = []

    clean_acc = accuracy(named, labels, args.folds, args.inner)
    out, report, sec = release(ds, epsilon=args.epsilon, user=user)
    eps_users = np.asarray(list(per_user(out).values()))
    acc = accuracy(out["text"], np.asarray(out["label"]), args.folds, args.inner)
    base = {"bound": "none", "budget": None, "rows": len(out), "accuracy": acc, "kept": kept_share(out, ds),
            "seconds": sec, "users": report["users"]}  # fmt: skip
    runs.append(base)
    budgets = {q: float(np.percentile(eps_users, q)) for q in (90, 75, 50, 25)}
    for bound in ("scale", "rows"):
        for q, b in budgets.items():
            out, report, sec = release(ds, epsilon=args.epsilon, user={**user, "budget": b, "bound": bound})
            acc = accuracy(out["text"], np.asarray(out["label"]), args.folds, args.inner)
            totals = per_user(out)
            runs.append({"bound": bound, "budget": b, "percentile": q, "rows": len(out), "accuracy": acc,
                         "kept": kept_share(out, ds), "seconds": sec, "users": report["users"],
                         "max_user_epsilon": max(totals.values())})  # fmt: skip
            print(bound, q, b, runs[-1]["accuracy"], runs[-1]["rows"], flush=True)
    names = []
    for consistent in (None, "user"):
        sens = {"epsilon": args.sensitive_epsilon, "column": "spans", "detectors": [], "consistent": consistent}
        out, report, sec = release(ds, epsilon=args.epsilon, user=user, sensitive=sens)
        occ_rate, user_rate, n_occ = survival(out, ds)
        names.append({"consistent": consistent, "occurrences": n_occ, "occurrence_survival": occ_rate,
                      "user_exposure": user_rate, "seconds": sec, "users_with_names": int(len(set(
                          u for u, s in zip(ds["uid"], ds["spans"], strict=True) if s))),
                      "mean_user_epsilon_total": float(np.mean(list(per_user(out).values()))),
                      "user_epsilon_max": report["users"]["user_epsilon_max"]})  # fmt: skip
        print("names", consistent, occ_rate, user_rate, flush=True)
    summary = {
        "args": vars(args),
        "model": MODEL,
        "seed": "2**40 + 5601",
        "users": int(owner.max()) + 1,
        "rows_per_user": {"max": int(np.bincount(owner).max()), "median": float(np.median(np.bincount(owner)))},
        "clean_accuracy": clean_acc,
        "user_epsilon_no_budget": {
            "percentiles": {str(q): float(np.percentile(eps_users, q)) for q in (0, 10, 25, 50, 75, 90, 99, 100)},
            "values": sorted(eps_users.tolist()),
        },
        "budget_runs": runs,
        "names": names,
        "seconds_total": time.perf_counter() - t_start,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    write_report(out_dir, summary)
    print(json.dumps({k: v for k, v in summary.items() if k != "user_epsilon_no_budget"}, indent=1)[:3000])


if __name__ == "__main__":
    main()
