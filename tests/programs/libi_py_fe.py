"""A LIBI front end in Python (session/python/libi.py), for tests/python_binding.rs. Prints
one line per check.

    libi_py_fe.py PYTHON MEMBER colls HOSTS    launch Python members on HOSTS (host:n,...):
                                               an echo through the master, a broadcast,
                                               gatherv and the other collectives; poll, a
                                               timed receive, errors as exceptions
    libi_py_fe.py PYTHON MEMBER attach JOB_PID one daemon per host of the running job, each
                                               reports its host's ranks (getMyProctab)
"""
import json
import os
import sys

import libi


def say(*words):
    print(*words, flush=True)


def error_of(f, *args):
    try:
        f(*args)
    except libi.LibiError as e:
        return "%s %s" % (e.name, e.message)
    return "no error"


def colls(python, member, hosts):
    libi.fe_init()
    s = libi.fe_createSession()
    libi.fe_launch([libi.ProcDist(s, python, [member, "colls"], hosts)])
    say("launch ok members=%d" % libi.fe_getHostlistSize(s))
    say("status", libi.fe_getSessionStatus(s) == libi.STATUS_RUNNING)
    say("nothing-yet", libi.fe_recvUsrDataTimeout(s, 0))
    say("poll-idle", libi.fe_poll([s], 0))
    libi.fe_sendUsrData(s, b"hello")
    say("poll", libi.fe_poll([s], -1) == {s: libi.POLL_DATA})
    say("echo", libi.fe_recvUsrData(s).decode())
    report = json.loads(libi.fe_recvUsrDataTimeout(s, 60000))
    for k in ("size", "gatherv", "allgather", "gather", "scatter"):
        say(k, json.dumps(report[k]))
    libi.fe_endSession(s)
    say("after-end", error_of(libi.fe_sendUsrData, s, b"x"))
    # Errors: a host with 0 processes, a session that does not exist, a launch twice.
    bad = libi.fe_createSession()
    say("ehostdist", error_of(libi.fe_launch, [libi.ProcDist(bad, python, [member], [("n1", 0)])]))
    say("esess", error_of(libi.fe_recvUsrData, 987654))
    try:
        libi.fe_sendUsrData(s, "text")
    except TypeError as e:
        say("str", "TypeError", e)
    libi.fe_finalize()
    say("finalize ok")
    say("after-finalize", error_of(libi.fe_createSession))


def attach(python, member, pid):
    libi.fe_init()
    table = libi.fe_getJobProcTable(pid)
    say("table", len(table), ",".join(sorted({r.host for r in table})))
    say("job-hosts", libi.fe_getJobHosts(pid))
    s = libi.fe_createSession()
    libi.fe_attachAndLaunch(s, pid, python, [member, "proctab"])
    daemons = json.loads(libi.fe_recvUsrData(s))
    say("daemons", len(daemons))
    for d in daemons:
        say("daemon", d["host"], "ranks=%s" % d["ranks"], "hosts=%s" % d["hosts"],
            "alive=%d" % d["alive"], "exe=%s" % d["exe"])
    s2 = libi.fe_createSession()
    libi.fe_attachAndLaunch(s2, pid, python, [member, "proctab"], ranks=[1])
    sub = json.loads(libi.fe_recvUsrData(s2))
    say("subset", len(sub), sub[0]["host"], sub[0]["ranks"])
    try:
        libi.fe_attachAndLaunch(s2, pid, python, [member, "proctab"], ranks=[])
    except ValueError as e:
        say("empty-subset", "ValueError", e)
    s3 = libi.fe_createSession()
    say("not-a-job", error_of(libi.fe_attachAndLaunch, s3, os.getpid(), python, [member]))
    libi.fe_finalize()
    say("finalize ok")


python, member, what, arg = sys.argv[1:5]
say("library", libi.library_path())
if what == "colls":
    colls(python, member, arg)
else:
    attach(python, member, int(arg))
