"""The LIBI session API in Python: a pure ctypes binding of liblibi.so (no compiled part).

Front end (the tool's process)::

    import libi
    libi.fe_init()
    s = libi.fe_createSession()
    libi.fe_launch([libi.ProcDist(s, "/usr/bin/python3", ["member.py"], [("n1", 2), ("n2", 2)])])
    libi.fe_sendUsrData(s, b"hello")
    print(libi.fe_recvUsrData(s))
    libi.fe_finalize()

Member (each daemon)::

    import libi
    libi.init()
    if libi.amMaster():
        libi.sendUsrData(libi.recvUsrData())
    libi.finalize()

Every call maps to the C call of the same name without ``LIBI_`` (``fe_launch`` is
``LIBI_fe_launch``); see docs/session.md for what each does, the thread contract and the
result codes. Data goes in and out as ``bytes``. A call that fails raises ``LibiError``
carrying the code (``.code``, ``.name`` as ``"LIBI_EHOSTDIST"``) and ``LIBI_errorString()``
(``.message``). ctypes releases the GIL during each call, so a blocking receive in one
Python thread does not stop the others.

The library: ``$LIBI_LIBRARY`` if set; else ``liblibi.so`` next to ``libi-mpiexec`` on
``PATH``; else in this checkout's ``target/release`` or ``target/debug``; else the dynamic
loader's own search (``LD_LIBRARY_PATH``, ``ldconfig``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
from collections import namedtuple
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "LibiError", "ProcDist", "ProcDesc", "library_path",
    "OK", "YES", "NO", "NOTIMPL", "EINIT", "ELAUNCH", "ESESS", "EFRONTENDONLY",
    "ESESSALREADYLAUNCHED", "EIO", "EHOSTDIST", "ESESSFAILED", "EARG", "ENOTMASTER", "ETIMEOUT",
    "ATTACH_LIBI", "ATTACH_MPIR", "POLL_DATA", "POLL_END", "OUTPUT_LABEL",
    "STATUS_CREATED", "STATUS_LAUNCHING", "STATUS_RUNNING", "STATUS_ENDED", "STATUS_FAILED",
    "VERSION", "COLL_MAX", "rcName", "errorString",
    "fe_init", "fe_createSession", "fe_launch", "fe_attachAndLaunch", "fe_sendUsrData",
    "fe_recvUsrData", "fe_recvUsrDataTimeout", "fe_poll", "fe_getEventFd", "fe_getSessionStatus",
    "fe_setStatusCallback", "fe_endSession", "fe_killSession", "fe_setSessionOutput",
    "fe_setSessionOutputFiles", "fe_getHostlistSize", "fe_getMaxMsgBufLen", "fe_getJobProcTable",
    "fe_getMPIRProcTable", "fe_getJobHosts", "fe_finalize",
    "init", "finalize", "getMyRank", "getSize", "amMaster", "barrier", "broadcast", "scatter",
    "gather", "allgather", "gatherv", "scatterv", "sendUsrData", "recvUsrData", "getMyProctab",
    "getMyHostname",
]

VERSION = 1
COLL_MAX = 256 * 1024 * 1024

# libi_rc_e
(OK, YES, NO, NOTIMPL, EINIT, ELAUNCH, ESESS, EFRONTENDONLY, ESESSALREADYLAUNCHED, EIO,
 EHOSTDIST, ESESSFAILED, EARG, ENOTMASTER, ETIMEOUT) = range(15)
ATTACH_LIBI, ATTACH_MPIR = 0, 1
POLL_DATA, POLL_END = 1, 2
OUTPUT_LABEL = 1
STATUS_CREATED, STATUS_LAUNCHING, STATUS_RUNNING, STATUS_ENDED, STATUS_FAILED = range(5)


class LibiError(Exception):
    """A LIBI call failed: ``code`` (an int), ``name`` ("LIBI_ESESS"), ``message`` (the
    library's one line, ``LIBI_errorString()``), ``call`` (the C function)."""

    def __init__(self, code: int, message: str, call: str = ""):
        self.code = code
        self.name = rcName(code)
        self.message = message
        self.call = call
        super().__init__(f"{call}: {self.name}: {message}" if call else f"{self.name}: {message}")


ProcDesc = namedtuple("ProcDesc", "rank pid host executable")
ProcDesc.__doc__ = "One rank of a job: its rank, pid (0: not running), host and executable."


class ProcDist:
    """One process distribution for fe_launch: ``exe`` with ``args`` on ``hosts`` (a list of
    ``(host, nproc)``, or a ``"host:n,host:n"`` string), with extra environment ``env``."""

    def __init__(self, session: int, exe: str, args: Sequence[str] = (),
                 hosts: Union[str, Iterable[Tuple[str, int]]] = (),
                 env: Optional[Mapping[str, str]] = None):
        self.session = session
        self.exe = exe
        self.args = list(args)
        self.hosts = _hosts(hosts)
        self.env = dict(env or {})


def _hosts(hosts) -> List[Tuple[str, int]]:
    if isinstance(hosts, str):
        out = []
        for item in filter(None, hosts.split(",")):
            name, _, n = item.partition(":")
            out.append((name, int(n) if n else 1))
        return out
    return [(h, int(n)) for h, n in hosts]


# ---- the library ----

def library_path() -> str:
    """Where liblibi.so is taken from (see the module's documentation)."""
    env = os.environ.get("LIBI_LIBRARY")
    if env:
        return env
    mpiexec = shutil.which("libi-mpiexec")
    if mpiexec:
        p = os.path.join(os.path.dirname(os.path.realpath(mpiexec)), "liblibi.so")
        if os.path.exists(p):
            return p
    top = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    for profile in ("release", "debug"):
        p = os.path.join(top, "target", profile, "liblibi.so")
        if os.path.exists(p):
            return p
    return "liblibi.so"


class _HostDist(ctypes.Structure):
    pass


_HostDist._fields_ = [("hostname", ctypes.c_char_p), ("nproc", ctypes.c_uint),
                      ("next", ctypes.POINTER(_HostDist))]


class _Env(ctypes.Structure):
    pass


_Env._fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p),
                 ("next", ctypes.POINTER(_Env))]


