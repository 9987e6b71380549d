//! Host lists (Hydra formats) and rank placement.
//!
//! * hostfile (`-f`/`-hostfile`/`-machinefile`): one `host[:n]` per line, `#` starts a comment,
//!   blank lines ignored; `n` defaults to 1. Anything else on a line is an error naming the
//!   file, the line and the word (see [`parse_hostfile`]).
//! * `-hosts h1:2,h2`: the same entries, comma-separated.
//! * `-ppn N` overrides every host's slot count.
//! * `-order-nodes ascending|descending` then sorts the hosts by slot count (stably).
//!
//! A host named twice is one host with the slots added up (first position kept). Placement is
//! Hydra's block placement: fill each host's slots in order; if there are more ranks than
//! slots, go round the list again.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub slots: u32,
    /// A hostfile's `user=NAME`: the user ssh and rsh log in as on this host.
    pub user: Option<String>,
    /// A hostfile's `binding=SPEC`: this host's `-bind-to`, over the job's.
    pub binding: Option<libi_binding::BindTo>,
}

impl Host {
    pub fn new(name: impl Into<String>, slots: u32) -> Host {
        Host { name: name.into(), slots, user: None, binding: None }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostError(pub String);

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for HostError {}

/// Parse one `host[:n]` entry. `origin` names where it came from, for errors.
fn entry(text: &str, origin: &dyn Fn() -> String) -> Result<Host, HostError> {
    let (name, slots) = match text.split_once(':') {
        // Hydra reads `host:` as one slot.
        Some((h, n)) if n.trim().is_empty() => (h.trim(), 1),
        Some((h, n)) => {
            let n: u32 = n.trim().parse().map_err(|_| {
                HostError(format!("{}: bad slot count '{}' in '{text}'", origin(), n.trim()))
            })?;
            if n == 0 {
                return Err(HostError(format!(
                    "{}: slot count must be at least 1 in '{text}'",
                    origin()
                )));
            }
            (h.trim(), n)
        }
        None => (text.trim(), 1),
    };
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c.is_control()) {
        return Err(HostError(format!("{}: bad host name in '{}'", origin(), text.escape_debug())));
    }
    Ok(Host::new(name, slots))
}

/// A user name ssh and rsh can be given (`user@host`, `-l user`): no empty one, nothing a
/// shell or ssh would read another way.
fn valid_user(u: &str) -> bool {
    !u.is_empty()
        && !u.starts_with('-')
        && u.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
}

/// Merge duplicate host names (slots add up, first position, user and binding kept).
pub fn merge(hosts: Vec<Host>) -> Vec<Host> {
    let mut out: Vec<Host> = Vec::with_capacity(hosts.len());
    let mut index = std::collections::HashMap::new();
    for h in hosts {
        match index.get(&h.name) {
            Some(&i) => {
                let slot: &mut Host = &mut out[i];
                slot.slots = slot.slots.saturating_add(h.slots);
                if slot.user.is_none() {
                    slot.user = h.user;
                }
                if slot.binding.is_none() {
                    slot.binding = h.binding;
                }
            }
            None => {
                index.insert(h.name.clone(), out.len());
                out.push(h);
            }
        }
    }
    out
}

/// Parse a hostfile's text; `file` names it in errors (`hostfile FILE line N: ...`).
///
/// A line is one `host` or `host:N` (N a positive number), as Hydra reads it; `#` starts a
/// comment (Hydra takes only whole-line comments and refuses `host:2 # note`), blank lines
/// are skipped. Any other word is an error naming it: Hydra refuses them too (`n1 slots=2`,
/// `n1:2 n2:1`, `n1 ifhn=x`: "token ... not supported"), but for `user=NAME` (the user ssh
/// logs in as on that host, as Hydra: `ssh NAME@host`) and `binding=SPEC` (that host's
/// `-bind-to`, over the job's, as in Hydra 5). Where Hydra is lax we refuse
/// too: `n1:x` and `n1:0` (Hydra dies of SIGFPE), `n1:2:3` (Hydra reads 2).
pub fn parse_hostfile(text: &str, file: &str) -> Result<Vec<Host>, HostError> {
    let mut hosts = Vec::new();
    // A host named on several lines has one user and one binding (Hydra refuses a second,
    // different one): where each was first set.
    let mut set_at: std::collections::HashMap<String, [Option<(usize, String)>; 2]> =
        std::collections::HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let origin = || format!("hostfile {file} line {}", i + 1);
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        let mut host = entry(first, &origin)?;
        for extra in words {
            match extra.split_once('=') {
                Some(("user", u)) if host.user.is_none() && valid_user(u) => {
                    host.user = Some(u.to_string())
                }
                Some(("user", _)) => {
                    return Err(HostError(format!(
                        "{}: bad or second user in '{extra}' (one user=NAME per line)",
                        origin()
                    )))
                }
                Some(("binding", b)) if host.binding.is_none() => {
                    let bind = libi_binding::parse_bind(b)
                        .map_err(|e| HostError(format!("{}: binding={b}: {e}", origin())))?;
                    host.binding = Some(bind);
                }
                Some(("binding", _)) => {
                    return Err(HostError(format!(
                        "{}: a second binding in '{extra}' (one binding=SPEC per line)",
                        origin()
                    )))
                }
                _ => {
                    return Err(HostError(format!(
                        "{}: unexpected '{extra}' (a line is one host or host:N, then \
                         optionally user=NAME and binding=SPEC)",
                        origin()
                    )))
                }
            }
        }
        let earlier = set_at.entry(host.name.clone()).or_default();
        let now = [host.user.clone(), host.binding.as_ref().map(|b| b.to_string())];
        for ((what, first), now) in ["user", "binding"].into_iter().zip(earlier.iter_mut()).zip(now)
        {
            match (first.as_ref(), now) {
                (Some((at, e)), Some(n)) if *e != n => {
                    return Err(HostError(format!(
                        "{}: host {} has {what}={n} here but {what}={e} on line {at}",
                        origin(),
                        host.name
                    )))
                }
                (None, Some(n)) => *first = Some((i + 1, n)),
                _ => {}
            }
        }
        hosts.push(host);
    }
    if hosts.is_empty() {
        return Err(HostError(format!("hostfile {file} names no host")));
    }
    Ok(merge(hosts))
}

