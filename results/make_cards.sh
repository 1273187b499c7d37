#!/usr/bin/env bash
# Render the results cards (model-index) of every results folder into model_cards/, and the summary table.
set -eu
export HF_HUB_OFFLINE=1
# the folders of `hf-textdp evaluate` results, one per line (results/attacks and the like have their own README);
# an import error stops the script here instead of skipping every folder
folders=$(python -c "
import glob
from hf_textdp.integrations.cards import is_results_folder
print('\n'.join(d for d in sorted(glob.glob('results/*/')) if is_results_folder(d)))
")
for d in $folders; do
  hf-textdp card "$d" --output "model_cards/results_$(basename "$d").md" --overwrite
done
python -c "from hf_textdp.evaluation.summary import write_summary; print(write_summary('results'))"