class _ProcDistReq(ctypes.Structure):
    _fields_ = [("sessionHandle", ctypes.c_int), ("proc_path", ctypes.c_char_p),
                ("proc_argv", ctypes.POINTER(ctypes.c_char_p)),
                ("hd", ctypes.POINTER(_HostDist)), ("env", ctypes.POINTER(_Env))]


class _ProcDesc(ctypes.Structure):
    _fields_ = [("rank", ctypes.c_int), ("pid", ctypes.c_int), ("host_name", ctypes.c_char_p),
                ("executable_name", ctypes.c_char_p)]


class _AttachReq(ctypes.Structure):
    _fields_ = [("sessionHandle", ctypes.c_int), ("job_pid", ctypes.c_int), ("how", ctypes.c_int),
                ("ranks", ctypes.POINTER(ctypes.c_int)), ("nranks", ctypes.c_int),
                ("proc_path", ctypes.c_char_p), ("proc_argv", ctypes.POINTER(ctypes.c_char_p)),
                ("env", ctypes.POINTER(_Env))]


class _Poll(ctypes.Structure):
    _fields_ = [("sessionHandle", ctypes.c_int), ("revents", ctypes.c_int)]


_STATUS_CB = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

_P = ctypes.POINTER
_I, _U, _V, _S = ctypes.c_int, ctypes.c_uint, ctypes.c_void_p, ctypes.c_char_p
_SIGNATURES = {
    "LIBI_errorString": ([], _S),
    "LIBI_rcName": ([_I], _S),
    "LIBI_fe_init": ([_I], _I),
    "LIBI_fe_createSession": ([_P(_I)], _I),
    "LIBI_fe_launch": ([_P(_ProcDistReq), _I], _I),
    "LIBI_fe_getMaxMsgBufLen": ([_P(_I)], _I),
    "LIBI_fe_sendUsrData": ([_I, _V, _I], _I),
    "LIBI_fe_recvUsrData": ([_I, _P(_V), _P(_I)], _I),
    "LIBI_fe_recvUsrDataTimeout": ([_I, _P(_V), _P(_I), _I], _I),
    "LIBI_fe_getHostlistSize": ([_I, _P(_U)], _I),
    "LIBI_fe_getJobProcTable": ([_I, _P(_P(_ProcDesc)), _P(_I)], _I),
    "LIBI_fe_getMPIRProcTable": ([_I, _P(_P(_ProcDesc)), _P(_I)], _I),
    "LIBI_fe_getJobHosts": ([_I, _P(_P(_HostDist))], _I),
    "LIBI_fe_attachAndLaunch": ([_P(_AttachReq)], _I),
    "LIBI_fe_poll": ([_P(_Poll), _I, _I, _P(_I)], _I),
    "LIBI_fe_getEventFd": ([_P(_I)], _I),
    "LIBI_fe_getSessionStatus": ([_I, _P(_I)], _I),
    "LIBI_fe_setStatusCallback": ([_STATUS_CB, _V], _I),
    "LIBI_fe_endSession": ([_I], _I),
    "LIBI_fe_killSession": ([_I], _I),
    "LIBI_fe_setSessionOutput": ([_I, _I, _I, _I], _I),
    "LIBI_fe_setSessionOutputFiles": ([_I, _S, _S, _I], _I),
    "LIBI_fe_finalize": ([], _I),
    "LIBI_init": ([_I, _V, _V], _I),
    "LIBI_finalize": ([], _I),
    "LIBI_getMyRank": ([_P(_I)], _I),
    "LIBI_getSize": ([_P(_I)], _I),
    "LIBI_amMaster": ([], _I),
    "LIBI_barrier": ([], _I),
    "LIBI_broadcast": ([_V, _I], _I),
    "LIBI_scatter": ([_V, _I, _V], _I),
    "LIBI_gather": ([_V, _I, _V], _I),
    "LIBI_allgather": ([_V, _I, _V], _I),
    "LIBI_gatherv": ([_V, _I, _P(_V), _P(_I)], _I),
    "LIBI_scatterv": ([_V, _P(_I), _P(_V), _P(_I)], _I),
    "LIBI_sendUsrData": ([_V, _I], _I),
    "LIBI_recvUsrData": ([_P(_V), _P(_I)], _I),
    "LIBI_getMyProctab": ([_P(_P(_ProcDesc)), _P(_I)], _I),
    "LIBI_getMyHostname": ([_S, _I], _I),
}

