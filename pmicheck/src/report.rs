//! Check outcomes, their compact encoding for the trip through the server's KVS, and the
//! merge of all ranks' outcomes into one line per check.

/// Outcome of one check on one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Pass,
    Fail,
    Skip,
    /// The check does not apply to this rank (e.g. rank-0-only checks on other ranks).
    NotApplicable,
}

impl Status {
    pub fn code(self) -> char {
        match self {
            Status::Pass => 'P',
            Status::Fail => 'F',
            Status::Skip => 'S',
            Status::NotApplicable => '-',
        }
    }
    pub fn from_code(c: char) -> Option<Status> {
        Some(match c {
            'P' => Status::Pass,
            'F' => Status::Fail,
            'S' => Status::Skip,
            '-' => Status::NotApplicable,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: Status,
    pub detail: String,
}

/// One rank's outcomes, in the order of the suite's check list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankResults {
    pub rank: usize,
    pub outcomes: Vec<Outcome>,
}

/// Longest detail carried through the KVS (before escaping).
pub const DETAIL_MAX: usize = 160;

/// Escape a detail for a KVS value: no spaces, `=`, `;` or control characters survive
/// (`+` is a space, `%XX` a byte).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b' ' => out.push('+'),
            b'A'..=b'Z'
            | b'a'..=b'z'
            | b'0'..=b'9'
            | b'.'
            | b'_'
            | b'-'
            | b':'
            | b'/'
            | b'('
            | b')'
            | b'['
            | b']' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

pub fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(v) => {
                        out.push(v);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Cut `s` to at most `n` bytes on a char boundary.
pub fn truncate(s: &str, n: usize) -> String {
    if s.len() <= n {
        return s.to_owned();
    }
    let mut end = n;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The status string of a rank (`PPF-S…`) and the indices whose detail must travel (failures
/// and skips).
/// `pass_detail(i)`: also send the detail of a pass of check `i`.
pub fn encode_statuses(
    outcomes: &[Outcome],
    pass_detail: impl Fn(usize) -> bool,
) -> (String, Vec<usize>) {
    let codes = outcomes.iter().map(|o| o.status.code()).collect();
    let idx = outcomes
        .iter()
        .enumerate()
        .filter(|(i, o)| {
            matches!(o.status, Status::Fail | Status::Skip)
                || (o.status == Status::Pass && pass_detail(*i))
        })
        .map(|(i, _)| i)
        .collect();
    (codes, idx)
}

/// Parse a status string of `n` checks.
pub fn decode_statuses(s: &str, n: usize) -> Result<Vec<Status>, String> {
    let v: Option<Vec<Status>> = s.chars().map(Status::from_code).collect();
    match v {
        Some(v) if v.len() == n => Ok(v),
        Some(v) => Err(format!("{} statuses, expected {n}", v.len())),
        None => Err(format!("bad status string {:?}", truncate(s, 40))),
    }
}

/// One printed line: check name, merged status, detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub name: String,
    pub status: Status,
    pub detail: String,
}

/// Merge every rank's outcome of each check: FAIL if any rank failed (the first failing
/// rank's detail, and how many failed), else PASS if any passed (rank 0's detail when it
/// passed), else SKIP (the first skip's detail). `size` is the job size for the counts.
pub fn merge(names: &[&str], ranks: &[RankResults], size: usize) -> Vec<Line> {
    let mut lines = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let at = |st: Status| -> Vec<(usize, &str)> {
            ranks
                .iter()
                .filter_map(|r| r.outcomes.get(i).map(|o| (r.rank, o)))
                .filter(|(_, o)| o.status == st)
                .map(|(rk, o)| (rk, o.detail.as_str()))
                .collect()
        };
        let (fails, passes, skips) = (at(Status::Fail), at(Status::Pass), at(Status::Skip));
        let line = if let Some((rk, d)) = fails.first() {
            let more = if fails.len() > 1 {
                format!(" (failed on {} of {size} ranks)", fails.len())
            } else {
                String::new()
            };
            Line {
                name: name.to_string(),
                status: Status::Fail,
                detail: if size > 1 { format!("rank {rk}: {d}{more}") } else { d.to_string() },
            }
        } else if !passes.is_empty() {
            let d0 = passes
                .iter()
                .find(|(rk, _)| *rk == 0)
                .or_else(|| passes.iter().find(|(_, d)| !d.is_empty()))
                .map_or("", |(_, d)| *d);
            let cnt = if passes.len() > 1 {
                format!("[{}/{size} ranks]", passes.len())
            } else {
                String::new()
            };
            let detail = [d0, cnt.as_str()]
                .iter()
                .filter(|s| !s.is_empty())
                .copied()
                .collect::<Vec<_>>()
                .join(" ");
            Line { name: name.to_string(), status: Status::Pass, detail }
        } else if let Some((_, d)) = skips.first() {
            Line { name: name.to_string(), status: Status::Skip, detail: d.to_string() }
        } else {
            Line {
                name: name.to_string(),
                status: Status::Skip,
                detail: "not applicable to any rank".into(),
            }
        };
        lines.push(line);
    }
    lines
}

/// Print the lines and the summary; the number of failures.
pub fn print(lines: &[Line]) -> usize {
    use std::io::Write;
    let (mut p, mut f, mut s) = (0, 0, 0);
    let mut out = std::io::stdout().lock();
    for l in lines {
        let tag = match l.status {
            Status::Pass => {
                p += 1;
                "PASS"
            }
            Status::Fail => {
                f += 1;
                "FAIL"
            }
            _ => {
                s += 1;
                "SKIP"
            }
        };
        let _ = writeln!(out, "{tag} {}: {}", l.name, l.detail);
    }
    if s > 0 {
        let _ = writeln!(out, "{p} passed, {f} failed, {s} skipped");
    } else {
        let _ = writeln!(out, "{p} passed, {f} failed");
    }
    let _ = out.flush();
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(status: Status, d: &str) -> Outcome {
        Outcome { status, detail: d.into() }
    }

    #[test]
    fn escape_roundtrip() {
        for s in ["plain", "a b=c;d%e+f\ng", "ünïcode ok", ""] {
            let e = escape(s);
            assert!(!e.contains([' ', '=', ';', '\n']), "{e}");
            assert_eq!(unescape(&e), s);
        }
        assert_eq!(unescape("100%"), "100%");
    }

    #[test]
    fn statuses_roundtrip() {
        let v = vec![
            o(Status::Pass, ""),
            o(Status::Fail, "x"),
            o(Status::NotApplicable, ""),
            o(Status::Skip, "y"),
        ];
        let (s, idx) = encode_statuses(&v, |_| false);
        assert_eq!(s, "PF-S");
        assert_eq!(idx, vec![1, 3]);
        assert_eq!(decode_statuses(&s, 4).unwrap(), v.iter().map(|o| o.status).collect::<Vec<_>>());
        assert!(decode_statuses(&s, 3).is_err());
        assert!(decode_statuses("PX", 2).is_err());
    }

    #[test]
    fn merging() {
        let r0 = RankResults {
            rank: 0,
            outcomes: vec![
                o(Status::Pass, "ok0"),
                o(Status::NotApplicable, ""),
                o(Status::Skip, "refused"),
            ],
        };
        let r1 = RankResults {
            rank: 1,
            outcomes: vec![
                o(Status::Fail, "bad"),
                o(Status::Pass, ""),
                o(Status::NotApplicable, ""),
            ],
        };
        let r2 = RankResults {
            rank: 2,
            outcomes: vec![
                o(Status::Fail, "bad2"),
                o(Status::NotApplicable, ""),
                o(Status::NotApplicable, ""),
            ],
        };
        let l = merge(&["a", "b", "c"], &[r0, r1, r2], 3);
        assert_eq!(l[0].status, Status::Fail);
        assert_eq!(l[0].detail, "rank 1: bad (failed on 2 of 3 ranks)");
        assert_eq!(l[1].status, Status::Pass);
        assert_eq!(l[1].detail, "");
        assert_eq!(l[2].status, Status::Skip);
        assert_eq!(l[2].detail, "refused");
    }
}
