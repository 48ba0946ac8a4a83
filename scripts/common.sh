# Shared set-up for scripts/demo and scripts/test: the pinned toolchain and
# its Wasm target (from rust-toolchain.toml), and the plugins built for Wasm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# rustup installs the toolchain pinned in rust-toolchain.toml on first use;
# make sure its Wasm targets are there too (wasm32-unknown-unknown for the
# plugins, wasm32-wasip2 for the test guests that use WASI).
rustup show active-toolchain >/dev/null
for target in wasm32-unknown-unknown wasm32-wasip2; do
  if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
  fi
done

WASM_TARGET_DIR=target/wasm
WASM_OUT="$WASM_TARGET_DIR/wasm32-unknown-unknown/plugin"

# build_plugins NAME... : compile plugin crates to Wasm without WASI (core
# modules carrying their world's types; the host makes them components).
build_plugins() {
  local args=()
  for p in "$@"; do args+=(-p "$p"); done
  cargo build --profile plugin --target wasm32-unknown-unknown --target-dir "$WASM_TARGET_DIR" "${args[@]}"
}

# build_wasi_plugins NAME... : compile plugin crates to Wasm components that
# import WASI (wasm32-wasip2).
build_wasi_plugins() {
  local args=()
  for p in "$@"; do args+=(-p "$p"); done
  cargo build --profile plugin --target wasm32-wasip2 --target-dir "$WASM_TARGET_DIR" "${args[@]}"
}

# ensure_apt PACKAGE... : install Debian packages that are missing.
ensure_apt() {
  local missing=()
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "==> installing ${missing[*]} (apt-get)"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
}

# ensure_kubectl : a real kubectl for tests/kubectl.rs. Installs Debian's
# kubernetes-client; when another package owns /usr/bin/kubectl (the gcloud
# SDK's dispatcher), unpacks the same package into
# target/tools/kubernetes-client instead, where the tests look for it.
ensure_kubectl() {
  dpkg-query -W -f='${Status}' kubernetes-client 2>/dev/null | grep -q "ok installed" && return 0
  if [ ! -e /usr/bin/kubectl ]; then
    ensure_apt kubernetes-client
    return 0
  fi
  local dir=target/tools/kubernetes-client
  [ -x "$dir/usr/bin/kubectl" ] && return 0
  echo "==> unpacking Debian's kubernetes-client into $dir (/usr/bin/kubectl belongs to another package)"
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq
  local tmp
  tmp=$(mktemp -d)
  (cd "$tmp" && apt-get download -qq kubernetes-client)
  mkdir -p "$dir"
  dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$dir"
  rm -rf "$tmp"
}
