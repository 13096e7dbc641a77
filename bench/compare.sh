#!/usr/bin/env bash
# Side-by-side benchmarks: tether against the raw limit (bench/limit, a bare
# tokio-tungstenite broadcaster) and Socket.IO 4.8 (bench/socketio, connection
# state recovery on), all driven by the same generator (`tether bench load`).
#
# Every scenario runs against each server back to back; the server (started by
# the generator) is pinned to CPU 0 with taskset, the generator to CPU 1. The
# JSON reports go to $OUT, and the table replaces what is between
# `<!-- compare:begin -->` and `<!-- compare:end -->` in docs/BENCHMARKS.md.
#
# Knobs (environment): STEPS (fanout deliveries/s aimed at, comma-separated),
# TURN_STEPS (turns: durable deliveries/s aimed at), STEP_SECS, CONNECTIONS
# (idle), STORM_RATE (events/s), OUT, TARGETS, SCENARIOS; RENDER_ONLY=1
# rewrites the table from the reports in $OUT without running anything.
# tether runs with its default durability (`--synchronous full`); the turn
# shape also runs once more on tether with `normal` (turns-tether-normal).
# Takes about 15 minutes with the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."

STEPS=${STEPS:-5000,10000,20000,50000,100000,200000,300000,400000}
TURN_STEPS=${TURN_STEPS:-5000,10000,20000,35000,50000,75000,100000,150000}
STEP_SECS=${STEP_SECS:-5}
CONNECTIONS=${CONNECTIONS:-10000}
STORM_RATE=${STORM_RATE:-2000}
OUT=${OUT:-target/compare}
TARGETS=${TARGETS:-tether limit socketio}
SCENARIOS=${SCENARIOS:-turns fanout storm idle}
DOC=docs/BENCHMARKS.md

need() { command -v "$1" >/dev/null 2>&1 || { echo "compare.sh: $1 is required" >&2; exit 1; }; }
need node
need npm
need taskset
if ! command -v jq >/dev/null 2>&1; then
    echo "== apt-get install jq"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null
fi

if [ -z "${RENDER_ONLY:-}" ]; then
echo "== npm ci (bench/socketio)"
(cd bench/socketio && npm ci --no-audit --no-fund --silent)

echo "== cargo build --release"
cargo build --release -p tether -p tether-bench -p tether-bench-limit
BIN=target/release/tether

mkdir -p "$OUT"
for scenario in $SCENARIOS; do
    case $scenario in
        fanout) args=(--sessions 250 --peers 4 --steps "$STEPS" --step-secs "$STEP_SECS") ;;
        storm) args=(--sessions 250 --peers 4 --rate "$STORM_RATE") ;;
        idle) args=(--sessions 250 --connections "$CONNECTIONS") ;;
        turns) args=(--sessions 100 --peers 10 --steps "$TURN_STEPS" --step-secs "$STEP_SECS") ;;
        *) echo "unknown scenario $scenario" >&2; exit 64 ;;
    esac
    runs=$TARGETS
    if [ "$scenario" = turns ] && [[ " $TARGETS " == *" tether "* ]]; then
        runs="$runs tether-normal"
    fi
    for run in $runs; do
        target=${run%-normal}
        sync=full
        [ "$run" = tether-normal ] && sync=normal
        echo "== $scenario / $run"
        TETHER_SYNCHRONOUS=$sync taskset -c 1 "$BIN" bench load --target "$target" --scenario "$scenario" \
            --server-cpu 0 --client-cpu 1 "${args[@]}" \
            >"$OUT/$scenario-$run.json" 2>"$OUT/$scenario-$run.log" \
            || { echo "failed, see $OUT/$scenario-$run.log" >&2; tail -5 "$OUT/$scenario-$run.log" >&2; }
        tail -1 "$OUT/$scenario-$run.json" | cut -c1-300
    done
done
fi

# ---- the table ----------------------------------------------------------

