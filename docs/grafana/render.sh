#!/usr/bin/env bash
# Makes docs/grafana/leased-dashboard.png from a real run: a three-node
# leased cluster on 127.0.0.1, scraped every 5 s by a Prometheus of its own,
# under about ten minutes of mixed load (docs/grafana/render/load) with a
# holder stopped twice and the leader killed once midway; then
# docs/grafana/render evaluates the dashboard's queries against that
# Prometheus and draws the panels. Not part of CI.
#
#   docs/grafana/render.sh              # the whole run, then the image
#   docs/grafana/render.sh run          # the run only; keeps its folder
#   docs/grafana/render.sh render DIR   # the image again from a kept run's folder
#
# Needs Go and Prometheus (Debian: apt-get install prometheus; the package's
# own service is not used). Environment: DASH_LOAD_SECONDS (length of the
# load, default 600), DASH_OUT (the image, default docs/grafana/leased-dashboard.png),
# DASH_WORK (the run's folder, default a new temporary one). Every process
# it starts is stopped when it exits, however it exits.
set -euo pipefail
cd "$(dirname "$0")/../.."

stage=${1:-all}
load_s=${DASH_LOAD_SECONDS:-600}
out=${DASH_OUT:-docs/grafana/leased-dashboard.png}
prom_addr=127.0.0.1:9190

case "$stage" in
all | run)
	work=${DASH_WORK:-$(mktemp -d /tmp/leased-dash.XXXXXX)}
	;;
render)
	work=${2:?render needs the folder of a kept run}
	;;
*)
	echo "usage: $0 [all | run | render DIR]" >&2
	exit 2
	;;
esac
mkdir -p "$work"
echo "run folder: $work"

if ! command -v prometheus >/dev/null; then
	echo "prometheus not found: apt-get install prometheus (only the binary is used)" >&2
	exit 1
fi

# Every process started here, by name, so that the trap stops each one.
declare -A pids=()
cleanup() {
	local status=$?
	for name in "${!pids[@]}"; do
		kill -CONT "${pids[$name]}" 2>/dev/null || true
		kill -TERM "${pids[$name]}" 2>/dev/null || true
	done
	for name in "${!pids[@]}"; do
		wait "${pids[$name]}" 2>/dev/null || true
	done
	if [ "$stage" = all ] && [ "$status" -eq 0 ] && [ -z "${DASH_WORK:-}" ]; then
		rm -rf "$work"
	fi
	exit "$status"
}
trap cleanup EXIT INT TERM

log() { echo "$(date +%T) $*"; }

go build -o "$work/bin/" ./cmd/leased ./cmd/leasectl ./docs/grafana/render ./docs/grafana/render/load

# prometheus runs its own configuration and storage, on loopback only.
start_prometheus() {
	cat >"$work/prometheus.yml" <<-EOF
		global:
		  scrape_interval: 5s
		  evaluation_interval: 5s
		scrape_configs:
		  - job_name: leased
		    static_configs:
		      - targets: ["127.0.0.1:9110"]
		        labels: {instance: n1}
		      - targets: ["127.0.0.1:9120"]
		        labels: {instance: n2}
		      - targets: ["127.0.0.1:9130"]
		        labels: {instance: n3}
	EOF
	prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/prom-data" \
		--storage.tsdb.retention.time=7d --web.listen-address="$prom_addr" \
		>"$work/prometheus.log" 2>&1 &
	pids[prometheus]=$!
	for _ in $(seq 50); do
		curl -sf "http://$prom_addr/-/ready" >/dev/null && return
		sleep 0.2
	done
	echo "prometheus did not start: see $work/prometheus.log" >&2
	exit 1
}

initial=n1=127.0.0.1:7510,n2=127.0.0.1:7520,n3=127.0.0.1:7530
endpoints=127.0.0.1:7410,127.0.0.1:7420,127.0.0.1:7430

