//! Slurm allocations: the compressed host-list grammar, the tasks-per-node grammar, and the
//! hosts (with slots) of the allocation we run in, read from Slurm's environment.
//!
//! Host lists (`SLURM_JOB_NODELIST`, `scontrol show hostnames`):
//!
//! * items are separated by commas (or whitespace) outside brackets; empty items are skipped;
//! * an item is literal text and bracket groups: `node[01-04,07]`, `rack[1-2]-n[1-2]`,
//!   `a[1-2]b`; a group holds comma-separated numbers and `lo-hi` ranges;
//! * several groups in one item expand as a product, the first group varying slowest
//!   (`rack[1-2]-n[1-2]` = rack1-n1 rack1-n2 rack2-n1 rack2-n2);
//! * numbers are zero-padded to the width of the range's first number (`n[08-11]` = n08 n09
//!   n10 n11, `n[9-11]` = n9 n10 n11), as Slurm does;
//! * the order is kept and nothing is deduplicated (`a[1-3,2]` = a1 a2 a3 a2).
//!
//! Malformed lists (unbalanced or nested brackets, empty groups or ranges, `a[3-1]`,
//! non-numeric ranges, lists over [`MAX_HOSTS`] names) give a one-line error naming the list.
//!
//! Tasks per node (`SLURM_TASKS_PER_NODE`, `SLURM_JOB_CPUS_PER_NODE`): comma-separated counts,
//! each optionally repeated: `2(x3),1` = 2 2 2 1.

use crate::hosts::Host;
use std::collections::HashSet;

/// Most names a host list (or tasks-per-node list) may expand to.
pub const MAX_HOSTS: usize = 1 << 20;

/// The expression as shown in errors: quoted and escaped (so one line), long ones shortened.
fn shown(expr: &str) -> String {
    const LIMIT: usize = 120;
    if expr.chars().count() <= LIMIT {
        format!("{expr:?}")
    } else {
        let head: String = expr.chars().take(LIMIT).collect();
        format!("{head:?}... ({} bytes)", expr.len())
    }
}

/// A host list that does not parse: the list, and why (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad host list {}: {why}", shown(.list))]
pub struct HostlistError {
    pub list: String,
    pub why: String,
}

fn bad_hostlist(expr: &str, why: impl std::fmt::Display) -> HostlistError {
    HostlistError { list: expr.to_string(), why: why.to_string() }
}

/// A tasks-per-node list that does not parse: the list, and why (one line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad tasks-per-node list {}: {why}", shown(.list))]
pub struct TasksError {
    pub list: String,
    pub why: String,
}

/// Slurm's variables that do not describe an allocation: each names the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocationError {
    /// A job id but no node list.
    #[error("inside Slurm job {job} but neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set")]
    NoNodelist { job: String },
    /// The node list does not parse.
    #[error("{var}: {error}")]
    Hostlist { var: &'static str, error: HostlistError },
    /// The node list names a node twice.
    #[error("{var}: host list {} names {name} twice", shown(.list))]
    Twice { var: &'static str, list: String, name: String },
    /// The node count is not a number: its value.
    #[error("{var}: '{value}' is not a number")]
    NodeCount { var: &'static str, value: String },
    /// The node count is not the node list's.
    #[error(
        "{var}={count} but {list_var} {} names {names} node{}",
        shown(.list),
        if *.names == 1 { "" } else { "s" }
    )]
    NodeCountDiffers {
        var: &'static str,
        count: usize,
        list_var: &'static str,
        list: String,
        names: usize,
    },
    /// The tasks per node do not parse.
    #[error("{var}: {error}")]
    Tasks { var: &'static str, error: TasksError },
    /// The tasks per node give another number of counts than the node list names nodes.
    #[error(
        "{var}={value} gives {counts} counts but {list_var} {} names {names} node{}",
        shown(.list),
        if *.names == 1 { "" } else { "s" }
    )]
    TaskCounts {
        var: &'static str,
        value: String,
        counts: usize,
        list_var: &'static str,
        list: String,
        names: usize,
    },
    /// The tasks per node give a node no task.
    #[error("{var}={value} gives node {node} no task")]
    NoTask { var: &'static str, value: String, node: String },
}

