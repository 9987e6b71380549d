//! The `-bind-to` and `-map-by` options, in Hydra's spelling.

use crate::cpus::CpuSet;
use crate::error::OptionError;
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

/// A PCI address, `domain:bus:device.function` (sysfs names devices `0000:41:00.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct PciAddr {
    pub domain: u32,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddr {
    /// `[domain:]bus:device.function` in hex, as hwloc (and so Hydra) reads a bus id:
    /// `41:00.0`, `0000:41:00.0`, `0:41:0.0`; the domain defaults to 0.
    pub fn parse(s: &str) -> Option<PciAddr> {
        let hex = |t: &str, max: u32| -> Option<u32> {
            let ok = !t.is_empty() && t.len() <= 8 && t.bytes().all(|b| b.is_ascii_hexdigit());
            u32::from_str_radix(t, 16).ok().filter(|&v| ok && v <= max)
        };
        let (rest, func) = s.rsplit_once('.')?;
        let parts: Vec<&str> = rest.split(':').collect();
        let (domain, bus, device) = match parts[..] {
            [b, d] => (0, b, d),
            [dom, b, d] => (hex(dom, u32::MAX)?, b, d),
            _ => return None,
        };
        Some(PciAddr {
            domain,
            bus: hex(bus, 0xff)? as u8,
            device: hex(device, 0x1f)? as u8,
            function: hex(func, 7)? as u8,
        })
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04x}:{:02x}:{:02x}.{:x}", self.domain, self.bus, self.device, self.function)
    }
}

/// A kind of I/O device, as `-bind-to` spells it (`en` and `eth` are both Ethernet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DeviceKind {
    Gpu,
    Ib,
    Hfi,
    Eth,
    En,
}

impl DeviceKind {
    /// The spelling.
    pub fn prefix(self) -> &'static str {
        match self {
            DeviceKind::Gpu => "gpu",
            DeviceKind::Ib => "ib",
            DeviceKind::Hfi => "hfi",
            DeviceKind::Eth => "eth",
            DeviceKind::En => "en",
        }
    }

    /// The kind of device meant: `en` is `eth`.
    pub fn family(self) -> DeviceKind {
        match self {
            DeviceKind::En => DeviceKind::Eth,
            k => k,
        }
    }

    /// What a message calls these devices.
    pub fn describe(self) -> &'static str {
        match self.family() {
            DeviceKind::Gpu => "GPU",
            DeviceKind::Ib => "InfiniBand",
            DeviceKind::Hfi => "Omni-Path (hfi)",
            _ => "Ethernet",
        }
    }
}

/// Longest device name, prefix included (a Linux interface name has at most 15 bytes).
const MAX_NAME: usize = 15;

/// A kind of topology object; the I/O ones stand for the cpus near a device (what hwloc calls
/// its non-I/O ancestor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Object {
    HwThread,
    Core,
    Cache {
        level: u8,
        kind: CacheKind,
    },
    Numa,
    Socket,
    Machine,
    /// `pci:0000:41:00.0`: one PCI device.
    Pci(PciAddr),
    /// `gpu`, `ib`, `eth`, ... : every device of a kind; `gpu1`, `ib0`, `eth0`, `hfi1_0`: one
    /// (`id`: what follows the prefix; a GPU's number, or a device's name or number).
    Device {
        kind: DeviceKind,
        id: Option<String>,
    },
}

impl Object {
    /// An I/O object (`pci:`, `gpu`, `ib`, `hfi`, `eth`, `en`).
    pub fn is_io(&self) -> bool {
        matches!(self, Object::Pci(_) | Object::Device { .. })
    }
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
            Object::Pci(a) => write!(f, "pci:{a}"),
            Object::Device { kind, id } => {
                write!(f, "{}{}", kind.prefix(), id.as_deref().unwrap_or(""))
            }
        }
    }
}

/// An object kind and how many of them (`core:2`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// A hostfile's `binding=SPEC`s, (host, binding): that host's `-bind-to`, over `bind`, as
    /// in Hydra 5. Only the hosts that have one.
    #[serde(default)]
    pub hosts: Vec<(String, BindTo)>,
    /// Print each rank's binding (`HYDRA_TOPO_DEBUG`), as `-v` does.
    #[serde(default)]
    pub report: bool,
}

impl Binding {
    /// The binding on `host`: its hostfile `binding=`, if it has one, instead of `-bind-to`
    /// (`-map-by` and `-membind` stay the job's).
    pub fn on_host(&self, host: &str) -> Binding {
        let bind = match self.hosts.iter().find(|(h, _)| h == host) {
            Some((_, b)) => b.clone(),
            None => self.bind.clone(),
        };
        Binding {
            bind,
            map: self.map.clone(),
            mem: self.mem.clone(),
            hosts: Vec::new(),
            report: self.report,
        }
    }

    /// No cpu binding (a memory policy may still be set).
    pub fn is_none(&self) -> bool {
        self.bind == BindTo::None
    }

