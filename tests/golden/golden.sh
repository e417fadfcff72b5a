#!/usr/bin/env bash
# Golden outputs (issue 16): what `mgm topo`, `mgm topo --json --bandwidth`, `mgm leak --json`,
# `mgm plan --json` and `mgm replay --json` say on the real files of ../shared/data, committed
# before the house is re-cut, so that the re-cut changes no answer. Timing fields of replay
# (host time, events per second, wall and CPU seconds) are masked: they are measurements.
# Usage: golden.sh MGM SHARED_DATA GOLDEN_DIR [--update]
# Exit 0: all equal; 1: a difference (shown); 77: ../shared/data absent (skipped).
set -uo pipefail
mgm=$1
data=$2
golden=$3
update=${4:-}
[[ -d $data/topologies && -d $data/nvidia-smi && -d $data/traces/dtr ]] || { echo "MGM_SKIP: $data is absent"; exit 77; }
out=$(mktemp -d "${TMPDIR:-/tmp}/mgm-golden.XXXXXX")
trap 'rm -rf "$out"' EXIT

# One case: a name and the command line; stdout and the exit code are the output.
run() {
  local name=$1
  shift
  {
    (cd "$data" && "$mgm" "$@" 2>/dev/null)
    echo "exit $?"
  } >"$out/$name.txt"
}
mask_timing() {
  jq -S 'walk(if type == "object" then with_entries(if (.key | test("^(host_ns_per_event|loop_ns_per_event|events_per_second|wall_seconds|cpu_seconds|measured_upstream_seconds)$")) then .value = "masked" else . end) else . end)'
}

for f in "$data"/topologies/*.txt "$data"/topologies/nccl-xml/*.xml; do
  rel=${f#"$data"/}
  base=$(basename "$f")
  run "topo.$base" topo --file "$rel"
  run "topo-json.$base" --json topo --file "$rel" --bandwidth
done
for f in "$data"/nvidia-smi/*.csv "$data"/nvidia-smi/*.xml "$data"/gpuz/*.txt; do
  rel=${f#"$data"/}
  run "leak-json.$(basename "$f")" --json leak "$rel"
done
for preset in dgx1-v100 dgx-a100 dgx-h100 hgx-h200 pcie-4gpu-mixed; do
  run "plan-json.$preset" --sim "$preset" --json plan --items 60000 --bytes-per-item 1MiB --reserve 1GiB --granularity 8
done
run "plan-json.h100-file-3090s" --sim topologies/topo_h100_8gpu_nv18_stas00_mlengineering.txt \
  --sim-devices '8x24GiB:RTX 3090' --json plan --items 50000 --bytes-per-item 1MiB
for trace in resnet32 unet transformer; do
  {
    (cd "$data" && "$mgm" --sim dgx-h100 --json replay "traces/dtr/$trace.rmm_log.csv" --allocator pool,cub,direct \
       --devices 2 --iterations 2 2>/dev/null | mask_timing)
    echo "exit ${PIPESTATUS[0]}"
  } >"$out/replay-json.$trace.txt"
done

if [[ $update == --update ]]; then
  rm -f "$golden"/*.txt
  cp "$out"/*.txt "$golden"/
  echo "updated $(ls "$out" | wc -l) golden files in $golden"
  exit 0
fi
status=0
for f in "$out"/*.txt; do
  name=$(basename "$f")
  if [[ ! -f $golden/$name ]]; then
    echo "FAIL: no golden file $name (run tests/golden/golden.sh MGM DATA DIR --update and commit it)"
    status=1
  elif ! diff -u "$golden/$name" "$f" >"$out/diff" 2>&1; then
    echo "FAIL: $name differs from its golden file:"
    head -40 "$out/diff"
    status=1
  fi
done
for g in "$golden"/*.txt; do
  [[ -f $out/$(basename "$g") ]] || { echo "FAIL: golden file $(basename "$g") has no case"; status=1; }
done
[[ $status -eq 0 ]] && echo "ok: $(ls "$out"/*.txt | wc -l) outputs equal their golden files"
exit $status