_lib = None
_libc = None


def _load():
    global _lib, _libc
    if _lib is None:
        path = library_path()
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            raise OSError(f"libi: cannot load the LIBI library {path!r} ({e}); set LIBI_LIBRARY "
                          "to liblibi.so's path") from None
        for name, (args, res) in _SIGNATURES.items():
            f = getattr(lib, name)
            f.argtypes = args
            f.restype = res
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free.restype = None
        _libc, _lib = libc, lib
    return _lib


def _call(name: str, *args, ok: Tuple[int, ...] = (OK,)) -> int:
    lib = _load()
    rc = getattr(lib, name)(*args)
    if rc not in ok:
        raise LibiError(rc, errorString(), name)
    return rc


def _take(ptr: ctypes.c_void_p, n: int) -> bytes:
    """The bytes of a malloc()ed block, freed."""
    if not ptr.value:
        return b""
    try:
        return ctypes.string_at(ptr.value, n)
    finally:
        _libc.free(ptr.value)


def _cstr(s: Union[str, bytes]) -> bytes:
    return s if isinstance(s, bytes) else os.fsencode(s)


def _argv(args: Sequence[Union[str, bytes]]):
    arr = (ctypes.c_char_p * (len(args) + 1))(*[_cstr(a) for a in args], None)
    return arr


def _env_list(env: Optional[Mapping[str, str]], keep: list):
    head = None
    for name, value in reversed(list((env or {}).items())):
        e = _Env(_cstr(name), _cstr(value), head)
        keep.append(e)
        head = ctypes.pointer(e)
    return head


def _host_list(hosts: Sequence[Tuple[str, int]], keep: list):
    head = None
    for name, n in reversed(list(hosts)):
        h = _HostDist(_cstr(name), n, head)
        keep.append(h)
        head = ctypes.pointer(h)
    return head


def _table(call: str, pid: int) -> List[ProcDesc]:
    t = _P(_ProcDesc)()
    n = ctypes.c_int(0)
    _call(call, pid, ctypes.byref(t), ctypes.byref(n))
    return _proc_descs(t, n.value)


