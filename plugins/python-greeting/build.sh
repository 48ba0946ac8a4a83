#!/usr/bin/env bash
# Build the Python Greeting reconciler into OUT_DIR/python-greeting.wasm, with
# its settings file OUT_DIR/python-greeting.toml beside it.
#
#   plugins/python-greeting/build.sh OUT_DIR
#
# Needs componentize-py (pip install componentize-py==0.25.1).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
WIT="$(cd "$HERE/../../wit" && pwd)"
OUT="${1:?usage: build.sh OUT_DIR}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

command -v componentize-py >/dev/null || {
  echo "componentize-py not found: pip install componentize-py==0.25.1" >&2
  exit 1
}

WORK="$(mktemp -d -t python-greeting.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
cp "$HERE/app.py" "$WORK/"
# Embed the CRD as a Python module, so the component reads no file at run time.
python3 -c 'import json,sys; crd=json.dumps(json.load(open(sys.argv[1])), separators=(",", ":")); print("CRD = " + repr(crd))' \
  "$HERE/crds/greeting.json" >"$WORK/crd_json.py"

# A temporary name of this build's own, then an atomic rename: test
# processes may build into the same OUT_DIR at once.
(cd "$WORK" && componentize-py -d "$WIT" -w reconciler componentize app -o "$OUT/python-greeting.wasm.tmp.$$")
mv "$OUT/python-greeting.wasm.tmp.$$" "$OUT/python-greeting.wasm"
cp "$HERE/python-greeting.toml" "$OUT/python-greeting.toml.tmp.$$"
mv "$OUT/python-greeting.toml.tmp.$$" "$OUT/python-greeting.toml"