    /// Whether `-bind-to` and `-map-by` go together, as Hydra has it: an I/O binding maps
    /// only by its own devices (the same kind and id, any count: `gpu -map-by gpu:2`), and
    /// only an I/O binding maps by devices. Without a binding the mapping is not used.
    pub fn check(&self) -> Result<(), OptionError> {
        let (BindTo::Objects(b), Some(m)) = (&self.bind, &self.map) else {
            return Ok(());
        };
        let same = match (&b.obj, &m.obj) {
            (Object::Pci(x), Object::Pci(y)) => x == y,
            (Object::Device { kind: k, id: i }, Object::Device { kind: l, id: j }) => {
                k.family() == l.family() && i == j
            }
            (x, y) => !x.is_io() && !y.is_io(),
        };
        if same {
            return Ok(());
        }
        Err(OptionError::Mismatch { bind: b.clone(), map: m.clone() })
    }
}

/// `gpuID`, `ibID`, ...: an I/O device kind and the id after it, if any; `Err` for a bad id
/// (`option` and `value`: the option and its value, for the message).
fn device(s: &str, option: &'static str, value: &str) -> Option<Result<Object, OptionError>> {
    let kind = [DeviceKind::Gpu, DeviceKind::Ib, DeviceKind::Hfi, DeviceKind::Eth, DeviceKind::En]
        .into_iter()
        .find(|k| s.starts_with(k.prefix()))?;
    let id = &s[kind.prefix().len()..];
    if id.is_empty() {
        return Some(Ok(Object::Device { kind, id: None }));
    }
    let ok = if kind == DeviceKind::Gpu {
        id.parse::<u32>().is_ok() && id.bytes().all(|b| b.is_ascii_digit())
    } else {
        s.len() <= MAX_NAME && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    };
    let (value, id) = (value.to_string(), id.to_string());
    Some(if ok {
        Ok(Object::Device { kind, id: Some(id) })
    } else if kind == DeviceKind::Gpu {
        Err(OptionError::GpuNumber { option, value, id })
    } else {
        Err(OptionError::DeviceName { option, value, kind, id })
    })
}

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

/// `obj[:N]`, or `pci:ADDRESS`, the value of `option` (`-bind-to`, `-map-by`).
fn objects(s: &str, option: &'static str) -> Result<Objects, OptionError> {
    let value = || s.to_string();
    if let Some(a) = s.strip_prefix("pci:") {
        return match PciAddr::parse(a) {
            Some(a) => Ok(Objects { obj: Object::Pci(a), count: 1 }),
            None => Err(OptionError::PciAddress { option, value: value(), address: a.to_string() }),
        };
    }
    let (name, count) = match s.split_once(':') {
        Some((n, c)) => match c.parse::<u32>() {
            Ok(c) if c >= 1 => (n, c),
            _ => return Err(OptionError::Count { option, value: value(), count: c.to_string() }),
        },
        None => (s, 1),
    };
    if let Some(obj) = device(name, option, s) {
        return obj.map(|obj| Objects { obj, count });
    }
    match object(name) {
        Some(obj) => Ok(Objects { obj, count }),
        None => Err(OptionError::UnknownObject { option, name: name.to_string() }),
    }
}

/// Parse `-bind-to`.
pub fn parse_bind(s: &str) -> Result<BindTo, OptionError> {
    match s {
        "none" => return Ok(BindTo::None),
        "rr" => return Ok(BindTo::RoundRobin),
        _ => {}
    }
    if let Some(list) = s.strip_prefix("user:") {
        let entries = list
            .split(',')
            .map(|e| {
                let set = CpuSet::parse_with(e, '+')
                    .map_err(|list| OptionError::UserEntry { value: s.to_string(), list })?;
                if set.is_empty() {
                    return Err(OptionError::EmptyUserEntry(s.to_string()));
                }
                Ok(set)
            })
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(BindTo::User(entries));
    }
    objects(s, "-bind-to").map(BindTo::Objects)
}