# get FILE JQ-EXPR: the value, or "–" when the run or the figure is missing.
get() {
    local f="$OUT/$1.json"
    [ -s "$f" ] || { echo "–"; return; }
    tail -1 "$f" | jq -r "($2) // \"–\" | if type == \"number\" then (. * 100 | round / 100 | tostring) else tostring end" 2>/dev/null || echo "–"
}
# ratio A B: A ÷ B as "0.42×", or "–".
ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b + 0 > 0) printf "%.2f×", a / b; else printf "–" }'
}
# row LABEL SCENARIO JQ-EXPR: one table row over the three targets.
row() {
    local t l s
    t=$(get "$2-tether" "$3"); l=$(get "$2-limit" "$3"); s=$(get "$2-socketio" "$3")
    echo "| $1 | $t | $l | $s | $(ratio "$t" "$l") | $(ratio "$t" "$s") |"
}
# The step of a fanout run that aimed at N deliveries/s (its last attempt).
step() { echo "([.steps[] | select(.target_deliveries_per_s == $1)] | last)"; }
# The step of a turns run that aimed at N durable deliveries/s.
tstep() { echo "([.steps[] | select(.target_durable_deliveries_per_s == $1)] | last)"; }
# The highest clean step of a turns run.
CLEAN='([.steps[] | select(.clean)] | max_by(.durable_deliveries_per_s))'
# row4 LABEL SCENARIO JQ-EXPR: tether (full), tether (normal), limit,
# Socket.IO, and tether (full) over each baseline.
row4() {
    local t n l s
    t=$(get "$2-tether" "$3"); n=$(get "$2-tether-normal" "$3")
    l=$(get "$2-limit" "$3"); s=$(get "$2-socketio" "$3")
    echo "| $1 | $t | $n | $l | $s | $(ratio "$t" "$l") | $(ratio "$t" "$s") |"
}
# The generator's CPU, flagged where it passed 80 % (the figure then
# measures the generator).
GEN='if . == null then null elif . > 80 then "\(.) ⚠ generator-bound" else . end'
turns_table() {
    echo "| turns: 100 sessions × 10 clients, one driver per session, 5 durable events + 10 deltas per turn | tether (full) | tether (normal) | limit | Socket.IO | tether/limit | tether/Socket.IO |"
    echo "|---|---|---|---|---|---|---|"
    row4 "clean rate: durable deliveries/s (all delivered once, p99 < 200 ms)" turns ".clean_durable_deliveries_per_s"
    row4 "clean rate: events delivered/s (durable + deltas, however merged)" turns ".clean_events_delivered_per_s"
    row4 "clean rate: wire frames/s" turns "$CLEAN.wire_frames_per_s"
    row4 "clean rate: p50 / p99 ms of message.complete" turns "$CLEAN.latency_ms | if . == null then null else \"\(.p50) / \(.p99)\" end"
    row4 "clean rate: server CPU %" turns "$CLEAN.server_cpu_pct"
    row4 "clean rate: generator CPU %" turns "$CLEAN.generator_cpu_pct | $GEN"
    row4 "highest events delivered/s (any step)" turns ".saturation_events_delivered_per_s"
    local aim
    for aim in ${TURN_STEPS//,/ }; do
        row4 "aim $aim/s: durable / events / frames per s" turns \
            "$(tstep "$aim") | if . == null then null else \"\(.durable_deliveries_per_s) / \(.events_delivered_per_s) / \(.wire_frames_per_s)\" end"
        row4 "aim $aim/s: delivered, clean" turns \
            "$(tstep "$aim") | if . == null then null else \"\(.delivered_ratio), \(.clean)\" end"
        row4 "aim $aim/s: p50 / p99 / p99.9 ms" turns \
            "$(tstep "$aim") | if . == null then null else .latency_ms | \"\(.p50) / \(.p99) / \(.p999)\" end"
        row4 "aim $aim/s: server / hosts / generator CPU %" turns \
            "$(tstep "$aim") | if . == null then null else \"\(.server_cpu_pct) / \(.hosts_cpu_pct) / \(.generator_cpu_pct)\" end"
        row4 "aim $aim/s: server RSS MiB, largest host RSS MiB" turns \
            "$(tstep "$aim") | if . == null then null else \"\(.server_rss_kib / 1024 | floor) / \(.host_max_rss_kib / 1024 | floor)\" end"
    done
    row4 "ramp stopped because" turns ".stopped"
    row4 "server peak RSS MiB" turns ".server_peak_rss_kib / 1024"
    echo
}
# The step with the highest achieved rate.
SAT='(.steps | max_by(.deliveries_per_s))'

table() {
    local commit dirty cpu
    commit=$(git rev-parse --short HEAD)
    dirty=$(git diff --quiet HEAD -- . 2>/dev/null || echo " plus uncommitted changes")
    cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)
    echo "Machine: ${cpu:-unknown CPU}, $(nproc) CPUs, $(free -g | awk '/^Mem:/ {print $2}') GiB;"
    echo "$(date -u +%Y-%m-%d), commit \`$commit\`$dirty, \`bench/compare.sh\`"
    echo "(STEPS=$STEPS, TURN_STEPS=$TURN_STEPS, STEP_SECS=$STEP_SECS, STORM_RATE=$STORM_RATE, CONNECTIONS=$CONNECTIONS)."
    echo "Servers pinned to cpu0, the generator to cpu1. Ratios are tether ÷ baseline."
    echo
    echo "**tether writes every event to SQLite before any client sees it; the"
    echo "limit and Socket.IO persist nothing** (Socket.IO keeps its recovery"
    echo "buffer in memory). tether's events also come from compute-host"
    echo "processes (echo \`/flood\`, or real turns through echo) on cpu0, whose"
    echo "CPU is counted apart. tether runs with \`--synchronous full\` (an fsync"
    echo "per group commit) unless the column says \`normal\`."
    echo
    turns_table
    echo "| fanout, 250 sessions × 4 clients, 100-byte events | tether | limit | Socket.IO | tether/limit | tether/Socket.IO |"
    echo "|---|---|---|---|---|---|"
    row "deliveries/s at saturation (highest achieved)" fanout ".saturation_deliveries_per_s"
    row "p99 ms at that step" fanout "$SAT.latency_ms.p99"
    row "server CPU % at that step" fanout "$SAT.server_cpu_pct"
    row "compute hosts CPU % at that step" fanout "$SAT.hosts_cpu_pct"
    row "generator CPU % at that step" fanout "$SAT.generator_cpu_pct"
    local aim
    for aim in ${STEPS//,/ }; do
        row "aim $aim/s: delivered/s" fanout "$(step "$aim").deliveries_per_s"
        row "aim $aim/s: delivered ratio" fanout "$(step "$aim").delivered_ratio"
        row "aim $aim/s: p50 / p99 / p99.9 ms" fanout \
            "$(step "$aim") | if . == null then null else .latency_ms | \"\(.p50) / \(.p99) / \(.p999)\" end"
        row "aim $aim/s: server CPU %" fanout "$(step "$aim").server_cpu_pct"
    done
    row "gaps + dups over all steps" fanout "[.steps[] | .gaps + .dups] | add"
    row "ramp stopped because" fanout ".stopped"
    row "server peak RSS MiB" fanout ".server_peak_rss_kib / 1024"
    row "compute hosts peak RSS MiB" fanout ".hosts_peak_rss_kib / 1024"
    echo
    echo "| storm: 1000 clients drop at once and come back, $STORM_RATE events/s | tether | limit | Socket.IO | tether/limit | tether/Socket.IO |"
    echo "|---|---|---|---|---|---|"
    row "delivered ratio" storm ".delivered_ratio"
    row "lost events" storm ".lost"
    row "duplicates" storm ".dups"
    row "clients recovered (replayed what they missed)" storm ".recovered_clients"
    row "clients caught up" storm ".caught_up_clients"
    row "caught up p50 / p99 / max ms" storm \
        '.caught_up_ms | if .count == 0 then null else "\(.p50) / \(.p99) / \(.max)" end'
    row "all caught up, ms after reconnecting" storm ".all_caught_up_ms"
    row "back live p99 ms (lost or not)" storm ".back_live_ms.p99"
    row "server CPU s in the storm" storm ".server_cpu_s_in_storm"
    row "server peak RSS MiB" storm ".server_peak_rss_kib / 1024"
    echo
    echo "| idle: $CONNECTIONS connections, each subscribed to one of 250 sessions/rooms | tether | limit | Socket.IO | tether/limit | tether/Socket.IO |"
    echo "|---|---|---|---|---|---|"
    row "KiB of server RSS per connection" idle ".kib_per_connection"
    row "server RSS MiB with them" idle ".rss_after_kib / 1024"
    echo
    echo "50,000 connections cannot be measured here: the hard limit of open files is"
    echo "$(ulimit -Hn) per process and cannot be raised, and server and generator each"
    echo "need one per connection."
}

table >"$OUT/table.md"
if grep -q '<!-- compare:begin -->' "$DOC"; then
    awk -v table="$OUT/table.md" '
        /<!-- compare:begin -->/ { print; while ((getline l < table) > 0) print l; skip = 1; next }
        /<!-- compare:end -->/ { skip = 0 }
        !skip { print }' "$DOC" >"$DOC.tmp"
    mv "$DOC.tmp" "$DOC"
else
    { echo; echo '<!-- compare:begin -->'; cat "$OUT/table.md"; echo '<!-- compare:end -->'; } >>"$DOC"
fi
echo "== table written to $DOC"
cat "$OUT/table.md"
