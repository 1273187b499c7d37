#!/usr/bin/env bash
# The experiment runs behind results/README.md, in order, resumable (finished results are skipped).
# Run from the repository root: nice -n 10 bash results/run_all.sh
set -u
export HF_HUB_OFFLINE=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1
# One thread each for torch and BLAS: on 2 shared cores, 2 spinning threads ran madlib 5x and the
# logistic regressions 40x slower than 1 thread.
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for recipe in seed_000_privemb seed_001_truncated_laplace seed_003_rank senteval_bov_madlib seed_004_tem \
              senteval_minilm_madlib finetune_trec quick; do
  start=$(date +%s)
  echo "=== $recipe $(date -u +%H:%M:%S)"
  hf-textdp evaluate "recipes/$recipe.yaml" --output results/ || echo "!!! $recipe failed"
  echo "=== $recipe done in $(( $(date +%s) - start )) s"
done