# start_node N starts node nN; its data folder survives a restart.
# --max-leases-per-session 200 lets the load's sweeper, which reads 300
# keys, meet a bound, so that "Refused by a bound" has something to show.
start_node() {
	local i=$1
	"$work/bin/leased" --name "n$i" --data "$work/n$i" --ca-dir "$work/ca" \
		--listen "127.0.0.1:74${i}0" --peer-listen "127.0.0.1:75${i}0" --initial-cluster "$initial" \
		--metrics-listen "127.0.0.1:91${i}0" --max-leases-per-session 200 \
		>>"$work/n$i.log" 2>&1 &
	pids[n$i]=$!
}

# leader prints the number of the node that leads, from its metrics, or
# fails if none does. (The page is read whole: grep -q leaving a pipe early
# would fail the pipeline under pipefail.)
leader() {
	local page
	for i in 1 2 3; do
		page=$(curl -sf "http://127.0.0.1:91${i}0/metrics") || continue
		if grep -qx 'leased_raft_leader 1' <<<"$page"; then
			echo "$i"
			return
		fi
	done
	return 1
}

# wait_for_leader waits until some node leads, and prints its number.
wait_for_leader() {
	for _ in $(seq 100); do
		leader && return
		sleep 0.2
	done
	echo "no leader: see $work/n*.log" >&2
	exit 1
}

# pause SECONDS sleeps, or ends the run early if a load process has died.
pause() {
	local end=$((SECONDS + $1))
	while [ $SECONDS -lt $end ]; do
		for name in load holders; do
			if [ -n "${pids[$name]:-}" ] && ! kill -0 "${pids[$name]}" 2>/dev/null; then
				wait "${pids[$name]}" || true
				unset "pids[$name]"
				log "$name ended"
				return
			fi
		done
		sleep 1
	done
}

run() {
	"$work/bin/leased" cert create-ca --dir "$work/ca"
	start_prometheus
	for i in 1 2 3; do start_node "$i"; done
	wait_for_leader >/dev/null
	sleep 30 # the idle cluster, before the load
	log "n$(wait_for_leader) leads; load for $load_s s"
	echo $(($(date +%s) - 30)) >"$work/start"
	"$work/bin/load" --endpoints "$endpoints" --cacert "$work/ca/ca.pem" --duration "${load_s}s" \
		>"$work/load.log" 2>&1 &
	pids[load]=$!
	"$work/bin/load" --endpoints "$endpoints" --cacert "$work/ca/ca.pem" --duration "${load_s}s" \
		--holders-only --readers 3 >"$work/holders.log" 2>&1 &
	pids[holders]=$!
	local total=$load_s
	# A timeline in fractions of the load: holders stopped at 25% and 75%
	# (invalidations to them run out), the leader killed at 45% and
	# started again at 55%.
	pause $((total * 25 / 100))
	log "holders stopped for 25 s"
	kill -STOP "${pids[holders]}"
	sleep 25
	kill -CONT "${pids[holders]}"
	pause $((total * 20 / 100 - 25))
	local l
	l=$(wait_for_leader)
	log "killing the leader, n$l"
	kill -KILL "${pids[n$l]}"
	wait "${pids[n$l]}" 2>/dev/null || true
	unset "pids[n$l]"
	pause $((total * 10 / 100))
	log "n$l started again"
	start_node "$l"
	pause $((total * 20 / 100))
	log "holders stopped for 25 s"
	kill -STOP "${pids[holders]}" 2>/dev/null || true
	sleep 25
	kill -CONT "${pids[holders]}" 2>/dev/null || true
	for name in load holders; do
		if [ -n "${pids[$name]:-}" ]; then
			wait "${pids[$name]}" || log "$name failed: see $work/$name.log"
			unset "pids[$name]"
		fi
	done
	log "load done"
	tail -n 2 "$work/load.log"
	sleep 15 # a few more scrapes of the quiet cluster
	date +%s >"$work/end"
}

render() {
	go build -o "$work/bin/" ./docs/grafana/render
	[ -n "${pids[prometheus]:-}" ] || start_prometheus
	sleep 1
	"$work/bin/render" --prometheus "http://$prom_addr" --dashboard docs/grafana/leased-dashboard.json \
		--from "$(cat "$work/start")" --to "$(cat "$work/end")" --out "$out"
	log "wrote $out"
}

case "$stage" in
all)
	run
	render
	;;
run)
	run
	echo "kept: $work; render with: $0 render $work"
	;;
render)
	render
	;;
esac
