#!/usr/bin/env bash
# The installed `mgm` runs where only the driver is (issue 15): installed into a fresh prefix, its
# ELF NEEDED entries are only libc, libm, libstdc++, libgcc_s, the loader, libpthread, libdl and
# librt; and with the CUDA toolkit's library folder hidden (a private mount namespace with a tmpfs
# over it), it starts, runs on the simulator, and says "no GPU" with exit 3 instead of a loader
# error (127).
# Usage: installed_tool_test.sh BUILD_DIR CUDA_LIBRARY_DIR. Exit 77 (skipped) where mount
# namespaces cannot be made.
set -euo pipefail
build=$1
cuda_lib=$2
prefix=$(mktemp -d "${TMPDIR:-/tmp}/mgm-install.XXXXXX")
trap 'rm -rf "$prefix"' EXIT

cmake --install "$build" --prefix "$prefix" >/dev/null
mgm="$prefix/bin/mgm"
[[ -x $mgm ]] || { echo "FAIL: $mgm was not installed"; exit 1; }

allowed='^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2|ld-linux-aarch64\.so\.1|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1)$'
status=0
for bin in "$prefix"/bin/*; do
  while read -r lib; do
    if ! [[ $lib =~ $allowed ]]; then
      echo "FAIL: $(basename "$bin") needs $lib"
      status=1
    fi
  done < <(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
done
[[ $status -eq 0 ]] || exit 1
echo "ok: every installed binary needs only libc, libm, libstdc++, libgcc_s and the loader"

if [[ -e $cuda_lib/libc.so.6 || -n $(ls "$cuda_lib"/libstdc++.so* 2>/dev/null) ]]; then
  echo "SKIP: the toolkit's libraries are in the system folder $cuda_lib (a distribution's toolkit): it cannot be hidden alone"
  exit 77
fi
if ! unshare -rm true 2>/dev/null && ! unshare -m true 2>/dev/null; then
  echo "SKIP: no mount namespace can be made here (unshare -m)"
  exit 77
fi
userns=-r
unshare -rm true 2>/dev/null || userns=
# Inside: the toolkit's libraries (and the real folder behind a symbolic link) are gone.
unshare $userns -m bash -s "$mgm" "$cuda_lib" <<'INNER'
set -uo pipefail
mgm=$1
cuda_lib=$2
for d in "$cuda_lib" "$(readlink -f "$cuda_lib")"; do
  [[ -d $d ]] && mount -t tmpfs none "$d"
done
if ls "$cuda_lib"/libcudart.so* >/dev/null 2>&1; then echo "FAIL: $cuda_lib is still visible"; exit 1; fi
unset LD_LIBRARY_PATH
out=$("$mgm" --version 2>&1); rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: mgm --version exited $rc: $out"; exit 1; }
out=$("$mgm" --sim dgx-h100 status 2>&1); rc=$?
[[ $rc -eq 0 && $out == *"8 GPUs"* ]] || { echo "FAIL: mgm --sim dgx-h100 status exited $rc: $out"; exit 1; }
# No NVML and no CUDA device (a GPU machine's libcuda.so.1 is not in the toolkit's folder).
out=$(MGM_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 CUDA_VISIBLE_DEVICES= "$mgm" status 2>&1); rc=$?
[[ $rc -eq 3 && $out == *"no GPU can be used"* ]] || { echo "FAIL: mgm status without a driver exited $rc: $out"; exit 1; }
echo "ok: with $cuda_lib hidden, mgm starts, simulates, and says 'no GPU' (exit 3) without a driver"
INNER