/// Parse `-map-by`.
pub fn parse_map(s: &str) -> Result<Objects, OptionError> {
    objects(s, "-map-by")
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
    fn io_spellings() {
        let dev = |kind, id: Option<&str>, count| {
            BindTo::Objects(Objects {
                obj: Object::Device { kind, id: id.map(str::to_string) },
                count,
            })
        };
        assert_eq!(parse_bind("gpu").unwrap(), dev(DeviceKind::Gpu, None, 1));
        assert_eq!(parse_bind("gpu1").unwrap(), dev(DeviceKind::Gpu, Some("1"), 1));
        assert_eq!(parse_bind("gpu:2").unwrap(), dev(DeviceKind::Gpu, None, 2));
        assert_eq!(parse_bind("ib").unwrap(), dev(DeviceKind::Ib, None, 1));
        assert_eq!(parse_bind("ib0:2").unwrap(), dev(DeviceKind::Ib, Some("0"), 2));
        assert_eq!(parse_bind("hfi1_0").unwrap(), dev(DeviceKind::Hfi, Some("1_0"), 1));
        assert_eq!(parse_bind("eth").unwrap(), dev(DeviceKind::Eth, None, 1));
        assert_eq!(parse_bind("en:1").unwrap(), dev(DeviceKind::En, None, 1));
        assert_eq!(parse_bind("enp65s0f0").unwrap(), dev(DeviceKind::En, Some("p65s0f0"), 1));
        for s in ["gpu", "gpu12", "gpu:3", "ib0", "hfi1_0", "eth:2", "en", "ens5f1"] {
            assert_eq!(parse_bind(s).unwrap().to_string(), s);
            assert_eq!(parse_map(s).unwrap().to_string(), s);
        }
        // PCI addresses as hwloc reads them: [domain:]bus:device.function, in hex.
        let a = PciAddr { domain: 0, bus: 0x41, device: 0, function: 1 };
        for s in ["pci:41:00.1", "pci:0000:41:00.1", "pci:0:41:0.1", "pci:0000:41:00.1"] {
            let b = parse_bind(s).unwrap();
            assert_eq!(b, BindTo::Objects(Objects { obj: Object::Pci(a), count: 1 }), "{s}");
            assert_eq!(b.to_string(), "pci:0000:41:00.1");
        }
        let vmd = parse_bind("pci:10000:e1:1f.7").unwrap();
        assert_eq!(vmd.to_string(), "pci:10000:e1:1f.7");
    }

    #[test]
    fn a_host_binding_replaces_bind_to_there() {
        let b = Binding {
            bind: parse_bind("core").unwrap(),
            map: Some(parse_map("socket").unwrap()),
            hosts: vec![("n2".into(), parse_bind("user:1").unwrap())],
            ..Binding::default()
        };
        assert_eq!(b.on_host("n1").bind, parse_bind("core").unwrap());
        let n2 = b.on_host("n2");
        assert_eq!(
            (n2.bind.to_string(), n2.map, n2.hosts.len()),
            ("user:1".into(), b.map.clone(), 0)
        );
    }

    #[test]
    fn io_bindings_map_by_their_own_devices() {
        let b = |bind: &str, map: Option<&str>| Binding {
            bind: parse_bind(bind).unwrap(),
            map: map.map(|m| parse_map(m).unwrap()),
            ..Binding::default()
        };
        for (bind, map) in [
            ("gpu", Some("gpu:2")),
            ("gpu:2", Some("gpu")),
            ("gpu1", Some("gpu1")),
            ("eth", Some("en:2")),
            ("en0", Some("eth0")),
            ("pci:41:00.0", Some("pci:0000:41:00.0")),
            ("core", Some("socket")),
            ("gpu", None),
            ("none", Some("gpu")),
            ("rr", Some("ib")),
        ] {
            assert_eq!(b(bind, map).check(), Ok(()), "{bind} {map:?}");
        }
        for (bind, map, msg) in [
            ("gpu", "core", "-bind-to gpu -map-by core: an I/O binding maps only by its own devices (gpu[:N])"),
            ("gpu", "ib", "maps only by its own devices"),
            ("gpu", "gpu1", "maps only by its own devices"),
            ("eth0", "eth1", "maps only by its own devices"),
            ("pci:0000:41:00.0", "pci:0000:41:00.1", "its own devices (pci:0000:41:00.0)"),
            ("core", "gpu", "-bind-to core -map-by gpu: only an I/O binding (pci:, gpu, ib, hfi, eth, en) maps by I/O devices"),
            ("socket", "pci:0000:41:00.0", "only an I/O binding"),
        ] {
            let e = b(bind, Some(map)).check().unwrap_err().to_string();
            assert!(e.contains(msg), "{bind} {map}: {e}");
            assert!(e.starts_with(&format!("-bind-to {bind} -map-by {map}: ")), "{e}");
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
            ("gpux", "-bind-to gpux: 'x' is not a GPU number"),
            ("gpu-1", "'-1' is not a GPU number"),
            ("gpu+1", "'+1' is not a GPU number"),
            ("gpu:0", "'0' is not a positive count"),
            ("ib0:x", "'x' is not a positive count"),
            ("ib/0", "-bind-to ib/0: '/0' is not a device name or number"),
            ("eth0123456789abcd", "is not a device name or number"),
            ("pci", "unknown object 'pci'"),
            ("pci:", "-bind-to pci:: '' is not a PCI address"),
            ("pci:zz", "'zz' is not a PCI address ([domain:]bus:device.function in hex"),
            ("pci:00:20.0", "is not a PCI address"),
            ("pci:00:03.8", "is not a PCI address"),
            ("pci:100:03.0", "is not a PCI address"),
            ("pci:00:03.0:2", "'00:03.0:2' is not a PCI address"),
            ("pci:0:0:0:3.0", "is not a PCI address"),
        ] {
            let e = parse_bind(s).unwrap_err().to_string();
            assert!(e.contains(msg), "{s}: {e}");
            assert!(!e.contains('\n'));
        }
        assert!(parse_map("user:1").is_err());
        assert!(parse_map("none")
            .unwrap_err()
            .to_string()
            .starts_with("-map-by: unknown object 'none'"));
        assert_eq!(parse_map("socket").unwrap().obj, Object::Socket);
    }
}