/// One `lo-hi` range (or a single number, lo == hi) of a bracket group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    lo: u64,
    hi: u64,
    width: usize,
}

impl Range {
    fn len(&self) -> u64 {
        self.hi - self.lo + 1
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part<'a> {
    Text(&'a str),
    Group(Vec<Range>),
}

impl Part<'_> {
    fn count(&self) -> u64 {
        match self {
            Part::Text(_) => 1,
            Part::Group(g) => g.iter().fold(0u64, |n, r| n.saturating_add(r.len())),
        }
    }
}

/// A number inside brackets: ASCII digits only, at most 18 of them (fits in u64).
fn number(text: &str, what: &str) -> Result<(u64, usize), String> {
    if text.is_empty() {
        return Err(format!("empty {what}"));
    }
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("'{text}' is not a number"));
    }
    if text.len() > 18 {
        return Err(format!("number '{text}' is too long"));
    }
    let n = text.parse::<u64>().map_err(|_| format!("'{text}' is not a number"))?;
    Ok((n, text.len()))
}

/// The inside of one bracket group, `01-04,07`.
fn parse_group(inner: &str) -> Result<Vec<Range>, String> {
    if inner.is_empty() {
        return Err("empty brackets '[]'".into());
    }
    let mut ranges = Vec::new();
    for elem in inner.split(',') {
        if elem.is_empty() {
            return Err(format!("empty range in '[{inner}]'"));
        }
        let range = match elem.split_once('-') {
            None => {
                let (n, width) = number(elem, "number")?;
                Range { lo: n, hi: n, width }
            }
            Some((lo, hi)) => {
                let (lo_n, width) =
                    number(lo, "range start").map_err(|e| format!("{e} in range '{elem}'"))?;
                let (hi_n, _) =
                    number(hi, "range end").map_err(|e| format!("{e} in range '{elem}'"))?;
                if hi_n < lo_n {
                    return Err(format!("range '{elem}' runs backwards"));
                }
                Range { lo: lo_n, hi: hi_n, width }
            }
        };
        ranges.push(range);
    }
    Ok(ranges)
}

/// One top-level item (`rack[1-2]-n[01-02]`) as literal text and bracket groups.
fn parse_item(item: &str) -> Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    let mut rest = item;
    while !rest.is_empty() {
        match rest.find(['[', ']']) {
            None => {
                parts.push(Part::Text(rest));
                rest = "";
            }
            Some(i) if rest.as_bytes()[i] == b']' => {
                return Err(format!("']' without '[' in '{item}'"));
            }
            Some(i) => {
                if i > 0 {
                    parts.push(Part::Text(&rest[..i]));
                }
                let after = &rest[i + 1..];
                let close = after.find(['[', ']']);
                match close {
                    Some(j) if after.as_bytes()[j] == b']' => {
                        parts.push(Part::Group(parse_group(&after[..j])?));
                        rest = &after[j + 1..];
                    }
                    Some(_) => return Err(format!("nested '[' in '{item}'")),
                    None => return Err(format!("unclosed '[' in '{item}'")),
                }
            }
        }
    }
    Ok(parts)
}

/// Split at commas and whitespace outside brackets; empty items are dropped.
fn split_items(expr: &str) -> Result<Vec<&str>, String> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0usize;
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => {
                if depth == 0 {
                    return Err("']' without '['".into());
                }
                depth -= 1;
            }
            ',' if depth == 0 => {
                items.push(&expr[start..i]);
                start = i + 1;
            }
            c if c.is_whitespace() && depth == 0 => {
                items.push(&expr[start..i]);
                start = i + c.len_utf8();
            }
            c if c.is_whitespace() => return Err("whitespace inside brackets".into()),
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed '['".into());
    }
    items.push(&expr[start..]);
    Ok(items.into_iter().filter(|s| !s.is_empty()).collect())
}

/// Expand a Slurm host list (`node[01-04,07],gpu[1-2]`) into names, in order.
pub fn expand_hostlist(expr: &str) -> Result<Vec<String>, HostlistError> {
    expand_hostlist_max(expr, MAX_HOSTS)
}

