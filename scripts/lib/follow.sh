# Sourced by scripts/bench-fetch and scripts/bench-e2e: follows one publisher run through its
# metrics until every row is written, forking nothing while it measures (a fork and exec of curl,
# awk, date or sleep every 50 ms cost this 2-core machine several percent of a core, on whichever
# core it landed). One scrape costs about 0.5 ms of CPU (the page is read in one go: bash reads a
# socket line by line a byte per system call, 4 ms a scrape), 2.5% of a core at one per 20 ms.
# Needs bash 5 ($EPOCHREALTIME) and LC_ALL=C (a decimal point).
#   follow PID PORT LOGS [BROKER_PID]
# prints "written_rate cpu_us rss_mib intake_rate cpu_share broker_share":
# - written_rate: rows over the span from the first flushed batch until all LOGS rows are
#   written; it includes the last batch's wait for batching.linger (1 s: the topic's tail waits
#   for it) and its write. cpu_us: the publisher's CPU per row over that span. rss_mib: peak RSS.
# - intake_rate: rows over the batches that flushed full, from the first to the one before the
#   last (the last waits for linger): the steady rate of consumption and decode, the one to hold
#   against a bare consumer's. cpu_share and broker_share: the share of a core the publisher and
#   the broker (0 without BROKER_PID) used over that span.
# rows_decoded_total moves once per flushed batch, so the clock starts at the first batch. The
# run must have one sink (rows written are its rows_written_total). Gives up after
# FOLLOW_SECONDS (default 600).

# The number at KEY in a one-line JSON object (the bare consumer's summary).
json_num() { sed -E "s/.*\"$1\":([0-9.]+).*/\1/" <<< "$2"; }

exec {FOLLOW_NAP}<> <(:) # read -t on it is a sleep without a fork
nap() { read -r -t "$1" -u "$FOLLOW_NAP" || true; }
# DEC and WR: rows_decoded_total and the first sample of rows_written_total, from one scrape of
# PORT over bash's /dev/tcp (both 0 while the port is not up).
scrape() {
  DEC=0 WR=0
  local page="" m
  { exec {m}<>"/dev/tcp/127.0.0.1/$1"; } 2>/dev/null || return 0
  printf 'GET /metrics HTTP/1.0\r\n\r\n' >&"$m"
  read -r -d '' -N 4194304 -u "$m" page || true
  exec {m}<&-
  [[ $page =~ $'\n'observation_publisher_rows_decoded_total\ ([0-9]+) ]] && DEC=${BASH_REMATCH[1]}
  [[ $page =~ $'\n'observation_publisher_rows_written_total\{[^}]*\}\ ([0-9]+) ]] && WR=${BASH_REMATCH[1]}
  return 0
}
# STAT: the fields of /proc/$1/stat after the command name (which may hold spaces), so that
# user and system CPU are STAT[11] and STAT[12]; empty when the file cannot be read.
stat_of() {
  local line=""
  STAT=()
  read -r line < "$1" 2>/dev/null || true
  [ -n "$line" ] && read -r -a STAT <<< "${line##*) }"
  return 0
}
# TICKS: user + system CPU of process $1 so far, in 1/100 s (0 for no process).
ticks() {
  TICKS=0
  [ -n "${1:-}" ] || return 0
  stat_of "/proc/$1/stat"
  [ "${#STAT[@]}" -gt 12 ] && TICKS=$((STAT[11] + STAT[12]))
  return 0
}
follow() {
  local pid=$1 port=$2 n=$3 broker=${4:-}
  # One entry per flush seen: the time, rows decoded, the publisher's and the broker's ticks.
  local -a T=() D=() C=() K=()
  local prev=0 now t1 c1 rss last deadline=$((${EPOCHREALTIME%.*} + ${FOLLOW_SECONDS:-600}))
  while :; do
    now=$EPOCHREALTIME
    scrape "$port"
    if [ "$DEC" -gt "$prev" ]; then
      prev=$DEC
      T+=("$now"); D+=("$DEC")
      ticks "$pid"; C+=("$TICKS")
      ticks "$broker"; K+=("$TICKS")
    fi
    [ "$WR" -ge "$n" ] && break
    kill -0 "$pid" 2>/dev/null || { echo "the publisher exited before writing $n rows" >&2; return 1; }
    [ "${now%.*}" -lt "$deadline" ] || { echo "$n rows not written within ${FOLLOW_SECONDS:-600} s" >&2; return 1; }
    nap 0.02
  done
  t1=$EPOCHREALTIME; ticks "$pid"; c1=$TICKS
  rss=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  last=$((${#T[@]} - 2))
  [ "$last" -ge 1 ] || { echo "fewer than three batches: give it more logs" >&2; return 1; }
  awk -v n="$((n - D[0]))" -v t0="${T[0]}" -v t1="$t1" -v c0="${C[0]}" -v c1="$c1" -v rss="$rss" \
    -v ni="$((D[last] - D[0]))" -v ti="${T[last]}" -v ci="${C[last]}" -v b0="${K[0]}" \
    -v bi="${K[last]}" 'BEGIN {
    s = t1 - t0; si = ti - t0
    printf "%.0f %.3f %.1f %.0f %.3f %.3f\n", n/s, (c1-c0)/100*1e6/n, rss/1024, ni/si,
      (ci-c0)/100/si, (bi-b0)/100/si }'
}
# Each thread name of process $1 with its CPU so far in µs per message, for $2 messages, and the
# time it waited on a run queue (runnable, no core free: /proc/…/schedstat) likewise (threads
# of one name summed: the tokio workers, librdkafka's broker threads).
threads() {
  local t name
  local -a q
  local -A sum=() waited=()
  for t in /proc/"$1"/task/*; do
    name="" q=()
    read -r name < "$t/comm" 2>/dev/null || true
    read -r -a q < "$t/schedstat" 2>/dev/null || true
    stat_of "$t/stat"
    [ -n "$name" ] && [ "${#q[@]}" -gt 1 ] && [ "${#STAT[@]}" -gt 12 ] || continue
    name=${name// /_}
    sum[$name]=$((${sum[$name]:-0} + STAT[11] + STAT[12]))
    waited[$name]=$((${waited[$name]:-0} + q[1] / 1000))
  done
  for name in "${!sum[@]}"; do
    if [ "${sum[$name]}" -gt 0 ]; then echo "$name ${sum[$name]} ${waited[$name]}"; fi
  done | sort -k2 -n -r | awk -v n="$2" '{
    printf("%s%s %.3f (waited %.3f)", (NR > 1 ? ", " : ""), $1, $2/100*1e6/n, $3/n) } END {print ""}'
}
