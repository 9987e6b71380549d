"""A LIBI session member in Python (session/python/libi.py), for tests/python_binding.rs.

    libi_py_member.py colls     the master takes the front end's message, broadcasts it;
                                every member answers with a text of its own length
                                (gatherv); allgather, gather, scatter, scatterv, barrier;
                                the master sends "echo:MESSAGE" and a report, then waits
                                for the front end's end of the session
    libi_py_member.py proctab   an attach daemon: its host's ranks (getMyProctab), checked
                                alive; the master gathers them (gatherv) and reports
"""
import json
import os
import struct
import sys

import libi


def colls():
    rank, size, master = libi.getMyRank(), libi.getSize(), libi.amMaster()
    host = libi.getMyHostname()
    msg = libi.recvUsrData() if master else None
    # The message's length first (only the master knows it), then the message.
    n = struct.unpack("!Q", libi.broadcast(struct.pack("!Q", len(msg)) if master else None, 8))[0]
    got = libi.broadcast(msg, n)
    mine = ("%d:%s:%s;" % (rank, host, got.decode())) * (rank + 1)
    parts = libi.gatherv(mine.encode())
    everyone = libi.allgather(struct.pack("!i", rank * 10))
    fixed = libi.gather(struct.pack("!i", rank + 100))
    block = libi.scatter([struct.pack("!i", 1000 + i) for i in range(size)] if master else None, 4)
    vblock = libi.scatterv([b"x" * i for i in range(size)] if master else None)
    small = libi.gatherv(b"%d:%d:%d" % (rank, struct.unpack("!i", block)[0], len(vblock)))
    libi.barrier()
    if master:
        libi.sendUsrData(b"echo:" + msg)
        report = {
            "size": size,
            "gatherv": [p.decode() for p in parts],
            "allgather": [struct.unpack("!i", e)[0] for e in everyone],
            "gather": [struct.unpack("!i", e)[0] for e in fixed],
            "scatter": [p.decode() for p in small],
        }
        libi.sendUsrData(json.dumps(report).encode())
        try:
            libi.recvUsrData()
        except libi.LibiError as e:  # the front end ended the session: ESESS
            sys.stderr.write("master-end %s\n" % e.name)
    libi.finalize()


def proctab():
    master = libi.amMaster()
    host = libi.getMyHostname()
    rows = libi.getMyProctab()
    alive = 0
    for r in rows:
        try:
            os.kill(r.pid, 0)
            alive += 1
        except OSError:
            pass
    me = {"host": host, "ranks": [r.rank for r in rows], "hosts": sorted({r.host for r in rows}),
          "alive": alive, "exe": sorted({os.path.basename(r.executable) for r in rows})}
    parts = libi.gatherv(json.dumps(me).encode())
    if master:
        libi.sendUsrData(json.dumps([json.loads(p) for p in parts]).encode())
    libi.finalize()


libi.init()
{"colls": colls, "proctab": proctab}[sys.argv[1]]()
