# shellcheck shell=bash
# The BIGQUERY sink against the stand-ins, for the benches: tables on the local emulator (REST),
# appends to examples/ack_server (it answers each request ACK_DELAY_MS after it arrived, 100 by
# default, and keeps nothing). Needs `cargo build --release --example ack_server` and the
# emulator running (scripts/bigquery start).
#
#   standin_config NAME [CORES]
# starts ack_server (pinned to CORES when given) and sets `ack` to its pid, creates the dataset
# NAME on the emulator, and writes target/bench/NAME.yaml: config/bench-20.yaml with that
# BIGQUERY sink instead of the local one. Prints the config's path.
standin_config() {
  local name=$1 cores=${2:-} rest url_file=target/bench/$1-ack.url conf=target/bench/$1.yaml
  rest="http://127.0.0.1:${BQ_REST_PORT:-19050}/bigquery/v2"
  rm -f "$url_file"
  if [ -n "$cores" ]; then
    taskset -c "$cores" target/release/examples/ack_server > "$url_file" &
  else
    target/release/examples/ack_server > "$url_file" &
  fi
  ack=$!
  for _ in $(seq 1 100); do [ -s "$url_file" ] && break; sleep 0.1; done
  [ -s "$url_file" ] || { echo "examples/ack_server did not start" >&2; return 1; }
  curl -sf -X POST "$rest/projects/test-proj/datasets" -H 'Content-Type: application/json' \
    -d "{\"datasetReference\":{\"projectId\":\"test-proj\",\"datasetId\":\"$name\"}}" >/dev/null || true
  sed '/^local_sink:/,/^  path:/d' config/bench-20.yaml > "$conf"
  cat >> "$conf" <<YAML
observation_sinks:
- type: BIGQUERY
  config:
    project: test-proj
    dataset: $name
    ttl_days: 14
    auth: none
    emulator_compat: true
    rest_base_url: $rest/
    storage_endpoint: $(cat "$url_file")
YAML
  echo "$conf"
}
