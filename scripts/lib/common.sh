# Shared by the project's scripts: the CUDA toolkit on PATH, and Debian packages installed when
# missing (as root with apt-get; otherwise the exact command is printed and the script fails).

mgm_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The packages each kind of build needs.
MGM_BUILD_PACKAGES=(cmake ninja-build g++ make pkg-config nlohmann-json3-dev libcli11-dev libpugixml-dev libfmt-dev libboost-dev)
MGM_TEST_PACKAGES=(catch2 libbenchmark-dev librapidcheck-dev jq python3 python3-pytest python3-yaml librsvg2-bin prometheus)
MGM_CI_PACKAGES=(clang-14 libclang-rt-14-dev valgrind)

mgm_find_cuda() {
  if ! command -v nvcc >/dev/null 2>&1; then
    for d in /usr/local/cuda/bin /usr/local/cuda-13.0/bin /usr/lib/cuda/bin; do
      if [ -x "$d/nvcc" ]; then
        export PATH="$d:$PATH"
        break
      fi
    done
  fi
  if ! command -v nvcc >/dev/null 2>&1; then
    echo "error: the CUDA toolkit (nvcc, cudart, CCCL) was not found on PATH or in /usr/local/cuda." >&2
    echo "       Install CUDA 13 from NVIDIA's repository (package cuda-toolkit-13-0), then run this again." >&2
    return 1
  fi
}

# mgm_need_packages PKG... : installs those not installed yet.
mgm_need_packages() {
  local missing=()
  local p
  for p in "$@"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages: ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "error: missing Debian packages. Install them with:" >&2
    echo "  sudo apt-get install -y ${missing[*]}" >&2
    return 1
  fi
}