def _proc_descs(t, n: int) -> List[ProcDesc]:
    try:
        return [ProcDesc(t[i].rank, t[i].pid, os.fsdecode(t[i].host_name or b""),
                         os.fsdecode(t[i].executable_name or b"")) for i in range(n)]
    finally:
        if t:
            _libc.free(ctypes.cast(t, ctypes.c_void_p))


def _bytes_arg(data) -> bytes:
    if isinstance(data, str):
        raise TypeError("LIBI moves bytes: encode the str first")
    return bytes(data)


# ---- both ----

def errorString() -> str:
    """The calling thread's last failure, one line (LIBI_errorString)."""
    return (_load().LIBI_errorString() or b"").decode("utf-8", "replace")


def rcName(rc: int) -> str:
    """A result code's name: rcName(10) == "LIBI_EHOSTDIST"."""
    return (_load().LIBI_rcName(rc) or b"").decode()


# ---- front end ----

def fe_init(ver: int = VERSION) -> None:
    _call("LIBI_fe_init", ver)


def fe_createSession() -> int:
    s = ctypes.c_int(-1)
    _call("LIBI_fe_createSession", ctypes.byref(s))
    return s.value


def fe_launch(dists: Iterable[ProcDist]) -> None:
    """Launch process distributions (several sessions, several images of one session);
    returns once every member called init."""
    dists = list(dists)
    keep: list = []
    reqs = (_ProcDistReq * max(len(dists), 1))()
    for i, d in enumerate(dists):
        argv = _argv(d.args)
        keep.append(argv)
        reqs[i] = _ProcDistReq(d.session, _cstr(d.exe), argv, _host_list(d.hosts, keep),
                               _env_list(d.env, keep))
    _call("LIBI_fe_launch", reqs, len(dists))


def fe_attachAndLaunch(session: int, job_pid: int, daemon: str, args: Sequence[str] = (),
                       env: Optional[Mapping[str, str]] = None,
                       ranks: Optional[Sequence[int]] = None, how: int = ATTACH_LIBI) -> None:
    """One daemon per host of a running job (of the hosts of ``ranks``; None: every rank, an
    empty list is a ValueError); each gets its host's ranks with getMyProctab(). ``how``:
    ATTACH_LIBI (a libi-mpiexec's pid) or ATTACH_MPIR."""
    if ranks is not None and len(ranks) == 0:
        # The C call takes an empty subset (nranks 0) as every rank: say so rather than
        # attach everywhere.
        raise ValueError("fe_attachAndLaunch: an empty subset of ranks (ranks=None: every rank)")
    keep: list = []
    argv = _argv(args)
    rk = (ctypes.c_int * len(ranks))(*ranks) if ranks is not None else None
    req = _AttachReq(session, job_pid, how, rk, len(ranks) if ranks is not None else 0,
                     _cstr(daemon), argv, _env_list(env, keep))
    _call("LIBI_fe_attachAndLaunch", ctypes.byref(req))


def fe_sendUsrData(session: int, data: bytes) -> None:
    b = _bytes_arg(data)
    _call("LIBI_fe_sendUsrData", session, b, len(b))


def fe_recvUsrData(session: int) -> bytes:
    """The master's next message (blocks)."""
    p, n = ctypes.c_void_p(), ctypes.c_int(0)
    _call("LIBI_fe_recvUsrData", session, ctypes.byref(p), ctypes.byref(n))
    return _take(p, n.value)


def fe_recvUsrDataTimeout(session: int, timeout_ms: int) -> Optional[bytes]:
    """As fe_recvUsrData, waiting at most timeout_ms (0: not at all; negative: no limit):
    None when no message came in time (LIBI_ETIMEOUT)."""
    p, n = ctypes.c_void_p(), ctypes.c_int(0)
    rc = _call("LIBI_fe_recvUsrDataTimeout", session, ctypes.byref(p), ctypes.byref(n),
               timeout_ms, ok=(OK, ETIMEOUT))
    return None if rc == ETIMEOUT else _take(p, n.value)