/// The most a file of options or hosts may hold (a hostfile of a million hosts is ~30 MiB).
pub const TEXT_FILE_MAX: u64 = 64 << 20;

/// Read a text file of options or hosts, at most [`TEXT_FILE_MAX`] bytes (not `/dev/zero`
/// into memory until it runs out).
pub fn read_text(path: &str) -> std::io::Result<String> {
    String::from_utf8(read_bytes(path)?).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "stream did not contain valid UTF-8")
    })
}

/// [`read_text`] of a file whose words need not be UTF-8 (a `-configfile`'s arguments).
pub fn read_bytes(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(TEXT_FILE_MAX + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > TEXT_FILE_MAX {
        return Err(std::io::Error::other(format!("larger than {} MiB", TEXT_FILE_MAX >> 20)));
    }
    Ok(bytes)
}

/// Read and parse a hostfile.
pub fn read_hostfile(path: &str) -> Result<Vec<Host>, HostError> {
    let text =
        read_text(path).map_err(|e| HostError(format!("cannot read hostfile {path}: {e}")))?;
    parse_hostfile(&text, path)
}

/// Parse `-hosts h1:2,h2`.
pub fn parse_hosts_arg(s: &str) -> Result<Vec<Host>, HostError> {
    let hosts = s
        .split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|e| entry(e, &|| "-hosts".to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    if hosts.is_empty() {
        return Err(HostError("-hosts names no host".into()));
    }
    Ok(merge(hosts))
}

/// LSF's `$LSB_MCPU_HOSTS`: "host1 n1 host2 n2 ..." (names with their slot counts).
pub fn parse_lsf_hosts(s: &str) -> Result<Vec<Host>, HostError> {
    let words: Vec<&str> = s.split_whitespace().collect();
    if words.is_empty() || !words.len().is_multiple_of(2) {
        return Err(HostError(format!(
            "LSB_MCPU_HOSTS must be \"host1 n1 host2 n2 ...\", got '{s}'"
        )));
    }
    let hosts = words
        .chunks(2)
        .map(|c| match c[1].parse::<u32>() {
            Ok(n) if n > 0 => Ok(Host::new(c[0].to_string(), n)),
            _ => Err(HostError(format!(
                "LSB_MCPU_HOSTS: '{}' is not a positive slot count for host {}",
                c[1], c[0]
            ))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(merge(hosts))
}

/// `-ppn N`: every host gets N slots.
pub fn with_ppn(hosts: Vec<Host>, ppn: u32) -> Vec<Host> {
    hosts.into_iter().map(|h| Host { slots: ppn, ..h }).collect()
}

/// `-order-nodes`: the host list sorted by slot count before ranks are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeOrder {
    Ascending,
    Descending,
}

/// `-order-nodes` that is neither order: the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("-order-nodes: expected ascending or descending, got '{0}'")]
pub struct NodeOrderError(pub String);

impl std::str::FromStr for NodeOrder {
    type Err = NodeOrderError;
    /// As Hydra, in any case (`ASCENDING`).
    fn from_str(s: &str) -> Result<Self, NodeOrderError> {
        match s.to_ascii_lowercase().as_str() {
            "ascending" => Ok(NodeOrder::Ascending),
            "descending" => Ok(NodeOrder::Descending),
            _ => Err(NodeOrderError(s.to_string())),
        }
    }
}

/// Sort `hosts` by their slots (after `-ppn`, as Hydra). The sort is stable: hosts with as
/// many slots keep the list's order (Hydra's `qsort` may swap them).
pub fn order_nodes(hosts: &mut [Host], order: NodeOrder) {
    match order {
        NodeOrder::Ascending => hosts.sort_by_key(|h| h.slots),
        NodeOrder::Descending => hosts.sort_by_key(|h| std::cmp::Reverse(h.slots)),
    }
}

/// Where the ranks go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// For each host (same index as the host list), its ranks in ascending order.
    pub per_host: Vec<Vec<u32>>,
    /// Rank order as runs of (host index, consecutive ranks on it).
    pub runs: Vec<(usize, u32)>,
}

/// Block placement of `n` ranks over `hosts` (wrapping round when slots run out).
pub fn place(hosts: &[Host], n: u32) -> Placement {
    place_from(hosts, 0, n)
}

/// Placement of `n` ranks by a rank map (`-rankmap`): rank r goes to host `map[r % len]`
/// (an index into `hosts`), whatever its slots. A map naming a host the list does not have
/// is an error.
pub fn place_by_map(hosts: &[Host], map: &[u32], n: u32) -> Result<Placement, HostError> {
    if let Some(&bad) = map.iter().find(|&&h| h as usize >= hosts.len()) {
        return Err(HostError(format!(
            "-rankmap names node {bad}, but the host list has {} host(s) (nodes 0 to {})",
            hosts.len(),
            hosts.len().saturating_sub(1)
        )));
    }
    let mut per_host = vec![Vec::new(); hosts.len()];
    let mut runs: Vec<(usize, u32)> = Vec::new();
    if map.is_empty() {
        return Ok(Placement { per_host, runs });
    }
    for (rank, &h) in (0..n).zip(map.iter().cycle()) {
        let h = h as usize;
        per_host[h].push(rank);
        match runs.last_mut() {
            Some((last, c)) if *last == h => *c += 1,
            _ => runs.push((h, 1)),
        }
    }
    Ok(Placement { per_host, runs })
}

/// Block placement of `n` ranks starting at slot `start` of the hosts' slot cycle (each
/// host's slots in order, then round the list again): the ranks of a spawn continue where
/// the job's left off.
pub fn place_from(hosts: &[Host], start: u64, n: u32) -> Placement {
    let mut per_host = vec![Vec::new(); hosts.len()];
    let mut runs: Vec<(usize, u32)> = Vec::new();
    let total: u64 = hosts.iter().map(|h| u64::from(h.slots)).sum();
    if total == 0 {
        return Placement { per_host, runs };
    }
    // The host holding slot `start` and the slots it has left from there.
    let (mut i, mut left) = (0, start % total);
    while left >= u64::from(hosts[i].slots) {
        left -= u64::from(hosts[i].slots);
        i += 1;
    }
    let mut free = hosts[i].slots - left as u32;
    let mut rank = 0u32;
    while rank < n {
        let take = free.min(n - rank);
        if take > 0 {
            per_host[i].extend(rank..rank + take);
            match runs.last_mut() {
                Some((last, c)) if *last == i => *c += take,
                _ => runs.push((i, take)),
            }
            rank += take;
        }
        i = (i + 1) % hosts.len();
        free = hosts[i].slots;
    }
    Placement { per_host, runs }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_maps_place_each_rank_and_repeat() {
        let hosts = parse_hosts_arg("a,b,c").expect("hosts");
        let p = place_by_map(&hosts, &[1, 0, 1], 5).expect("map");
        assert_eq!(p.per_host, vec![vec![1, 4], vec![0, 2, 3], vec![]]);
        assert_eq!(p.runs, vec![(1, 1), (0, 1), (1, 2), (0, 1)]);
        // Slots do not limit a map.
        let p = place_by_map(&hosts[..1], &[0], 3).expect("map");
        assert_eq!(p.per_host, vec![vec![0, 1, 2]]);
        let e = place_by_map(&hosts, &[0, 3], 2).expect_err("node 3");
        assert!(e.0.contains("node 3") && e.0.contains("3 host(s)"), "{e}");
    }

    #[test]
    fn lsf_hosts() {
        let h = parse_lsf_hosts("a 2 b 1 a 1").expect("parse");
        assert_eq!(h, vec![Host::new("a", 3), Host::new("b", 1)]);
        assert!(parse_lsf_hosts("a 2 b").is_err());
        assert!(parse_lsf_hosts("a 0").is_err());
        assert!(parse_lsf_hosts("a x").is_err());
        assert!(parse_lsf_hosts(" ").is_err());
    }

    #[test]
    fn pbs_nodefile_lines_are_slots() {
        let h = parse_hostfile("n1\nn1\nn2\nn1\n", "nodefile").expect("parse");
        assert_eq!(h, vec![Host::new("n1", 3), Host::new("n2", 1)]);
    }

    fn h(name: &str, slots: u32) -> Host {
        Host::new(name, slots)
    }

    #[test]
    fn hostfile_format() {
        let t = "# cluster\nn1:2\n\n  # indented\nn2   # one slot\n\tn3:4\t\nn1\nn4:#c\nn5:3#c\n";
        assert_eq!(
            parse_hostfile(t, "hf").expect("parse"),
            vec![h("n1", 3), h("n2", 1), h("n3", 4), h("n4", 1), h("n5", 3)]
        );
    }

    /// A host on several lines has one user and one binding: the same one again is fine, a
    /// different one is refused naming both lines (as Hydra refuses it). Control characters
    /// are no part of a host name.
    #[test]
    fn hostfile_repeated_settings_and_control_characters() {
        let hosts =
            parse_hostfile("n1 user=bob\nn1:2 user=bob binding=core\nn1 binding=core\n", "hf")
                .expect("parse");
        assert_eq!((hosts.len(), hosts[0].slots, hosts[0].user.as_deref()), (1, 4, Some("bob")));
        let err = |text: &str| parse_hostfile(text, "hf").expect_err(text).to_string();
        assert_eq!(
            err("n1 user=bob\nn2\nn1 user=alice\n"),
            "hostfile hf line 3: host n1 has user=alice here but user=bob on line 1"
        );
        assert_eq!(
            err("n1\nn1 binding=core\nn1 binding=hwthread\n"),
            "hostfile hf line 3: host n1 has binding=hwthread here but binding=core on line 2"
        );
        assert_eq!(err("local\0host\n"), "hostfile hf line 1: bad host name in 'local\\0host'");
        assert_eq!(
            parse_hosts_arg("a\u{1}b").expect_err("control").to_string(),
            "-hosts: bad host name in 'a\\u{1}b'"
        );
    }

    /// A file of hosts is read up to a bound: `/dev/zero` is an error, not all of memory.
    #[test]
    fn endless_file_is_refused() {
        let e = read_hostfile("/dev/zero").expect_err("endless");
        assert_eq!(e.to_string(), "cannot read hostfile /dev/zero: larger than 64 MiB");
    }

    /// `user=NAME` and `binding=SPEC`, as Hydra 5 takes them: the user ssh logs in as on that
    /// host, and its `-bind-to` (a host named again with the same user keeps it).
    #[test]
    fn hostfile_users() {
        let hosts = parse_hostfile(
            "n1:2 user=alice\nn2 binding=user:1,0\nn1 user=alice\nn3 user=c.d_e-1 binding=core:2\n",
            "hf",
        )
        .expect("parse");
        let b: Vec<_> = hosts.iter().map(|h| h.binding.as_ref().map(|b| b.to_string())).collect();
        assert_eq!(b, [None, Some("user:1,0".into()), Some("core:2".into())]);
        let users: Vec<_> =
            hosts.iter().map(|h| (h.name.as_str(), h.slots, h.user.as_deref())).collect();
        assert_eq!(users, [("n1", 3, Some("alice")), ("n2", 1, None), ("n3", 1, Some("c.d_e-1"))]);
    }

    /// What Hydra 5 refuses ("token X not supported at this time"), or misreads, is one line
    /// naming the file, the line and the word.
    #[test]
    fn hostfile_refuses_what_hydra_would() {
        for (text, want) in [
            ("n0\nn1 slots=2\n", "hostfile hf line 2: unexpected 'slots=2' (a line is one host or host:N, then optionally user=NAME and binding=SPEC)"),
            ("n1:2 n2:1\n", "hostfile hf line 1: unexpected 'n2:1' (a line is one host or host:N, then optionally user=NAME and binding=SPEC)"),
            ("n1:2 ifhn=x\n", "hostfile hf line 1: unexpected 'ifhn=x' (a line is one host or host:N, then optionally user=NAME and binding=SPEC)"),
            ("n1 :2\n", "hostfile hf line 1: unexpected ':2' (a line is one host or host:N, then optionally user=NAME and binding=SPEC)"),
            ("n1: 2\n", "hostfile hf line 1: unexpected '2' (a line is one host or host:N, then optionally user=NAME and binding=SPEC)"),
            ("n1 user=\n", "hostfile hf line 1: bad or second user in 'user=' (one user=NAME per line)"),
            ("n1 user=-oProxyCommand=x\n", "hostfile hf line 1: bad or second user in 'user=-oProxyCommand=x' (one user=NAME per line)"),
            ("n1 user=a user=b\n", "hostfile hf line 1: bad or second user in 'user=b' (one user=NAME per line)"),
            ("n1 binding=bogus\n", "hostfile hf line 1: binding=bogus: -bind-to: unknown object 'bogus' (expected none, rr, user:LIST, hwthread, core, l1cache, l2cache, l3cache, numa, socket, machine, gpu, ib, hfi, eth or en (optionally :N), or pci:ADDRESS)"),
            ("n1 binding=core binding=rr\n", "hostfile hf line 1: a second binding in 'binding=rr' (one binding=SPEC per line)"),
            ("n1:2:3\n", "hostfile hf line 1: bad slot count '2:3' in 'n1:2:3'"),
            ("n1:2,n2\n", "hostfile hf line 1: bad slot count '2,n2' in 'n1:2,n2'"),
            ("n1:-1\n", "hostfile hf line 1: bad slot count '-1' in 'n1:-1'"),
        ] {
            assert_eq!(parse_hostfile(text, "hf").expect_err(text).0, want);
        }
    }

    #[test]
    fn hostfile_errors_name_file_and_line() {
        let e = parse_hostfile("a\nb:x\n", "hosts.txt").expect_err("bad count");
        assert!(e.0.contains("hosts.txt line 2") && e.0.contains("'x'"), "{e}");
        let e = parse_hostfile("a:0\n", "f").expect_err("zero");
        assert!(e.0.contains("f line 1"), "{e}");
        let e = parse_hostfile("# nothing\n", "f").expect_err("empty");
        assert!(e.0.contains("names no host"), "{e}");
        let e = parse_hostfile(":3\n", "f").expect_err("no name");
        assert!(e.0.contains("line 1"), "{e}");
        assert!(read_hostfile("/nonexistent/hf")
            .expect_err("missing")
            .0
            .contains("/nonexistent/hf"));
    }

    #[test]
    fn hosts_arg() {
        assert_eq!(parse_hosts_arg("a:2,b").expect("parse"), vec![h("a", 2), h("b", 1)]);
        assert_eq!(parse_hosts_arg("a,b,a").expect("parse"), vec![h("a", 2), h("b", 1)]);
        assert!(parse_hosts_arg("a:-1").is_err());
        assert!(parse_hosts_arg(",").is_err());
    }

    #[test]
    fn node_order_by_slots_stable() {
        let list = || vec![h("a", 2), h("b", 4), h("c", 1), h("d", 2), h("e", 4)];
        let names = |v: &[Host]| v.iter().map(|h| h.name.as_str()).collect::<Vec<_>>().join(",");
        let mut v = list();
        order_nodes(&mut v, NodeOrder::Ascending);
        assert_eq!(names(&v), "c,a,d,b,e");
        let mut v = list();
        order_nodes(&mut v, NodeOrder::Descending);
        assert_eq!(names(&v), "b,e,a,d,c");
        // Placement follows the sorted list: `-hosts h1:1,h2:3 -order-nodes descending`.
        let mut v = vec![h("h1", 1), h("h2", 3)];
        order_nodes(&mut v, NodeOrder::Descending);
        assert_eq!(place(&v, 4).per_host, vec![vec![0, 1, 2], vec![3]]);
        assert_eq!("DESCENDING".parse::<NodeOrder>(), Ok(NodeOrder::Descending));
        assert_eq!("ascending".parse::<NodeOrder>(), Ok(NodeOrder::Ascending));
        assert_eq!("up".parse::<NodeOrder>(), Err(NodeOrderError("up".into())),);
        assert_eq!(
            "up".parse::<NodeOrder>().unwrap_err().to_string(),
            "-order-nodes: expected ascending or descending, got 'up'"
        );
    }

    #[test]
    fn block_placement_wraps() {
        let p = place(&[h("a", 2), h("b", 2)], 6);
        assert_eq!(p.per_host, vec![vec![0, 1, 4, 5], vec![2, 3]]);
        assert_eq!(p.runs, vec![(0, 2), (1, 2), (0, 2)]);
        let p = place(&[h("a", 4), h("b", 4)], 3);
        assert_eq!(p.per_host, vec![vec![0, 1, 2], vec![]]);
        assert_eq!(p.runs, vec![(0, 3)]);
        let p = place(&with_ppn(vec![h("a", 9), h("b", 1)], 1), 3);
        assert_eq!(p.runs, vec![(0, 1), (1, 1), (0, 1)]);
        assert_eq!(place(&[h("a", 2)], 0).runs, vec![]);
    }

    #[test]
    fn placement_from_a_slot() {
        // slot 4 of the cycle a a b is a's second slot
        let p = place_from(&[h("a", 2), h("b", 1)], 4, 3);
        assert_eq!(p.per_host, vec![vec![0, 2], vec![1]]);
        assert_eq!(p.runs, vec![(0, 1), (1, 1), (0, 1)]);
        // every rank lands on the host of slot start+rank, for any start
        let hosts = [h("a", 3), h("b", 1), h("c", 2)];
        let cycle = ["a", "a", "a", "b", "c", "c"];
        for start in 0..13u64 {
            let p = place_from(&hosts, start, 9);
            for (i, ranks) in p.per_host.iter().enumerate() {
                for &r in ranks {
                    let want = cycle[((start + u64::from(r)) % 6) as usize];
                    assert_eq!(hosts[i].name, want, "start {start} rank {r}");
                }
            }
            assert_eq!(p.runs.iter().map(|r| r.1).sum::<u32>(), 9);
        }
    }
}
