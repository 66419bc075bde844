#!/usr/bin/env bash
# Runs a test binary on an emulated x86-64 machine that has memory protection
# keys: QEMU's TCG with `-cpu max` emulates PKU, whatever the host CPU has.
#
#   run.sh TEST_BINARY WORK_DIR [ARGS...]     (ARGS default: --expect on)
#
# Boots Debian's own kernel (linux-image-amd64, which has
# CONFIG_X86_INTEL_MEMORY_PROTECTION_KEYS=y) with an initramfs made here:
# busybox-static, an init script, the binary, every library ldd names and
# the dynamic loader. The init script runs the binary and powers off; its
# output comes back on the serial console, which this script prints and
# searches for the binary's "MPK-TEST: PASS" line.
#
# Exit status: 0 passed, 1 failed, 77 skipped (QEMU, the kernel or
# busybox-static missing: deploy/setup.sh installs them), with the reason.
#
# Environment: EDGENODE_MPK_KERNEL (a vmlinuz; default: the one
# deploy/setup.sh unpacked into third_party/kernel/), QEMU_TIMEOUT (seconds, 150).
set -euo pipefail

binary=${1:?usage: run.sh TEST_BINARY WORK_DIR [ARGS...]}
work=${2:?usage: run.sh TEST_BINARY WORK_DIR [ARGS...]}
shift 2
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--expect on)

source_dir=${EDGENODE_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
skip() { echo "SKIP: $*"; exit 77; }

qemu=$(command -v qemu-system-x86_64 || true)
[ -n "$qemu" ] || skip "qemu-system-x86_64 not found (Debian package qemu-system-x86; deploy/setup.sh installs it)"
kernel=${EDGENODE_MPK_KERNEL:-}
if [ -z "$kernel" ]; then
  kernel=$(ls "$source_dir"/third_party/kernel/boot/vmlinuz-* 2>/dev/null | sort -V | tail -n1 || true)
fi
[ -n "$kernel" ] && [ -r "$kernel" ] ||
  skip "no kernel: deploy/setup.sh unpacks Debian's linux-image-amd64 into third_party/kernel/ (or set EDGENODE_MPK_KERNEL)"
busybox=/bin/busybox
[ -x "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 ||
  skip "no static busybox at /bin/busybox (Debian package busybox-static; deploy/setup.sh installs it)"

# ---- the initramfs ----
root=$work/root
rm -rf "$root"
mkdir -p "$root"/{bin,proc,sys,dev,tmp}
cp "$busybox" "$root/bin/busybox"
cp -L "$binary" "$root/bin/test"

# Every library in /libs (found through LD_LIBRARY_PATH, not the rpath: a
# checkout under /tmp would be hidden by the tmpfs mounted there), and the
# dynamic loader at the path the binary names.
mkdir -p "$root/libs"
ldd "$binary" | while read -r first second third _; do
  if [ "$second" = "=>" ] && [ -n "$third" ] && [ "${third#/}" != "$third" ]; then
    cp -L "$third" "$root/libs/$(basename "$third")"
  elif [ "${first#/}" != "$first" ]; then
    mkdir -p "$root$(dirname "$first")"
    cp -L "$first" "$root$first"
  fi
done

cat > "$root/init" <<EOF
#!/bin/busybox sh
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev
/bin/busybox mount -t tmpfs tmp /tmp
echo "mpk: kernel \$(/bin/busybox uname -r), cpu flags: \$(/bin/busybox grep -o -w -m2 -e pku -e ospke /proc/cpuinfo | /bin/busybox tr '\n' ' ')"
LD_LIBRARY_PATH=/libs ASAN_OPTIONS=quarantine_size_mb=32:${ASAN_OPTIONS:-} /bin/test ${args[*]} 2>&1
echo "mpk: test exited with status \$?"
/bin/busybox poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | "$busybox" cpio -o -H newc 2>/dev/null) > "$work/initramfs.cpio"
echo "initramfs: $(du -m "$work/initramfs.cpio" | cut -f1) MB, kernel $(basename "$kernel")"

# ---- the emulated machine ----
log=$work/console.log
start=$(date +%s)
set +e
# Room for a sanitizer build too, whose allocator holds freed memory back
# (its quarantine, kept small above).
timeout "${QEMU_TIMEOUT:-150}" "$qemu" -accel tcg -cpu max -m 1024 -smp 1 \
  -display none -no-reboot -monitor none -serial stdio \
  -kernel "$kernel" -initrd "$work/initramfs.cpio" \
  -append "console=ttyS0 quiet panic=-1 rdinit=/init" </dev/null >"$log" 2>&1
rc=$?
set -e
# The console has carriage returns and the firmware's escape sequences.
tr -d '\r' <"$log" | sed -e 's/\x1b\[[0-9;?]*[a-zA-Z]//g' -e 's/\x1bc//g' >"$log.txt"
sed -n '/^mpk: kernel/,$p' "$log.txt"
echo "qemu: exit status $rc after $(( $(date +%s) - start )) s"
if grep -q '^MPK-TEST: PASS' "$log.txt"; then
  exit 0
fi
[ $rc -eq 124 ] && echo "qemu: timed out"
grep -q '^mpk: kernel' "$log.txt" || { echo "the machine did not boot:"; tail -n 30 "$log.txt"; }
exit 1