/// [`expand_hostlist`] with an explicit cap on the number of names.
pub fn expand_hostlist_max(expr: &str, max: usize) -> Result<Vec<String>, HostlistError> {
    let items = split_items(expr).map_err(|e| bad_hostlist(expr, e))?;
    if items.is_empty() {
        return Err(bad_hostlist(expr, "names no host"));
    }
    let mut parsed = Vec::with_capacity(items.len());
    let mut total = 0u64;
    for item in items {
        let parts = parse_item(item).map_err(|e| bad_hostlist(expr, e))?;
        let n = parts.iter().fold(1u64, |n, p| n.saturating_mul(p.count()));
        total = total.saturating_add(n);
        if total > max as u64 {
            return Err(bad_hostlist(expr, format!("expands to more than {max} names")));
        }
        parsed.push(parts);
    }
    let mut out = Vec::with_capacity(total as usize);
    for parts in &parsed {
        expand_parts(parts, &mut String::new(), &mut out);
    }
    Ok(out)
}

/// Depth-first product: the first group varies slowest.
fn expand_parts(parts: &[Part<'_>], prefix: &mut String, out: &mut Vec<String>) {
    let Some((first, rest)) = parts.split_first() else {
        out.push(prefix.clone());
        return;
    };
    let len = prefix.len();
    match first {
        Part::Text(t) => {
            prefix.push_str(t);
            expand_parts(rest, prefix, out);
        }
        Part::Group(ranges) => {
            for r in ranges {
                for n in r.lo..=r.hi {
                    use std::fmt::Write;
                    let _ = write!(prefix, "{n:0width$}", width = r.width);
                    expand_parts(rest, prefix, out);
                    prefix.truncate(len);
                }
            }
        }
    }
    prefix.truncate(len);
}

/// Expand a tasks-per-node list (`2(x3),1` = [2, 2, 2, 1]).
pub fn parse_tasks_per_node(s: &str) -> Result<Vec<u32>, TasksError> {
    parse_tasks_per_node_max(s, MAX_HOSTS)
}

fn parse_tasks_per_node_max(s: &str, max: usize) -> Result<Vec<u32>, TasksError> {
    let bad = |why: String| TasksError { list: s.to_string(), why };
    let count = |t: &str| -> Result<u32, TasksError> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(format!("'{t}' is not a number")));
        }
        t.parse::<u32>().map_err(|_| bad(format!("'{t}' is too large")))
    };
    let s_trim = s.trim();
    if s_trim.is_empty() {
        return Err(bad("empty".into()));
    }
    let mut out = Vec::new();
    for item in s_trim.split(',') {
        let item = item.trim();
        let (n, reps) = match item.split_once('(') {
            None => (count(item)?, 1),
            Some((n, rep)) => {
                let inner = rep
                    .strip_prefix('x')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(|| bad(format!("'{item}' is not N or N(xM)")))?;
                let reps = count(inner)?;
                if reps == 0 {
                    return Err(bad(format!("zero repetitions in '{item}'")));
                }
                (count(n)?, reps)
            }
        };
        if out.len() as u64 + u64::from(reps) > max as u64 {
            return Err(bad(format!("expands to more than {max} entries")));
        }
        out.resize(out.len() + reps as usize, n);
    }
    Ok(out)
}

