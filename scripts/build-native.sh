#!/usr/bin/env bash
# Builds native/ed25519 (Ed25519 verify on ed25519-dalek under libsodium's rules; optional)
# into the venv of $1 (default .venv/bin/python). Needs a Rust toolchain (cargo) and the crates;
# without cargo, or if the build fails, it says so and exits 0: envelopes then verify on
# libsodium, as before (pipeline/envelope/ed25519.py). On x86-64 the module is built for
# x86-64-v3 (BMI2: a third faster than the baseline x86-64 build); the loader uses it only on a
# CPU that has those instructions.
set -euo pipefail
py="${1:-.venv/bin/python}"
cd "$(dirname "$0")/.."
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"  # rustup's default place, off a non-login shell's PATH
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "native: no Rust toolchain (cargo), fleet_ed25519 not built: Ed25519 verify stays on libsodium" >&2
  exit 0
fi
src=native/ed25519
stamp="$(dirname "$py")/../.installed-native"
if [ -f "$stamp" ] && [ -z "$(find "$src" -newer "$stamp" -not -path '*/target/*' -print -quit)" ] \
  && "$py" -c 'import fleet_ed25519' 2>/dev/null; then
  echo "native: fleet_ed25519 is up to date"
  exit 0
fi
flags=""
if [ "$(uname -m)" = x86_64 ]; then flags="-C target-cpu=x86-64-v3"; fi
if ! RUSTFLAGS="$flags" "$py" -m pip install -q "./$src"; then
  # the demo must not fail for an optional speed-up (no crates registry, an old toolchain):
  # say so loudly and go on; the suite's test_the_native_verifier_is_in_use_wherever_it_could_be_built
  # fails where cargo is and the module is not, so CI cannot miss it
  echo "native: building fleet_ed25519 FAILED (above): Ed25519 verify stays on libsodium" >&2
  exit 0
fi
touch "$stamp"
echo "native: built fleet_ed25519 (ed25519-dalek; RUSTFLAGS=$flags)"