def fe_poll(sessions: Sequence[int], timeout_ms: int = -1) -> Dict[int, int]:
    """Wait until one of the sessions has a message (POLL_DATA) or has ended (POLL_END):
    {session: revents} of those ready ({} when the time ran out)."""
    items = (_Poll * max(len(sessions), 1))(*[_Poll(s, 0) for s in sessions])
    n = ctypes.c_int(0)
    _call("LIBI_fe_poll", items, len(sessions), timeout_ms, ctypes.byref(n))
    return {items[i].sessionHandle: items[i].revents
            for i in range(len(sessions)) if items[i].revents}


def fe_getEventFd() -> int:
    fd = ctypes.c_int(-1)
    _call("LIBI_fe_getEventFd", ctypes.byref(fd))
    return fd.value


def fe_getSessionStatus(session: int) -> int:
    st = ctypes.c_int(-1)
    _call("LIBI_fe_getSessionStatus", session, ctypes.byref(st))
    return st.value


_status_cb = None


def fe_setStatusCallback(cb: Optional[Callable[[int, int, str], None]]) -> None:
    """cb(session, status, message) when a session ends or fails, from a thread of the
    library (keep it short; never call fe_finalize in it). None removes it."""
    global _status_cb
    if cb is None:
        c = _STATUS_CB()
    else:
        def trampoline(s, st, msg, _arg):
            cb(s, st, (msg or b"").decode("utf-8", "replace"))
        c = _STATUS_CB(trampoline)
    _call("LIBI_fe_setStatusCallback", c, None)
    _status_cb = c  # kept alive while the library may call it


def fe_endSession(session: int) -> None:
    _call("LIBI_fe_endSession", session)


def fe_killSession(session: int) -> None:
    _call("LIBI_fe_killSession", session)


def fe_setSessionOutput(session: int, out_fd: int = -1, err_fd: int = -1, flags: int = 0) -> None:
    _call("LIBI_fe_setSessionOutput", session, out_fd, err_fd, flags)


def fe_setSessionOutputFiles(session: int, out_path: Optional[str], err_path: Optional[str],
                             flags: int = 0) -> None:
    _call("LIBI_fe_setSessionOutputFiles", session,
          _cstr(out_path) if out_path is not None else None,
          _cstr(err_path) if err_path is not None else None, flags)


def fe_getHostlistSize(session: int) -> int:
    n = ctypes.c_uint(0)
    _call("LIBI_fe_getHostlistSize", session, ctypes.byref(n))
    return n.value


def fe_getMaxMsgBufLen() -> int:
    n = ctypes.c_int(0)
    _call("LIBI_fe_getMaxMsgBufLen", ctypes.byref(n))
    return n.value


def fe_getJobProcTable(job_pid: int) -> List[ProcDesc]:
    return _table("LIBI_fe_getJobProcTable", job_pid)


def fe_getMPIRProcTable(starter_pid: int) -> List[ProcDesc]:
    return _table("LIBI_fe_getMPIRProcTable", starter_pid)


def fe_getJobHosts(job_pid: int) -> List[Tuple[str, int]]:
    hd = _P(_HostDist)()
    _call("LIBI_fe_getJobHosts", job_pid, ctypes.byref(hd))
    out, h = [], hd
    while h:
        out.append((os.fsdecode(h.contents.hostname), h.contents.nproc))
        h = h.contents.next
    if hd:
        _libc.free(ctypes.cast(hd, ctypes.c_void_p))
    return out


def fe_finalize() -> None:
    _call("LIBI_fe_finalize")


# ---- members ----

def init(ver: int = VERSION) -> None:
    """Join the session (every member calls it; returns once every member did)."""
    _call("LIBI_init", ver, None, None)


def finalize() -> None:
    _call("LIBI_finalize")


def getMyRank() -> int:
    r = ctypes.c_int(-1)
    _call("LIBI_getMyRank", ctypes.byref(r))
    return r.value


def getSize() -> int:
    n = ctypes.c_int(0)
    _call("LIBI_getSize", ctypes.byref(n))
    return n.value


def amMaster() -> bool:
    return _call("LIBI_amMaster", ok=(YES, NO)) == YES


def barrier() -> None:
    _call("LIBI_barrier")


def broadcast(data: Optional[bytes] = None, size: Optional[int] = None) -> bytes:
    """The master's bytes to every member. The master passes ``data``; the others pass
    ``size`` (or bytes of that size): every member must give the same size."""
    n = len(data) if data is not None else size
    if n is None:
        raise TypeError("broadcast: give the data (master) or its size")
    buf = ctypes.create_string_buffer(_bytes_arg(data) if data is not None else b"", max(n, 1))
    _call("LIBI_broadcast", buf, n)
    return buf.raw[:n]


