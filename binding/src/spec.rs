//! The `-bind-to` and `-map-by` options, in Hydra's spelling.

use crate::cpus::CpuSet;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Which caches an `lN*cache` object means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CacheKind {
    /// `lNcache`: the data or unified cache of that level (what hwloc calls the L1 cache).
    Any,
    Data,
    Instruction,
    Unified,
}

impl CacheKind {
    /// sysfs `cache/indexN/type`.
    pub fn from_sysfs(t: &str) -> Option<CacheKind> {
        match t {
            "Data" => Some(CacheKind::Data),
            "Instruction" => Some(CacheKind::Instruction),
            "Unified" => Some(CacheKind::Unified),
            _ => None,
        }
    }

    /// Does a cache of kind `actual` (as sysfs names it) count as `self`?
    pub fn matches(self, actual: CacheKind) -> bool {
        match self {
            CacheKind::Any => actual != CacheKind::Instruction,
            k => k == actual,
        }
    }
}

/// A kind of topology object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Object {
    HwThread,
    Core,
    Cache { level: u8, kind: CacheKind },
    Numa,
    Socket,
    Machine,
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Object::HwThread => f.write_str("hwthread"),
            Object::Core => f.write_str("core"),
            Object::Cache { level, kind } => {
                let k = match kind {
                    CacheKind::Any => "",
                    CacheKind::Data => "d",
                    CacheKind::Instruction => "i",
                    CacheKind::Unified => "u",
                };
                write!(f, "l{level}{k}cache")
            }
            Object::Numa => f.write_str("numa"),
            Object::Socket => f.write_str("socket"),
            Object::Machine => f.write_str("machine"),
        }
    }
}

/// An object kind and how many of them (`core:2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Objects {
    pub obj: Object,
    pub count: u32,
}

impl fmt::Display for Objects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count == 1 {
            write!(f, "{}", self.obj)
        } else {
            write!(f, "{}:{}", self.obj, self.count)
        }
    }
}

/// `-bind-to`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum BindTo {
    /// No binding (the default): ranks inherit the NLA's affinity.
    #[default]
    None,
    /// `rr`: one cpu each, in OS numbering.
    RoundRobin,
    /// `user:0+2,1`: local rank i gets entry i; ranks past the list are not bound (as Hydra).
    User(Vec<CpuSet>),
    /// `core`, `socket:2`, ...
    Objects(Objects),
}

/// What the NLA needs to bind its ranks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Binding {
    pub bind: BindTo,
    /// `-map-by`; `None`: the binding's object.
    pub map: Option<Objects>,
    /// `-membind`; `None`: the ranks keep the NLA's memory policy.
    #[serde(default)]
    pub mem: Option<crate::membind::MemBind>,
}

impl Binding {
    /// No cpu binding (a memory policy may still be set).
    pub fn is_none(&self) -> bool {
        self.bind == BindTo::None
    }
}

const OBJECTS: &str =
    "hwthread, core, l1cache, l2cache, l3cache, numa, socket or machine (optionally :N)";

/// An object name (`core`, `l2ucache`, ...).
fn object(s: &str) -> Option<Object> {
    Some(match s {
        "hwthread" => Object::HwThread,
        "core" => Object::Core,
        "numa" => Object::Numa,
        "socket" => Object::Socket,
        "machine" | "board" => Object::Machine,
        _ => {
            let rest = s.strip_prefix('l')?.strip_suffix("cache")?;
            let mut chars = rest.chars();
            let level = chars.next()?.to_digit(10)?;
            if !(1..=5).contains(&level) {
                return None;
            }
            let kind = match chars.as_str() {
                "" => CacheKind::Any,
                "d" => CacheKind::Data,
                "i" => CacheKind::Instruction,
                "u" => CacheKind::Unified,
                _ => return None,
            };
            Object::Cache { level: level as u8, kind }
        }
    })
}

/// `obj[:N]`.
fn objects(s: &str, what: &str) -> Result<Objects, String> {
    let (name, count) = match s.split_once(':') {
        Some((n, c)) => match c.parse::<u32>() {
            Ok(c) if c >= 1 => (n, c),
            _ => return Err(format!("{what} {s}: '{c}' is not a positive count")),
        },
        None => (s, 1),
    };
    match object(name) {
        Some(obj) => Ok(Objects { obj, count }),
        None => Err(format!(
            "{what}: unknown object '{name}' (expected none, rr, user:LIST, {OBJECTS})"
        )),
    }
}

/// Parse `-bind-to`.
pub fn parse_bind(s: &str) -> Result<BindTo, String> {
    match s {
        "none" => return Ok(BindTo::None),
        "rr" => return Ok(BindTo::RoundRobin),
        _ => {}
    }
    if let Some(list) = s.strip_prefix("user:") {
        let entries = list
            .split(',')
            .map(|e| {
                let set =
                    CpuSet::parse_with(e, '+').map_err(|err| format!("-bind-to {s}: {err}"))?;
                if set.is_empty() {
                    return Err(format!("-bind-to {s}: empty entry"));
                }
                Ok(set)
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(BindTo::User(entries));
    }
    objects(s, "-bind-to").map(BindTo::Objects)
}

/// Parse `-map-by`.
pub fn parse_map(s: &str) -> Result<Objects, String> {
    objects(s, "-map-by").map_err(|e| e.replace("none, rr, user:LIST, ", ""))
}

impl fmt::Display for BindTo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindTo::None => f.write_str("none"),
            BindTo::RoundRobin => f.write_str("rr"),
            BindTo::User(e) => {
                let e: Vec<String> = e.iter().map(|s| s.to_string().replace(',', "+")).collect();
                write!(f, "user:{}", e.join(","))
            }
            BindTo::Objects(o) => write!(f, "{o}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_spellings() {
        assert_eq!(parse_bind("none").unwrap(), BindTo::None);
        assert_eq!(parse_bind("rr").unwrap(), BindTo::RoundRobin);
        assert_eq!(
            parse_bind("core").unwrap(),
            BindTo::Objects(Objects { obj: Object::Core, count: 1 })
        );
        assert_eq!(
            parse_bind("socket:2").unwrap(),
            BindTo::Objects(Objects { obj: Object::Socket, count: 2 })
        );
        assert_eq!(
            parse_bind("l3cache").unwrap(),
            BindTo::Objects(Objects {
                obj: Object::Cache { level: 3, kind: CacheKind::Any },
                count: 1
            })
        );
        assert_eq!(parse_bind("l1icache").unwrap().to_string(), "l1icache");
        let u = parse_bind("user:0+2,1,4-5").unwrap();
        assert_eq!(u.to_string(), "user:0+2,1,4-5");
        match u {
            BindTo::User(e) => assert_eq!(e[2].cpus(), &[4, 5]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_specs_say_why() {
        for (s, msg) in [
            ("bogus", "unknown object 'bogus'"),
            ("core:0", "'0' is not a positive count"),
            ("core:x", "'x' is not a positive count"),
            ("l9cache", "unknown object"),
            ("user:", "empty entry"),
            ("user:0,,1", "empty entry"),
            ("user:a", "'a' is not a cpu number"),
            ("user:3-1", "not a cpu range"),
        ] {
            let e = parse_bind(s).unwrap_err();
            assert!(e.contains(msg), "{s}: {e}");
            assert!(!e.contains('\n'));
        }
        assert!(parse_map("user:1").is_err());
        assert!(parse_map("none").unwrap_err().starts_with("-map-by: unknown object 'none'"));
        assert_eq!(parse_map("socket").unwrap().obj, Object::Socket);
    }
}
