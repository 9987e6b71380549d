#!/usr/bin/env python3
"""Print the PMI conversation of each rank from per-rank strace files.

Input: a directory of files named r<rank>.fd<PMI_FD>.st, written by
`strace -f -e trace=read,write,sendto,recvfrom -s 65535 -xx -o FILE` around each rank (see
bench/pmitrace-record.sh). Output: per rank, one line per request (`> ...`) or answer
(`< ...`) on its PMI_FD, bytes re-joined into lines. With --summary, the kvsname is shown as
K and long values as <length>, which makes the per-rank patterns easy to compare.

strace splits a call of a threaded process into "<unfinished ...>" and "<... resumed>" lines;
both halves are joined here (write data is on the first, read data on the second).
"""
import glob
import os
import re
import sys

START = re.compile(r'^(\d+)\s+(read|write|sendto|recvfrom)\((\d+),\s*(?:"((?:[^"\\]|\\.)*)")?')
RESUMED = re.compile(
    r'^(\d+)\s+<\.\.\. (read|write|sendto|recvfrom) resumed>\s*(?:"((?:[^"\\]|\\.)*)")?.*\)\s*=\s*(-?\d+)')
RESULT = re.compile(r'\)\s*=\s*(-?\d+)')
ESC = {'n': 10, 't': 9, 'r': 13, '\\': 92, '"': 34, 'v': 11, 'f': 12}


def unescape(s):
    out = bytearray()
    i = 0
    while i < len(s):
        if s[i] != '\\':
            out.append(ord(s[i]))
            i += 1
            continue
        c = s[i + 1]
        if c == 'x':
            out.append(int(s[i + 2:i + 4], 16))
            i += 4
        elif c in ESC:
            out.append(ESC[c])
            i += 2
        else:
            j = i + 1
            while j < len(s) and j < i + 4 and s[j].isdigit():
                j += 1
            out.append(int(s[i + 1:j], 8))
            i = j
    return bytes(out)


def conversation(path, fd):
    """(direction, line) pairs on fd: '>' sent by the rank, '<' received."""
    chunks, pending = [], {}
    with open(path, errors='replace') as f:
        for line in f:
            m = RESUMED.match(line)
            if m:
                if m.group(1) not in pending:
                    continue
                call, f_, data = pending.pop(m.group(1))
                if data is None:
                    data = m.group(3)
                n = int(m.group(4))
            else:
                m = START.match(line)
                if not m:
                    continue
                call, f_, data = m.group(2), int(m.group(3)), m.group(4)
                if '<unfinished ...>' in line:
                    pending[m.group(1)] = (call, f_, data)
                    continue
                r = RESULT.search(line)
                if not r:
                    continue
                n = int(r.group(1))
            if f_ != fd or n <= 0 or data is None:
                continue
            chunks.append(('>' if call in ('write', 'sendto') else '<', unescape(data)[:n]))
    lines, cur = [], {'>': b'', '<': b''}
    for d, data in chunks:
        cur[d] += data
        while b'\n' in cur[d]:
            one, cur[d] = cur[d].split(b'\n', 1)
            lines.append((d, one.decode('latin1')))
    for d, rest in cur.items():
        if rest:
            lines.append((d, '[no newline] ' + rest.decode('latin1')))
    return lines


def summarize(line):
    line = re.sub(r'kvsname=\S+', 'kvsname=K', line)
    return re.sub(r'value=(\S*)',
                  lambda m: f'value=<{len(m.group(1))}>' if len(m.group(1)) > 40 else m.group(0),
                  line)


def main():
    args = [a for a in sys.argv[1:] if a != '--summary']
    if len(args) != 1:
        sys.exit('usage: pmitrace_extract.py [--summary] DIR')
    summary = '--summary' in sys.argv
    files = []
    for p in glob.glob(os.path.join(args[0], 'r*.fd*.st')):
        m = re.match(r'r(\d+)\.fd(\d+)\.st$', os.path.basename(p))
        if m:
            files.append((int(m.group(1)), int(m.group(2)), p))
    for rank, fd, path in sorted(files):
        print(f'=== rank {rank} fd {fd}')
        for d, line in conversation(path, fd):
            print(d, summarize(line) if summary else line)


if __name__ == '__main__':
    main()