def scatter(blocks: Optional[Sequence[bytes]] = None, size: Optional[int] = None) -> bytes:
    """The master's ``blocks`` (one per member, each of ``size`` bytes) out to the members,
    block i to member i; every member gets its block. Non-masters pass ``size``."""
    if blocks is not None:
        blocks = [_bytes_arg(b) for b in blocks]
        size = len(blocks[0]) if blocks else 0
        if any(len(b) != size for b in blocks):
            raise ValueError("scatter: the blocks must all have one size (scatterv does not)")
    if size is None:
        raise TypeError("scatter: give the blocks (master) or the size of one")
    send = b"".join(blocks) if blocks is not None else None
    out = ctypes.create_string_buffer(max(size, 1))
    _call("LIBI_scatter", send, size, out)
    return out.raw[:size]


def gather(data: bytes) -> Optional[List[bytes]]:
    """Every member's bytes (the same size everywhere) to the master: the list in rank order
    on the master, None on the others."""
    data = _bytes_arg(data)
    n = len(data)
    master = amMaster()
    size = getSize() if master else 0
    out = ctypes.create_string_buffer(max(n * size, 1)) if master else None
    _call("LIBI_gather", data, n, out)
    return [out.raw[i * n:(i + 1) * n] for i in range(size)] if master else None


def allgather(data: bytes) -> List[bytes]:
    """Every member's bytes (the same size everywhere) to every member, in rank order."""
    data = _bytes_arg(data)
    n, size = len(data), getSize()
    out = ctypes.create_string_buffer(max(n * size, 1))
    _call("LIBI_allgather", data, n, out)
    return [out.raw[i * n:(i + 1) * n] for i in range(size)]


def gatherv(data: bytes) -> Optional[List[bytes]]:
    """Every member's bytes, each of its own size, to the master: the list in rank order on
    the master, None on the others."""
    data = _bytes_arg(data)
    master = amMaster()
    size = getSize() if master else 0
    p = ctypes.c_void_p()
    counts = (ctypes.c_int * max(size, 1))()
    _call("LIBI_gatherv", data, len(data), ctypes.byref(p), counts)
    if not master:
        return None
    raw = _take(p, sum(counts[:size]))
    out, at = [], 0
    for c in counts[:size]:
        out.append(raw[at:at + c])
        at += c
    return out


def scatterv(blocks: Optional[Sequence[bytes]] = None) -> bytes:
    """The master's ``blocks`` (one per member, of any size) out, block i to member i; every
    member gets its block. Non-masters pass nothing."""
    send, counts = None, None
    if blocks is not None:
        blocks = [_bytes_arg(b) for b in blocks]
        send = b"".join(blocks)
        counts = (ctypes.c_int * max(len(blocks), 1))(*[len(b) for b in blocks])
    p, n = ctypes.c_void_p(), ctypes.c_int(0)
    _call("LIBI_scatterv", send, counts, ctypes.byref(p), ctypes.byref(n))
    return _take(p, n.value)


def sendUsrData(data: bytes) -> None:
    """Master only: a message to the front end."""
    b = _bytes_arg(data)
    _call("LIBI_sendUsrData", b, len(b))


def recvUsrData() -> bytes:
    """Master only: the front end's next message (blocks; LibiError ESESS once the front end
    ended the session)."""
    p, n = ctypes.c_void_p(), ctypes.c_int(0)
    _call("LIBI_recvUsrData", ctypes.byref(p), ctypes.byref(n))
    return _take(p, n.value)


def getMyProctab() -> List[ProcDesc]:
    """This daemon's host's ranks of the job its session was attached to (rank order); []
    for a session not launched by fe_attachAndLaunch."""
    t = _P(_ProcDesc)()
    n = ctypes.c_int(0)
    _call("LIBI_getMyProctab", ctypes.byref(t), ctypes.byref(n))
    return _proc_descs(t, n.value)


def getMyHostname() -> str:
    buf = ctypes.create_string_buffer(1024)
    _call("LIBI_getMyHostname", buf, len(buf))
    return os.fsdecode(buf.value)