/// The hosts of the Slurm allocation we run in, with the number of tasks Slurm placed on each
/// as slots; `None` outside an allocation (no `SLURM_JOB_ID`).
///
/// Reads `SLURM_JOB_ID` (or `SLURM_JOBID`), `SLURM_JOB_NODELIST` (or `SLURM_NODELIST`),
/// `SLURM_TASKS_PER_NODE` (or, if unset, `SLURM_JOB_CPUS_PER_NODE`; if neither, one slot per
/// node) and `SLURM_JOB_NUM_NODES` (or `SLURM_NNODES`; checked against the list when set).
/// `env` looks a variable up (`&|k| std::env::var(k).ok()` in production).
pub fn allocation_from_env(
    env: &impl Fn(&str) -> Option<String>,
) -> Result<Option<Vec<Host>>, AllocationError> {
    let get = |names: &[&'static str]| -> Option<(&'static str, String)> {
        names.iter().find_map(|&n| {
            env(n).filter(|v| !v.trim().is_empty()).map(|v| (n, v.trim().to_string()))
        })
    };
    let Some((_, job)) = get(&["SLURM_JOB_ID", "SLURM_JOBID"]) else {
        return Ok(None);
    };
    let (list_var, list) = get(&["SLURM_JOB_NODELIST", "SLURM_NODELIST"])
        .ok_or(AllocationError::NoNodelist { job })?;
    let names = expand_hostlist(&list)
        .map_err(|error| AllocationError::Hostlist { var: list_var, error })?;
    let mut seen = HashSet::new();
    if let Some(dup) = names.iter().find(|n| !seen.insert(n.as_str())) {
        return Err(AllocationError::Twice { var: list_var, list, name: dup.clone() });
    }
    if let Some((var, value)) = get(&["SLURM_JOB_NUM_NODES", "SLURM_NNODES"]) {
        let Ok(count) = value.parse::<usize>() else {
            return Err(AllocationError::NodeCount { var, value });
        };
        if count != names.len() {
            let names = names.len();
            return Err(AllocationError::NodeCountDiffers { var, count, list_var, list, names });
        }
    }
    let slots = match get(&["SLURM_TASKS_PER_NODE", "SLURM_JOB_CPUS_PER_NODE"]) {
        None => vec![1; names.len()],
        Some((var, value)) => {
            let slots = parse_tasks_per_node(&value)
                .map_err(|error| AllocationError::Tasks { var, error })?;
            if slots.len() != names.len() {
                let (counts, names) = (slots.len(), names.len());
                return Err(AllocationError::TaskCounts {
                    var,
                    value,
                    counts,
                    list_var,
                    list,
                    names,
                });
            }
            if let Some(i) = slots.iter().position(|&s| s == 0) {
                return Err(AllocationError::NoTask { var, value, node: names[i].clone() });
            }
            slots
        }
    };
    Ok(Some(names.into_iter().zip(slots).map(|(name, slots)| Host::new(name, slots)).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn ex(s: &str) -> Vec<String> {
        expand_hostlist(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn names(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn plain_names_and_commas() {
        assert_eq!(ex("vm"), names("vm"));
        assert_eq!(ex("a,b,c"), names("a b c"));
        assert_eq!(ex("a,,b,"), names("a b"), "empty items are skipped, as Slurm does");
        assert_eq!(ex(" a b\tc "), names("a b c"), "whitespace separates too");
        assert_eq!(ex("node-1.example.org"), names("node-1.example.org"));
    }

    #[test]
    fn ranges_and_lists_in_brackets() {
        assert_eq!(
            ex("node[01-04,07],gpu[1-2]"),
            names("node01 node02 node03 node04 node07 gpu1 gpu2")
        );
        assert_eq!(ex("n[1-3]"), names("n1 n2 n3"));
        assert_eq!(ex("n[5]"), names("n5"));
        assert_eq!(ex("n[1-3,2]"), names("n1 n2 n3 n2"), "order kept, no dedup");
        assert_eq!(ex("[1-3]"), names("1 2 3"));
    }

    #[test]
    fn zero_padding_follows_the_first_number() {
        assert_eq!(ex("n[08-11]"), names("n08 n09 n10 n11"));
        assert_eq!(ex("n[9-11]"), names("n9 n10 n11"));
        assert_eq!(ex("n[009-011]"), names("n009 n010 n011"));
        assert_eq!(ex("n[009-11]"), names("n009 n010 n011"));
        assert_eq!(ex("n[1-010]"), ex("n[1-10]"));
        assert_eq!(ex("n[0-1]"), names("n0 n1"));
        assert_eq!(ex("n[00-01,5]"), names("n00 n01 n5"));
    }

    #[test]
    fn several_groups_and_suffixes() {
        assert_eq!(ex("rack[1-2]-n[1-2]"), names("rack1-n1 rack1-n2 rack2-n1 rack2-n2"));
        assert_eq!(ex("a[1-2][3-4]"), names("a13 a14 a23 a24"));
        assert_eq!(ex("a[1,3-4]x[01-02]"), names("a1x01 a1x02 a3x01 a3x02 a4x01 a4x02"));
        assert_eq!(ex("n[1-2]-ib,login"), names("n1-ib n2-ib login"));
        assert_eq!(ex("a[1-2]b,c[3,5]d"), names("a1b a2b c3d c5d"));
    }

    fn err(s: &str) -> String {
        match expand_hostlist(s) {
            Ok(v) => panic!("{s:?} should be rejected, expanded to {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn malformed_lists_name_the_expression() {
        for (expr, why) in [
            ("a[1-2", "unclosed '['"),
            ("a[1-2],b[3", "unclosed '['"),
            ("a]", "']' without '['"),
            ("a[1]]", "']' without '['"),
            ("a[[1]]", "nested '['"),
            ("a[]", "empty brackets"),
            ("a[1,,2]", "empty range"),
            ("a[1,]", "empty range"),
            ("a[3-1]", "runs backwards"),
            ("a[010-1]", "runs backwards"),
            ("a[x]", "'x' is not a number"),
            ("a[1-x]", "'x' is not a number"),
            ("a[-2]", "empty range start"),
            ("a[1-]", "empty range end"),
            ("a[1-2-3]", "'2-3' is not a number"),
            ("a[+1]", "'+1' is not a number"),
            ("a[ 1-2]", "whitespace inside brackets"),
            ("a[1234567890123456789]", "too long"),
            ("", "names no host"),
            (" , ", "names no host"),
        ] {
            let e = err(expr);
            assert!(e.contains(&format!("{expr:?}")), "{expr:?}: error does not name it: {e}");
            assert!(e.contains(why), "{expr:?}: expected '{why}' in: {e}");
            assert!(!e.contains('\n'), "{expr:?}: error is not one line: {e}");
        }
    }

    #[test]
    fn errors_stay_one_line_and_short() {
        let e = err("a\n[");
        assert!(!e.contains('\n') && e.contains("\"a\\n[\""), "{e}");
        let long = format!("{}[", "x".repeat(10_000));
        let e = err(&long);
        assert!(e.len() < 400 && e.contains("10001 bytes"), "{e}");
    }

    #[test]
    fn expansion_is_capped() {
        assert_eq!(expand_hostlist("n[1-1048576]").expect("exactly the cap").len(), MAX_HOSTS);
        assert!(err("n[1-1048577]").contains("more than 1048576 names"));
        assert!(err("n[0-999999999999999999]").contains("more than"));
        // A product of groups, and a sum of items, count towards the cap too.
        assert!(err("a[1-100000]b[1-100000]").contains("more than"));
        assert!(err("a[1-999999999999999999]b[1-999999999999999999]").contains("more than"));
        assert!(expand_hostlist_max("a[1-3],b[1-3]", 5)
            .expect_err("over")
            .to_string()
            .contains("more than 5"));
        assert_eq!(expand_hostlist_max("a[1-3],b[1-2]", 5).expect("at cap").len(), 5);
    }

    #[test]
    fn tasks_per_node() {
        assert_eq!(parse_tasks_per_node("2(x3),1"), Ok(vec![2, 2, 2, 1]));
        assert_eq!(parse_tasks_per_node("4"), Ok(vec![4]));
        assert_eq!(parse_tasks_per_node("1(x2)"), Ok(vec![1, 1]));
        assert_eq!(parse_tasks_per_node("3,2(x2),5(x1)"), Ok(vec![3, 2, 2, 5]));
        for (s, why) in [
            ("", "empty"),
            ("x", "'x' is not a number"),
            ("2(3)", "not N or N(xM)"),
            ("2(x3", "not N or N(xM)"),
            ("2(x)", "'' is not a number"),
            ("(x3)", "'' is not a number"),
            ("2(x0)", "zero repetitions"),
            ("1,,2", "'' is not a number"),
            ("-1", "'-1' is not a number"),
            ("99999999999", "too large"),
        ] {
            let e = parse_tasks_per_node(s).expect_err(s).to_string();
            assert!(e.contains(&format!("{s:?}")) && e.contains(why), "{s:?}: {e}");
        }
        let e = parse_tasks_per_node_max("1(x3),1(x3)", 5).expect_err("cap").to_string();
        assert!(e.contains("more than 5"), "{e}");
        assert!(parse_tasks_per_node("1(x4294967295)")
            .expect_err("cap")
            .to_string()
            .contains("more than"));
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k: &str| m.get(k).cloned()
    }

    fn h(name: &str, slots: u32) -> Host {
        Host::new(name, slots)
    }

    #[test]
    fn allocation_outside_slurm_is_none() {
        assert_eq!(allocation_from_env(&env_of(&[])), Ok(None));
        assert_eq!(allocation_from_env(&env_of(&[("SLURM_JOB_NODELIST", "a")])), Ok(None));
        assert_eq!(allocation_from_env(&env_of(&[("SLURM_JOB_ID", "")])), Ok(None));
    }

    #[test]
    fn allocation_as_salloc_sets_it() {
        // What `salloc -N1 -n4` exported on the test machine.
        let env = env_of(&[
            ("SLURM_JOB_ID", "2"),
            ("SLURM_JOB_NODELIST", "vm"),
            ("SLURM_NODELIST", "vm"),
            ("SLURM_TASKS_PER_NODE", "4"),
            ("SLURM_JOB_CPUS_PER_NODE", "4"),
            ("SLURM_NNODES", "1"),
            ("SLURM_JOB_NUM_NODES", "1"),
        ]);
        assert_eq!(allocation_from_env(&env), Ok(Some(vec![h("vm", 4)])));
        let env = env_of(&[
            ("SLURM_JOB_ID", "77"),
            ("SLURM_JOB_NODELIST", "n[01-03],gpu7"),
            ("SLURM_TASKS_PER_NODE", "2(x3),1"),
            ("SLURM_NNODES", "4"),
        ]);
        assert_eq!(
            allocation_from_env(&env),
            Ok(Some(vec![h("n01", 2), h("n02", 2), h("n03", 2), h("gpu7", 1)]))
        );
    }

    #[test]
    fn allocation_fallbacks() {
        let env = env_of(&[("SLURM_JOBID", "5"), ("SLURM_NODELIST", "a[1-2]")]);
        assert_eq!(allocation_from_env(&env), Ok(Some(vec![h("a1", 1), h("a2", 1)])));
        let env = env_of(&[
            ("SLURM_JOB_ID", "5"),
            ("SLURM_NODELIST", "a[1-2]"),
            ("SLURM_JOB_CPUS_PER_NODE", "8(x2)"),
        ]);
        assert_eq!(allocation_from_env(&env), Ok(Some(vec![h("a1", 8), h("a2", 8)])));
    }

    #[test]
    fn allocation_inconsistencies_are_errors() {
        let base = [("SLURM_JOB_ID", "9"), ("SLURM_JOB_NODELIST", "n[1-3]")];
        let with = |extra: &[(&str, &str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            allocation_from_env(&env_of(&v)).expect_err("inconsistent").to_string()
        };
        let e = with(&[("SLURM_NNODES", "2")]);
        assert!(
            e.contains("SLURM_NNODES=2") && e.contains("\"n[1-3]\"") && e.contains("3 nodes"),
            "{e}"
        );
        let e = with(&[("SLURM_NNODES", "two")]);
        assert!(e.contains("SLURM_NNODES") && e.contains("'two'"), "{e}");
        let e = with(&[("SLURM_TASKS_PER_NODE", "2(x2)")]);
        assert!(e.contains("SLURM_TASKS_PER_NODE=2(x2) gives 2 counts"), "{e}");
        let e = with(&[("SLURM_TASKS_PER_NODE", "1,0,1")]);
        assert!(e.contains("node n2 no task"), "{e}");
        let e = with(&[("SLURM_TASKS_PER_NODE", "1(y3)")]);
        assert!(e.starts_with("SLURM_TASKS_PER_NODE: bad tasks-per-node list \"1(y3)\""), "{e}");
        let e = allocation_from_env(&env_of(&[("SLURM_JOB_ID", "9")]))
            .expect_err("no list")
            .to_string();
        assert!(e.contains("SLURM_JOB_NODELIST") && e.contains("job 9"), "{e}");
        let e =
            allocation_from_env(&env_of(&[("SLURM_JOB_ID", "9"), ("SLURM_JOB_NODELIST", "n[1-")]))
                .expect_err("bad list")
                .to_string();
        assert!(e.starts_with("SLURM_JOB_NODELIST: bad host list \"n[1-\""), "{e}");
        let e = allocation_from_env(&env_of(&[("SLURM_JOB_ID", "9"), ("SLURM_NODELIST", "a,b,a")]))
            .expect_err("dup")
            .to_string();
        assert!(e.contains("names a twice"), "{e}");
    }

    /// One bracket element for the property test: (start, length, zero-pad width or 0).
    fn elem() -> impl Strategy<Value = (u64, u64, usize)> {
        (0u64..2000, 0u64..30, 0usize..5)
    }

    /// The naive expansion of one group's elements.
    fn naive_group(elems: &[(u64, u64, usize)]) -> (String, Vec<String>) {
        let mut text = Vec::new();
        let mut out = Vec::new();
        for &(lo, len, pad) in elems {
            let hi = lo + len;
            // Writing lo with `pad` digits makes it the width, as Slurm reads it.
            let lo_s = format!("{lo:0pad$}");
            let width = lo_s.len();
            text.push(if len == 0 { lo_s } else { format!("{lo_s}-{hi}") });
            for n in lo..=hi {
                let mut s = n.to_string();
                while s.len() < width {
                    s.insert(0, '0');
                }
                out.push(s);
            }
        }
        (format!("[{}]", text.join(",")), out)
    }

    proptest! {
        #[test]
        fn expansion_matches_naive(
            items in prop::collection::vec(
                ("[a-z]{1,4}", prop::collection::vec(elem(), 1..4), "(-[a-z]{1,3})?",
                 prop::option::of(prop::collection::vec(elem(), 1..3))),
                1..5,
            )
        ) {
            let mut expr = Vec::new();
            let mut want = Vec::new();
            for (prefix, g1, mid, g2) in &items {
                let (t1, n1) = naive_group(g1);
                match g2 {
                    None => {
                        expr.push(format!("{prefix}{t1}{mid}"));
                        want.extend(n1.iter().map(|n| format!("{prefix}{n}{mid}")));
                    }
                    Some(g2) => {
                        let (t2, n2) = naive_group(g2);
                        expr.push(format!("{prefix}{t1}{mid}{t2}"));
                        for a in &n1 {
                            for b in &n2 {
                                want.push(format!("{prefix}{a}{mid}{b}"));
                            }
                        }
                    }
                }
            }
            let expr = expr.join(",");
            prop_assert_eq!(expand_hostlist(&expr), Ok(want), "{}", expr);
        }

        #[test]
        fn tasks_per_node_matches_naive(items in prop::collection::vec((0u32..100, 1u32..6), 1..8)) {
            let text: Vec<String> = items
                .iter()
                .map(|&(n, r)| if r == 1 { n.to_string() } else { format!("{n}(x{r})") })
                .collect();
            let want: Vec<u32> =
                items.iter().flat_map(|&(n, r)| vec![n; r as usize]).collect();
            prop_assert_eq!(parse_tasks_per_node(&text.join(",")), Ok(want));
        }

        #[test]
        fn never_panics_and_errors_name_the_expression(s in "[a-c0-9\\[\\],\\- x]{0,24}") {
            match expand_hostlist(&s) {
                Ok(v) => prop_assert!(v.iter().all(|n| !n.is_empty() && !n.contains([',', '[', ']', ' ']))),
                Err(e) => {
                    let e = e.to_string();
                    let named = e.contains(&format!("{s:?}"));
                    prop_assert!(named, "{}", e);
                    prop_assert!(!e.contains('\n'));
                }
            }
            let _ = parse_tasks_per_node(&s);
        }
    }
}
