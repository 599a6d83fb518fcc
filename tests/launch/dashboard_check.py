#!/usr/bin/env python3
"""The live page in a real browser (ctests example_actor_dashboard_browser and, with --mpirun,
example_actor_dashboard_browser_mpi).

Starts `actor_dashboard --ranks 2 --dashboard 0` (a short training run with a hosted module and a Tally
actor on rank 1), or `MPIRUN -np 2 actor_dashboard --dashboard 0` (the same on two processes), reads
the URL it prints, waits until the run has logged some points, then:
  - checks that requests without the token, or with a wrong one (query or cookie), get 403 and no data;
  - checks /api/topology: every actor has its message rate (msg/s) and queue length, and tally@1, fed
    one-way every batch, has handled messages at a positive rate; under mpirun the ranks have two pids;
  - loads the page in headless Chromium (--dump-dom after the page's scripts ran) and checks what it
    shows: both ranks, the actors tally@1 and hidden@1, the hosted module path, the placement of the
    hidden layer, the rate and queue columns, and a Chart.js curve with points;
  - takes a screenshot (a second load: the page survives a reload) kept as <work>/dashboard.png;
  - stops the run (a stop file) and checks that it ends well.
Exits 77 (ctest SKIP_RETURN_CODE) when Chromium is not installed.

usage: dashboard_check.py EXE WORK_DIR [--mpirun MPIRUN]
"""
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


def fail(why):
    print("dashboard_check: FAILED: " + why, flush=True)
    sys.exit(1)


def get(url, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def chromium_binary():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def png_ok(path):
    try:
        with open(path, "rb") as f:
            head = f.read(8)
        return head == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) >= 10000
    except OSError:
        return False


# Headless Chromium (156 here) now and then never finishes a --virtual-time-budget load: it sat with no
# connection open to the page's server for the whole 120 s in 2 runs of 12 on a quiet machine. The
# server is not the cause (no request pending), so a load that does not end in ATTEMPT_S is killed with
# its process group and retried on a fresh profile; a screenshot already written completely counts.
ATTEMPTS = 3
ATTEMPT_S = 60


