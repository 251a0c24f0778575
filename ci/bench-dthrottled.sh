#!/usr/bin/env bash
# dthrottled throughput and latency on loopback, beside Redis in the same run
# (what a user would otherwise deploy as a central limiter):
#   - pipelined decisions/s (dthrottle-bench, 50 connections, pipeline 16)
#     against `redis-benchmark -t incr -P 16` (50 connections);
#   - the same with 4 connections each;
#   - unpipelined round trips, one connection: p50/p99/p99.9.
# Prints the figures; BENCHMARKS.md records them by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
ci/install-deps.sh redis-server redis-tools
TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked -p dthrottled
N="${N:-2000000}"
dir="$(mktemp -d)"
cleanup() {
    [ -n "${dpid:-}" ] && kill "$dpid" 2>/dev/null || true
    [ -n "${rpid:-}" ] && kill "$rpid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
printf 'listen_tcp = 127.0.0.1:0\nburst = 100\nrate = 1000\nmax_connections = 256\n' > "$dir/d.conf"
"$TARGET/release/dthrottled" --config "$dir/d.conf" 2> "$dir/d.log" &
dpid=$!
for _ in $(seq 100); do grep -q 'listening on tcp' "$dir/d.log" && break; sleep 0.05; done
addr="$(sed -n 's/^dthrottled: listening on tcp //p' "$dir/d.log")"
rport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no > "$dir/r.log" 2>&1 &
rpid=$!
for _ in $(seq 100); do redis-cli -p "$rport" ping > /dev/null 2>&1 && break; sleep 0.05; done
echo "machine: $(nproc) cores, $(uname -r); dthrottled on $addr, redis-server $(redis-server --version | awk '{print $3}') on 127.0.0.1:$rport"
for c in 50 4; do
    "$TARGET/release/dthrottle-bench" pipelined "$addr" -c "$c" -P 16 -n "$N"
    "$TARGET/release/dthrottle-bench" pipelined "$addr" -c "$c" -P 16 -n "$N" --tags 10000
    echo -n "redis-benchmark -t incr -P 16 -c $c: "
    redis-benchmark -h 127.0.0.1 -p "$rport" -t incr -P 16 -c "$c" -n "$N" -q | tr '\r' '\n' | grep -a 'requests per second' | tail -1
done
"$TARGET/release/dthrottle-bench" rtt "$addr" -n 100000 --tags 1000
echo -n "redis-benchmark -t incr -c 1 (unpipelined): "
redis-benchmark -h 127.0.0.1 -p "$rport" -t incr -c 1 -n 100000 -q --precision 1 | tr '\r' '\n' | grep -a 'requests per second' | tail -1
