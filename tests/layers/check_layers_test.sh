#!/usr/bin/env bash
# The layering gate: it passes on the tree, and fails on its fixtures (an upward include; a cycle of
# includes), naming the file and line; a clean fixture passes.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
check=("/usr/bin/python3" "$root/tools/layers/check_layers.py" --table "$root/tools/layers/layers.txt")
status=0
expect() {  # expect RC PATTERN ROOT
  local want=$1 pattern=$2 tree=$3 out rc
  out=$("${check[@]}" --root "$tree" 2>&1); rc=$?
  if [[ $rc -ne $want || $out != *"$pattern"* ]]; then
    echo "FAIL: on $tree expected exit $want and '$pattern', got exit $rc:"
    echo "$out"
    status=1
  else
    echo "ok: $(basename "$tree"): exit $rc, $pattern"
  fi
}
expect 0 "allowed edges" "$root"
expect 1 "include/mgm/pool/observed_pool.hpp:3: pool includes include/mgm/telemetry/registry.hpp of telemetry, an edge the table does not allow" "$here/upward"
expect 1 "a cycle of includes between files: include/mgm/pool/a.hpp -> include/mgm/pool/b.hpp -> include/mgm/pool/a.hpp" "$here/cycle"
expect 0 "allowed edges" "$here/clean"
exit $status
