"""Consumption gaps through a consumer-group rebalance, for scripts/bench-rebalance.

Runs one scenario on the local broker, with a fresh group and fresh topics:
  shared: K confluent-kafka bystanders, each on its own topic, and one publisher on its own
          topic, in one group (as Merlin's deployer puts every model's publisher); then one more
          confluent-kafka member joins, on a topic of its own.
  own:    one publisher on a topic; then a second publisher of the same configuration joins its
          group.
Every topic gets a steady stream of messages on every partition (the publishers' topics get
generated PredictionLogs). Once the group is steady, the joiner starts; the window runs from one
second before the join until the group has been quiet for QUIET seconds after the joiner got its
partitions (or LIMIT seconds). Prints, per member, the longest time without consuming a message
inside the window and the partitions it lost (revoked) in the window.

A publisher's consumption is read from its /metrics counter of consumed messages, scraped every
SCRAPE seconds; the counter moves when a batch is flushed, so the publishers run with a short
batching.linger (LINGER) and the gap's resolution is about SCRAPE + LINGER. A confluent-kafka
member records the time of each message it polls.

  python rebalance.py run --scenario shared|own --strategy eager|cooperative --bin PUBLISHER
                          --logs FILE [--bystanders 5] [--partitions 24] [--rate 240] ...
  python rebalance.py member ...   (a confluent-kafka member; started by `run`)
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

STRATEGIES = {"eager": "range,roundrobin", "cooperative": "cooperative-sticky"}
CONSUMED = "observation_publisher_messages_consumed_total"


def now():
    return time.time()


# ---------------------------------------------------------------------------------------------
# A confluent-kafka member: prints its rebalance events as JSON lines as they happen, and on
# SIGTERM the times of the messages it consumed.


def member(a):
    from confluent_kafka import Consumer

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    out = sys.stdout

    def say(obj):
        try:
            out.write(json.dumps(obj) + "\n")
            out.flush()
        except BrokenPipeError:
            pass  # the run has ended without us

    def on_assign(_c, parts):
        say({"t": now(), "kind": "assign", "partitions": [p.partition for p in parts]})

    def on_revoke(_c, parts):
        say({"t": now(), "kind": "revoke", "partitions": [p.partition for p in parts]})

    def on_lost(_c, parts):
        say({"t": now(), "kind": "lost", "partitions": [p.partition for p in parts]})

    c = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": a.group,
        "session.timeout.ms": a.session_ms,
        "partition.assignment.strategy": a.strategy,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
    })
    c.subscribe([a.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    times = []
    while not stop.is_set():
        m = c.poll(0.05)
        if m is not None and m.error() is None:
            times.append(now())
    say({"t": now(), "kind": "consumed", "times": times})
    c.close()


# ---------------------------------------------------------------------------------------------
# The run.


class Member:
    """One member of the group: its name, its rebalance events and its consumption times."""

    def __init__(self, name, kind):
        self.name, self.kind = name, kind
        self.events = []  # (t, kind, partitions)
        self.times = []  # consumption times (publisher: scrapes at which the counter moved)
        self.proc = None
        self.lock = threading.Lock()

    def event(self, t, kind, parts):
        with self.lock:
            self.events.append((t, kind, parts))

    def assigned(self):
        with self.lock:
            return any(k == "assign" and p for _, k, p in self.events)

    def last_event(self):
        with self.lock:
            return max((t for t, _, _ in self.events), default=0)


def read_member(m, stream):
    for line in stream:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e["kind"] == "consumed":
            m.times = e["times"]
        else:
            m.event(e["t"], e["kind"], e["partitions"])


PARTS = re.compile(r"partitions[^\[]*\[([0-9, ]*)\]")


def read_publisher_log(m, stream, log):
    """The publisher's JSON log: its rebalance callbacks' lines, kept to a file too."""
    for line in stream:
        log.write(line)
        for kind, text in (("assign", "partitions assigned"), ("revoke", "partitions revoked")):
            if text in line:
                g = PARTS.search(line.replace('\\"', '"'))
                parts = [int(x) for x in g.group(1).split(",") if x.strip()] if g else []
                m.event(now(), kind, parts)


def scrape(m, port, stop):
    last = None
    while not stop.is_set():
        t = now()
        try:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read()
            for line in body.decode().splitlines():
                if line.startswith(CONSUMED + " ") or line.startswith(CONSUMED + "{"):
                    v = float(line.rsplit(" ", 1)[1])
                    if last is not None and v > last:
                        m.times.append(t)
                    last = v
        except OSError:
            pass
        time.sleep(max(0.0, m.scrape - (now() - t)))


def create_topics(bootstrap, topics, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
    for f in fs.values():
        f.result(15)


def read_logs(path):
    data = open(path, "rb").read()
    logs, i = [], 0
    while i < len(data):
        n = shift = 0
        while True:
            b = data[i]
            i += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        logs.append(data[i:i + n])
        i += n
    return logs


def produce(bootstrap, topics, partitions, rate, logs, stop):
    """`rate` messages a second to each topic, spread evenly over its partitions; topics in
    `logs` get PredictionLogs, the others small payloads."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    tick, n, start = 0.02, 0, now()
    filler = b"x" * 100
    while not stop.is_set():
        n += 1
        per = rate * tick
        for ti, t in enumerate(topics):
            k = int(n * per) - int((n - 1) * per)
            for j in range(k):
                seq = int((n - 1) * per) + j
                value = logs[seq % len(logs)] if t.startswith("pub-") else filler
                p.produce(t, value, partition=(seq + ti) % partitions)
        p.poll(0)
        time.sleep(max(0.0, start + n * tick - now()))
    p.flush(10)


