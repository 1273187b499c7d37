#!/usr/bin/env bash
# Render the results cards (model-index) of every results folder into model_cards/, and the summary table.
set -eu
export HF_HUB_OFFLINE=1
for d in results/*/; do
  name=$(basename "$d")
  # only folders of `hf-textdp evaluate` results have a results card (results/attacks has its own README)
  python -c "import sys; from hf_textdp.cards import is_results_folder; sys.exit(not is_results_folder(sys.argv[1]))" "$d" \
    || continue
  hf-textdp card "$d" --output "model_cards/results_${name}.md" --overwrite
done
python -c "from hf_textdp.evaluation.summary import write_summary; print(write_summary('results'))"
