# Shared set-up for scripts/demo and scripts/test: the pinned toolchain and
# its Wasm target (from rust-toolchain.toml), and the plugins built for Wasm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# rustup installs the toolchain pinned in rust-toolchain.toml on first use;
# make sure its wasm32-wasip2 target is there too.
rustup show active-toolchain >/dev/null
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi

WASM_TARGET_DIR=target/wasm
WASM_OUT="$WASM_TARGET_DIR/wasm32-wasip2/plugin"

# build_plugins NAME... : compile plugin crates to Wasm components.
build_plugins() {
  local args=()
  for p in "$@"; do args+=(-p "$p"); done
  cargo build --profile plugin --target wasm32-wasip2 --target-dir "$WASM_TARGET_DIR" "${args[@]}"
}