def publisher_config(a, name, topic, group, port):
    base = open(a.config).read()
    extra = ("    additional_consumer_config:\n"
             f"      partition.assignment.strategy: \"{STRATEGIES[a.strategy]}\"\n")
    for kv in a.consumer_config:
        k, v = kv.split("=", 1)
        extra += f"      {k}: \"{v}\"\n"
    base = base.replace("    group_id: bench\n", "    group_id: bench\n" + extra, 1)
    path = os.path.join(a.out, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(base)
    sets = [
        f"observation_source.config.topic={topic}",
        f"observation_source.config.group_id={group}",
        f"observation_source.config.bootstrap_servers={a.bootstrap}",
        f"server.listen=127.0.0.1:{port}",
        f"consumer.session_timeout={a.session_ms}ms",
        f"batching.linger={int(a.linger * 1000)}ms",
        f"consumer.commit_interval={int(a.commit_interval * 1000)}ms",
        f"local_sink.path={os.path.join(a.out, name + '-rows')}",
        f"dead_letter.path={os.path.join(a.out, name + '-dead-letters.bin')}",
        "logging.level=info",
        # The configured group as it is (a version of its own would get a group of its own).
        "consumer.group=own",
    ]
    return path, [x for s in sets for x in ("--set", s)]


def run(a):
    os.makedirs(a.out, exist_ok=True)
    tag = f"{a.scenario}-{a.strategy}-{int(now() * 1000) % 100000000}"
    group = f"rebalance-{tag}"
    members, joiner, topics = [], None, []
    stop = threading.Event()
    threads = []

    def start_python(name, topic):
        m = Member(name, "python")
        m.proc = subprocess.Popen(
            [sys.executable, __file__, "member", "--bootstrap", a.bootstrap, "--group", group,
             "--topic", topic, "--strategy", STRATEGIES[a.strategy],
             "--session-ms", str(a.session_ms)],
            stdout=subprocess.PIPE, text=True)
        th = threading.Thread(target=read_member, args=(m, m.proc.stdout), daemon=True)
        th.start()
        threads.append(th)
        return m

    def start_publisher(name, topic, port):
        m = Member(name, "publisher")
        m.scrape = a.scrape
        conf, sets = publisher_config(a, name, topic, group, port)
        env = dict(os.environ)
        if a.rust_log:
            env["RUST_LOG"] = a.rust_log
        m.proc = subprocess.Popen([a.bin, "run", "-c", conf] + sets, stderr=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, text=True, env=env)
        log = open(os.path.join(a.out, f"{name}.log"), "w")
        for target, args in ((read_publisher_log, (m, m.proc.stderr, log)),
                             (scrape, (m, port, stop))):
            th = threading.Thread(target=target, args=args, daemon=True)
            th.start()
            threads.append(th)
        return m

    if a.scenario == "shared":
        by_topics = [f"by-{tag}-{i}" for i in range(a.bystanders)]
        pub_topic, join_topic = f"pub-{tag}", f"by-{tag}-join"
        topics = [pub_topic] + by_topics + [join_topic]
    else:
        pub_topic = f"pub-{tag}"
        topics = [pub_topic]
    create_topics(a.bootstrap, topics, a.partitions)
    logs = read_logs(a.logs)
    prod = threading.Thread(target=produce,
                            args=(a.bootstrap, topics, a.partitions, a.rate, logs, stop),
                            daemon=True)
    prod.start()

    if a.python_only:
        members.append(start_python("python", pub_topic))
    else:
        members.append(start_publisher("publisher", pub_topic, a.metrics_port))
    if a.scenario == "shared":
        for i, t in enumerate(by_topics):
            members.append(start_python(f"bystander-{i}", t))

    def steady(ms, since):
        t = now()
        return (all(m.assigned() for m in ms)
                and t - max([m.last_event() for m in ms] + [since]) >= a.quiet)

    t0 = now()
    while not steady(members, t0):
        if now() - t0 > a.limit:
            print("the group did not settle before the join", file=sys.stderr)
            break
        time.sleep(0.2)

    t_join = now()
    if a.scenario == "shared":
        joiner = start_python("joiner", join_topic)
    elif a.python_only:
        joiner = start_python("python-2", pub_topic)
    else:
        joiner = start_publisher("publisher-2", pub_topic, a.metrics_port + 1)
    everyone = members + [joiner]
    while not steady(everyone, t_join) and now() - t_join < a.limit:
        time.sleep(0.2)
    t_end = now()

    stop.set()
    for m in everyone:
        m.proc.send_signal(signal.SIGTERM)
    for m in everyone:
        try:
            m.proc.wait(30)
        except subprocess.TimeoutExpired:
            m.proc.kill()
    for th in threads:
        th.join(5)
    prod.join(15)

    lo = t_join - 1.0
    rows = []
    for m in everyone:
        ts = sorted(t for t in m.times if lo <= t <= t_end)
        start = max(lo, min((t for t, k, p in m.events if k == "assign" and p), default=lo))
        edges = [start] + [t for t in ts if t >= start] + [t_end]
        gap, at = 0.0, None
        for x, y in zip(edges, edges[1:]):
            if y - x > gap:
                gap, at = y - x, x
        revoked = sorted({q for t, k, p in m.events if k in ("revoke", "lost") and t_join <= t <= t_end
                          for q in p})
        first = min((t for t, k, p in m.events if k == "assign" and p and t >= t_join), default=None)
        rows.append({
            "member": m.name,
            "kind": m.kind,
            "longest_gap_s": round(gap, 2),
            "gap_starts_after_join_s": None if at is None else round(at - t_join, 2),
            "revoked": revoked,
            "assigned_after_join_s": None if first is None else round(first - t_join, 2),
        })
    print(json.dumps({"scenario": a.scenario, "strategy": a.strategy, "group": group,
                      "window_s": round(t_end - lo, 1), "members": rows}))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("member")
    m.add_argument("--bootstrap", required=True)
    m.add_argument("--group", required=True)
    m.add_argument("--topic", required=True)
    m.add_argument("--strategy", required=True)
    m.add_argument("--session-ms", type=int, default=6000)
    r = sub.add_parser("run")
    r.add_argument("--scenario", choices=["shared", "own"], required=True)
    r.add_argument("--strategy", choices=sorted(STRATEGIES), required=True)
    r.add_argument("--bin", required=True)
    r.add_argument("--config", default="config/bench-20.yaml")
    r.add_argument("--logs", required=True, help="generated PredictionLogs (gen's framing)")
    r.add_argument("--bootstrap", default="127.0.0.1:19092")
    r.add_argument("--bystanders", type=int, default=5)
    r.add_argument("--partitions", type=int, default=24)
    r.add_argument("--rate", type=float, default=240, help="messages a second per topic")
    r.add_argument("--session-ms", type=int, default=6000)
    r.add_argument("--metrics-port", type=int, default=18100)
    r.add_argument("--scrape", type=float, default=0.05)
    r.add_argument("--linger", type=float, default=0.05)
    r.add_argument("--commit-interval", type=float, default=1.0)
    r.add_argument("--quiet", type=float, default=6.0)
    r.add_argument("--limit", type=float, default=60.0)
    r.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--rust-log", default="")
    r.add_argument("--python-only", action="store_true",
                   help="a confluent-kafka member in the publisher's place (the baseline)")
    r.add_argument("--out", default="target/bench/rebalance")
    a = ap.parse_args()
    (member if a.cmd == "member" else run)(a)


if __name__ == "__main__":
    main()
