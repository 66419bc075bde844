#!/usr/bin/env bash
# Installs everything edgenode needs to build and run on Debian 12, then builds it.
# Idempotent: every step checks before it acts, and says what it does.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix="$top/third_party/v8"   # git-ignored; holds libnode's headers and library
build_type=${EDGENODE_BUILD_TYPE:-RelWithDebInfo}

step() { printf '==> %s\n' "$*"; }

packages=(
  build-essential cmake pkg-config
  libuv1-dev node-llhttp android-libboringssl-dev libsqlite3-dev sqlite3
  libcmocka-dev libjansson-dev libssl-dev zlib1g-dev libicu-dev
  libicu72 libc-ares2 libnghttp2-14 libbrotli1 libuv1 libssl3 zlib1g
  nodejs npm wrk
  libsystemd-dev prometheus
  libcurl4-openssl-dev libseccomp-dev clang libclang-rt-14-dev openssl python3
  nats-server libnats-dev haproxy
)

sudo_if_needed() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
# Node.js and npm may come from outside Debian (a newer one is fine for the tests).
if command -v node >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}")
fi
if command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/npm}")
fi
missing=($(printf '%s\n' "${missing[@]}" | grep -v '^$' || true))

apt_updated=0
apt_update_once() {
  if [ "$apt_updated" = 0 ]; then
    step "apt-get update"
    sudo_if_needed apt-get update -qq
    apt_updated=1
  fi
}

if [ "${#missing[@]}" -gt 0 ]; then
  apt_update_once
  step "installing Debian packages: ${missing[*]}"
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  step "Debian packages already installed"
fi

# libnode-dev cannot be installed with apt where nodejs comes from elsewhere, so
# its files are unpacked into a prefix private to this checkout.
if [ ! -f "$prefix/.complete" ]; then
  apt_update_once
  step "downloading libnode108 and libnode-dev into $prefix"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download libnode108 libnode-dev >/dev/null)
  rm -rf "$prefix" && mkdir -p "$prefix"
  for deb in "$tmp"/*.deb; do dpkg-deb -x "$deb" "$prefix"; done
  touch "$prefix/.complete"
else
  step "V8 (libnode108) already unpacked in third_party/v8"
fi

# TypeScript modules: amaro, the type stripper Node.js uses (swc compiled to
# WebAssembly), pinned, from npm; CMake builds its dist/internal.js into the
# worker (isolate/typescript.cc). `npm pack` checks the tarball against the
# registry's integrity hash. Without it .ts modules are refused.
amaro_version=1.2.1
amaro_dir="$top/third_party/amaro"
if [ ! -f "$amaro_dir/.complete-$amaro_version" ]; then
  step "fetching amaro $amaro_version (npm) into third_party/amaro"
  atmp=$(mktemp -d)
  (cd "$atmp" && npm pack --silent "amaro@$amaro_version" >/dev/null)
  rm -rf "$amaro_dir" && mkdir -p "$amaro_dir"
  tar -xzf "$atmp/amaro-$amaro_version.tgz" -C "$amaro_dir" --strip-components=1
  rm -rf "$atmp"
  touch "$amaro_dir/.complete-$amaro_version"
else
  step "amaro $amaro_version already unpacked in third_party/amaro"
fi

# The memory-protection-key test (tests/mpk/) boots an emulated machine that
# has PKU: QEMU, a static busybox for its initramfs, and Debian's kernel. The
# kernel package is only unpacked (its /boot) into third_party/kernel/:
# installing it would run bootloader hooks, which fail in containers. None
# of this is needed to build or run edgenode: where it cannot be had, the
# test is skipped and says why.
mpk_packages=(qemu-system-x86 busybox-static)
mpk_missing=()
for p in "${mpk_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || mpk_missing+=("$p")
done
if [ "${#mpk_missing[@]}" -gt 0 ]; then
  apt_update_once
  step "installing packages for the emulated MPK test: ${mpk_missing[*]}"
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${mpk_missing[@]}" || step "could not install ${mpk_missing[*]}: the MPK test will be skipped"
else
  step "packages for the emulated MPK test already installed"
fi
kernel_dir="$top/third_party/kernel"
if [ ! -f "$kernel_dir/.complete" ]; then
  apt_update_once
  kernel_pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
               awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  ktmp=$(mktemp -d)
  if [ -n "$kernel_pkg" ] && (cd "$ktmp" && apt-get download "$kernel_pkg" >/dev/null 2>&1); then
    step "unpacking $kernel_pkg (linux-image-amd64) /boot into third_party/kernel"
    rm -rf "$kernel_dir" && mkdir -p "$kernel_dir"
    dpkg-deb --fsys-tarfile "$ktmp"/*.deb | tar -x -C "$kernel_dir" ./boot
    touch "$kernel_dir/.complete"
  else
    step "could not download linux-image-amd64: the MPK test will be skipped"
  fi
  rm -rf "$ktmp"
else
  step "kernel for the emulated MPK test already unpacked in third_party/kernel"
fi

# Python workers run on Pyodide (docs/python.md): its npm package, pinned,
# in the build tree, where edgenode-worker looks by default (--python-dir).
# 0.27.x ships a classic script a bare V8 embedder can run; 314 ships only
# an ES module that needs import.meta.url.
pyodide_version=0.27.7
pyodide_dir="$top/build/pyodide"
if [ ! -f "$pyodide_dir/node_modules/pyodide/pyodide.asm.wasm" ] ||
   ! grep -q "\"version\": \"$pyodide_version\"" "$pyodide_dir/node_modules/pyodide/package.json"; then
  step "installing pyodide@$pyodide_version (npm) into build/pyodide"
  mkdir -p "$pyodide_dir"
  npm install --prefix "$pyodide_dir" --no-audit --no-fund --no-save --loglevel=error \
    "pyodide@$pyodide_version" >/dev/null
else
  step "pyodide@$pyodide_version already in build/pyodide"
fi

step "configuring (build/, $build_type)"
cmake -S "$top" -B "$top/build" -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
step "building"
cmake --build "$top/build" -j"$(nproc)"
step "done: binaries in build/bin/"
