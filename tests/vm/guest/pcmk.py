"""What Pacemaker says, from `crm_mon -1 --output-as xml` (the stack runs, pcmk2.sh).

pcmk.py online NODE...        every NODE online (a member of the cluster, not standby)
pcmk.py started NODE...       every NODE online, and on each an instance of every clone
                              (dlm-clone, gfs2-clone) started, every fence device started
pcmk.py stopped-on NODE       NODE in standby, no instance of any clone active on it, every
                              clone started on the other nodes
pcmk.py show                  the cluster's state as crm_mon prints it

Each waits up to TIMEOUT seconds (the environment's PCMK_WAIT, default 300) for the state
to hold, prints one PASS or FAIL line with the time it took (and crm_mon's text), and exits
0 or 1.
"""
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

CLONES = ("dlm-clone", "gfs2-clone")


def state():
    """(nodes, clones, devices, failures) from crm_mon's XML: nodes by name with their
    attributes; for each clone the nodes where an instance is started; each fence device's
    role; the failed actions' descriptions."""
    out = subprocess.run(["crm_mon", "-1", "--output-as", "xml"], capture_output=True,
                         text=True).stdout
    try:
        root = ET.fromstring(out)
    except ET.ParseError:
        return {}, {}, {}, []
    listed = root.find("nodes")
    nodes = {n.get("name"): n.attrib for n in (listed if listed is not None else [])}
    clones, devices = {}, {}
    res = root.find("resources")
    if res is not None:
        for c in res.iter("clone"):
            started = set()
            for r in c.iter("resource"):
                if r.get("role") == "Started" and r.get("active") == "true":
                    started.update(n.get("name") for n in r.iter("node"))
            clones[c.get("id")] = started
        for r in res.findall("resource"):
            if (r.get("resource_agent") or "").startswith("stonith:"):
                devices[r.get("id")] = r.get("role")
    failures = [" ".join("%s=%s" % kv for kv in f.attrib.items()) for f in root.iter("failure")]
    return nodes, clones, devices, failures


def online(nodes, want):
    return all(nodes.get(w, {}).get("online") == "true" and nodes[w].get("standby") != "true"
               for w in want)


def holds(what, want):
    nodes, clones, devices, failures = state()
    if what == "online":
        return online(nodes, want), failures
    if what == "started":
        ok = online(nodes, want) and all(set(want) <= clones.get(c, set()) for c in CLONES) \
            and devices and all(r == "Started" for r in devices.values())
        return ok, failures
    if what == "stopped-on":
        node = want[0]
        others = [n for n in nodes if n != node and nodes[n].get("online") == "true"]
        ok = nodes.get(node, {}).get("standby") == "true" \
            and all(node not in clones.get(c, set()) for c in CLONES) \
            and all(set(others) <= clones.get(c, set()) for c in CLONES)
        return ok, failures
    raise SystemExit("unknown state " + what)


def main():
    what, want = sys.argv[1], sys.argv[2:]
    if what == "show":
        print(subprocess.run(["crm_mon", "-1", "-r"], capture_output=True, text=True).stdout)
        sys.exit(0)
    limit = float(os.environ.get("PCMK_WAIT", "300"))
    t0 = time.monotonic()
    ok, failures = False, []
    while time.monotonic() - t0 < limit:
        ok, failures = holds(what, want)
        if ok:
            break
        time.sleep(1)
    took = time.monotonic() - t0
    text = subprocess.run(["crm_mon", "-1", "-r"], capture_output=True, text=True).stdout
    print("%s crm_mon: %s %s (%.0f s)" % ("PASS" if ok else "FAIL", what, " ".join(want), took),
          flush=True)
    if failures:
        print("failed actions: " + "; ".join(failures), flush=True)
    print(text, flush=True)
    sys.exit(0 if ok else 1)


main()
