#!/usr/bin/env bash
# Second pass (after run_all.sh): denser epsilon grids for seeds 000/001 (resume skips finished points),
# then five noise seeds at their comparison points. Run from the repository root.
set -u
export HF_HUB_OFFLINE=1 HF_DATASETS_DISABLE_PROGRESS_BARS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for recipe in seed_000_privemb seed_001_truncated_laplace seed_004_tem seed_claims_repeats senteval_minilm_madlib; do
  start=$(date +%s)
  echo "=== $recipe $(date -u +%H:%M:%S)"
  hf-textdp evaluate "recipes/$recipe.yaml" --output results/ || echo "!!! $recipe failed"
  echo "=== $recipe done in $(( $(date +%s) - start )) s"
done
