//! Sets of logical cpus (the kernel's OS numbers) and their list syntax, `0-3,8,10-11`.

use crate::error::ListError;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A set of cpus by OS number, sorted, without duplicates.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CpuSet(Vec<u32>);

/// Largest cpu number accepted from the outside (Linux's NR_CPUS is at most 8192).
pub const MAX_CPU: u32 = 1 << 16;

impl CpuSet {
    pub fn new(mut cpus: Vec<u32>) -> CpuSet {
        cpus.sort_unstable();
        cpus.dedup();
        CpuSet(cpus)
    }

    pub fn cpus(&self) -> &[u32] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.binary_search(&cpu).is_ok()
    }

    pub fn intersect(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.iter().copied().filter(|&c| other.contains(c)).collect())
    }

    pub fn union(&self, other: &CpuSet) -> CpuSet {
        CpuSet::new(self.0.iter().chain(&other.0).copied().collect())
    }

    /// The kernel's affinity mask (`sched_setaffinity`'s `unsigned long` array), long
    /// enough for the highest cpu of the set.
    pub fn mask(&self) -> Vec<u64> {
        let bits = u64::BITS;
        let words = self.0.last().map(|&c| c / bits + 1).unwrap_or(1) as usize;
        let mut m = vec![0u64; words];
        for &c in &self.0 {
            m[(c / bits) as usize] |= 1 << (c % bits);
        }
        m
    }

    /// Parse the kernel's list syntax (`0-3,8`; empty string = empty set); `sep` also
    /// joins cpus (`+` in Hydra's `user:0+2`).
    pub fn parse_with(s: &str, sep: char) -> Result<CpuSet, ListError> {
        CpuSet::parse_items(s, sep, "cpu")
    }

    /// Parse the list syntax for numbered things other than cpus (NUMA nodes: `0,2-3`);
    /// `what` names them in errors.
    pub fn parse_items(s: &str, sep: char, what: &str) -> Result<CpuSet, ListError> {
        let s = s.trim();
        let mut cpus = Vec::new();
        if s.is_empty() {
            return Ok(CpuSet(cpus));
        }
        let num = |t: &str| -> Result<u32, ListError> {
            match t.trim().parse::<u32>() {
                Ok(n) if n <= MAX_CPU => Ok(n),
                _ => Err(ListError::Number { entry: t.to_string(), what: what.to_string() }),
            }
        };
        for part in s.split(sep) {
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (num(a)?, num(b)?);
                    if a > b {
                        let (range, what) = (part.to_string(), what.to_string());
                        return Err(ListError::Range { range, what });
                    }
                    cpus.extend(a..=b);
                }
                None => cpus.push(num(part)?),
            }
        }
        Ok(CpuSet::new(cpus))
    }

    /// Parse the kernel's list syntax (`0-3,8`).
    pub fn parse(s: &str) -> Result<CpuSet, ListError> {
        CpuSet::parse_with(s, ',')
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(it: I) -> CpuSet {
        CpuSet::new(it.into_iter().collect())
    }
}

impl fmt::Display for CpuSet {
    /// The kernel's list syntax: `0-3,8`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        let mut first = true;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end = self.0[i];
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_syntax_round_trips() {
        let s = CpuSet::parse("0-3,8,10-11").unwrap();
        assert_eq!(s.cpus(), &[0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(s.to_string(), "0-3,8,10-11");
        assert_eq!(CpuSet::parse("").unwrap().to_string(), "");
        assert_eq!(CpuSet::parse("5\n").unwrap().to_string(), "5");
        assert_eq!(CpuSet::parse_with("2+0+1", '+').unwrap().to_string(), "0-2");
        assert!(CpuSet::parse("3-1").is_err());
        assert!(CpuSet::parse("x").is_err());
        assert!(CpuSet::parse("99999999").is_err());
    }

    #[test]
    fn mask_words() {
        assert_eq!(CpuSet::parse("0,2").unwrap().mask(), vec![5]);
        assert_eq!(CpuSet::parse("64").unwrap().mask(), vec![0, 1]);
        assert_eq!(CpuSet::default().mask(), vec![0]);
    }
}