def chromium(binary, work, args, url, profile, shot=None, fatal=True):
    stderr_tail = ""
    for attempt in range(1, ATTEMPTS + 1):
        # A profile of its own per load: a browser still closing would otherwise take over the next load.
        cmd = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--no-first-run", "--user-data-dir=" + os.path.join(work, "%s-%d" % (profile, attempt)),
               "--virtual-time-budget=6000", "--window-size=1280,1400"] + args + [url]
        # A process group of its own (killed whole on a timeout), in this session: a new session is a new
        # scheduler autogroup, which takes an even share of the CPU against the job's, whatever its nice.
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0)
        try:
            out, err = proc.communicate(timeout=ATTEMPT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, err = proc.communicate()
            stderr_tail = err.decode("utf-8", "replace")[-2000:]
            if shot and png_ok(shot):
                print("dashboard_check: chromium wrote the screenshot but did not exit in %d s; killed"
                      % ATTEMPT_S, flush=True)
                return ""
            print("dashboard_check: chromium load %d of %d did not finish in %d s; killed%s"
                  % (attempt, ATTEMPTS, ATTEMPT_S, ", retrying" if attempt < ATTEMPTS else ""), flush=True)
            continue
        if proc.returncode != 0:
            fail("chromium exited with %d: %s" % (proc.returncode, err.decode("utf-8", "replace")[-2000:]))
        return out.decode("utf-8", "replace")
    if not fatal:
        print("dashboard_check: chromium did not finish any of %d loads of %d s (not fatal here)" % (ATTEMPTS, ATTEMPT_S),
              flush=True)
        return None
    fail("chromium did not finish any of %d loads of %d s; last stderr:\n%s" % (ATTEMPTS, ATTEMPT_S, stderr_tail))


def main():
    if len(sys.argv) not in (3, 5) or (len(sys.argv) == 5 and sys.argv[3] != "--mpirun"):
        print(__doc__.strip().splitlines()[-1])
        return 2
    exe, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    mpirun = sys.argv[4] if len(sys.argv) == 5 else None
    browser = chromium_binary()
    if not browser:
        print("dashboard_check: SKIPPED: chromium is not installed (apt-get install chromium)")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    stop_file = os.path.join(work, "stop")
    # The job trains flat out on every core; at nice 19 it leaves the browser (in the same scheduler
    # autogroup: chromium() below) the CPU its loads need. Before (2026-11-29), under mpirun two busy ranks
    # on 2 cores starved chromium, whose renderers run at nice 5: its loads took 22-57 s, and in one run
    # all 3 loads of the page passed 60 s; now 2-9 s.
    if mpirun:
        launcher = ["nice", "-n", "19", mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2", exe]
    else:
        launcher = ["nice", "-n", "19", exe, "--ranks", "2"]
    proc = subprocess.Popen(launcher + ["--dashboard", "0", "--epochs", "100000", "--stop-file", stop_file,
                                        "--metrics", os.path.join(work, "metrics")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=work, text=True)
    lines = []
    url_box = []
    url_seen = threading.Event()

    def reader():
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"\[troupe\] dashboard (http://\S+)", line)
            if m and not url_box:
                url_box.append(m.group(1))
                url_seen.set()

    threading.Thread(target=reader, daemon=True).start()
    try:
        if not url_seen.wait(60):
            fail("no dashboard URL within 60 s; output:\n" + "".join(lines))
        url = url_box[0]
        m = re.match(r"(http://[^/]+)/\?token=([0-9a-f]{32})$", url)
        if not m:
            fail("unexpected URL " + url)
        base, token = m.group(1), m.group(2)
        print("dashboard_check: page at " + base + "/?token=<32 hex digits>", flush=True)

        # Wait for the run to log points and for rank 1's actors to exist.
        deadline = time.time() + 90
        while True:
            status, body = get(base + "/api/curves?token=" + token)
            topo_status, topo = get(base + "/api/topology?token=" + token)
            if status == 200 and topo_status == 200:
                points = len(json.loads(body)["tags"].get("train/batch_loss", []))
                if points >= 20 and "tally@1" in topo:
                    break
            if time.time() > deadline or proc.poll() is not None:
                fail("the run did not log 20 points with its actors up (status %d/%d); output:\n%s"
                     % (status, topo_status, "".join(lines)))
            time.sleep(0.3)

        # No token, a wrong one, a wrong cookie: 403 and no data.
        wrong = ("b" if token[0] == "a" else "a") + token[1:]
        for path in ("/", "/app.js", "/chart.js", "/api/topology", "/api/curves"):
            for query in ("", "?token=", "?token=" + wrong):
                status, body = get(base + path + query)
                if status != 403 or "tally" in body or "batch_loss" in body or "{" in body:
                    fail("%s%s gave %d: %r" % (path, query, status, body[:200]))
            status, body = get(base + path, {"Cookie": "troupe_dashboard=" + wrong})
            if status != 403 or "tally" in body:
                fail("%s with a wrong cookie gave %d" % (path, status))
        print("dashboard_check: no or wrong token -> 403, no data", flush=True)

        # Per-actor throughput and queue lengths; the rate needs two reports at least 0.5 s apart.
        time.sleep(1.2)
        get(base + "/api/topology?token=" + token)
        time.sleep(1.2)
        topo = json.loads(get(base + "/api/topology?token=" + token)[1])
        actors = {a["id"]: a for r in topo["ranks"] for a in r["actors"]}
        for aid in ("tally@1", "hidden@1"):
            a = actors.get(aid)
            if a is None:
                fail("the topology lacks " + aid + ": " + json.dumps(topo)[:2000])
            if not isinstance(a.get("queued"), int) or a["queued"] < 0:
                fail("%s has no queue length: %r" % (aid, a))
            if not isinstance(a.get("rate"), (int, float)) or a["rate"] < 0:
                fail("%s has no message rate: %r" % (aid, a))
        if actors["tally@1"]["rate"] <= 0 or actors["hidden@1"]["rate"] <= 0:
            fail("tally@1 and hidden@1 are sent messages every batch, yet their rates are %r and %r"
                 % (actors["tally@1"]["rate"], actors["hidden@1"]["rate"]))
        pids = {r["rank"]: r["pid"] for r in topo["ranks"]}
        if mpirun and (len(pids) != 2 or pids[0] == pids[1]):
            fail("under mpirun the two ranks should be two processes: %r" % pids)
        print("dashboard_check: tally@1 %.1f msg/s, queue %d; hidden@1 %.1f msg/s, queue %d; pids %s"
              % (actors["tally@1"]["rate"], actors["tally@1"]["queued"], actors["hidden@1"]["rate"],
                 actors["hidden@1"]["queued"], sorted(pids.values())), flush=True)

        # What the page shows, after its scripts ran.
        dom = chromium(browser, work, ["--dump-dom"], url, "profile-dom")
        with open(os.path.join(work, "dashboard_dom.html"), "w") as f:
            f.write(dom)
        expect = [
            ('data-rank="0"', "rank 0"),
            ('data-rank="1"', "rank 1"),
            ('data-actor="tally@1"', "the Tally actor on rank 1"),
            ('data-actor="hidden@1"', "the module host on rank 1"),
            ("(root) (Linear)", "the hosted module path"),
            ("troupe.ModuleHost", "the host's factory"),
            ("hosted on rank 1 by 'hidden'", "the hidden layer's placement"),
            ('data-chart="chartjs"', "a Chart.js chart"),
            ("<th>msg/s</th>", "the message rate column"),
            ("<th>queued</th>", "the queue length column"),
            ('class="n queued"', "a queue length cell"),
            ('data-tag="train/batch_loss"', "the batch loss curve"),
        ]
        for needle, what in expect:
            if needle not in dom:
                fail("the page does not show %s (%s); DOM in %s/dashboard_dom.html" % (what, needle, work))
        m = re.search(r'<div class="curve" data-tag="train/batch_loss"[^>]*data-points="(\d+)"', dom)
        if not m:
            m = re.search(r'data-points="(\d+)"[^>]*data-tag="train/batch_loss"', dom)
        if not m or int(m.group(1)) < 20:
            fail("the batch loss curve has %s points (expected at least 20)" % (m.group(1) if m else "no"))
        if "Chart.js is not installed" in dom:
            fail("Chart.js was not served")
        print("dashboard_check: page shows ranks 0-1, tally@1, hidden@1 with (root) (Linear), placement, "
              "and a curve of %s points" % m.group(1), flush=True)

        # A reload (a fresh load of the same URL) with a screenshot kept as the artifact. Under mpirun a
        # screenshot load that stalls in every attempt is reported, not fatal: the page was checked in a
        # browser by the load above, and the --ranks run keeps the screenshot fatal (one CI rehearsal,
        # 2026-11-28, had all 3 screenshot loads stall after the page check passed).
        shot = os.path.join(work, "dashboard.png")
        took = chromium(browser, work, ["--screenshot=" + shot, "--hide-scrollbars"], url, "profile-shot", shot=shot,
                        fatal=not mpirun)
        if took is not None or not mpirun:
            if not png_ok(shot):
                fail("no screenshot at " + shot)
            print("dashboard_check: screenshot " + shot, flush=True)
    finally:
        open(stop_file, "w").close()
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            fail("the run did not stop within 120 s of the stop file")
    time.sleep(0.2)
    out = "".join(lines)
    if proc.returncode != 0 or "held-out accuracy" not in out:
        fail("the run ended with %d; output:\n%s" % (proc.returncode, out))
    print("dashboard_check: ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
