//! The LIBI session API (Goehner et al., "LIBI: A Framework for Bootstrapping Extreme Scale
//! Software Systems"): a tool's **front end** ([`fe::FrontEnd`], in the tool's own process)
//! creates sessions and launches their **members** ([`member::Member`]) on many hosts; member
//! rank 0 is the session's **master**. Members synchronize and exchange data with
//! collectives that run over the libi agent tree; the master and the front end exchange
//! user data.
//!
//! How it is built on libi (see `docs/session.md`):
//! * a session is one `libi-mpiexec --pmgr` job started by the front end (every option of
//!   `libi-mpiexec` applies: launcher, tree shape, launch model, batching, timeouts); its
//!   agents (`libi-nla`) start the members;
//! * the collectives are PMGR collectives served by the agents: each agent combines its
//!   local members' parts and passes one message per collective up the tree; the root
//!   answers down the tree (never a star at the master);
//! * the master connects to the front end over TCP (address and a per-session key in its
//!   environment) once every member is in `LIBI_init`; that connection carries user data.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod fe;
mod frame;
pub mod member;
pub mod mpir;

/// Result codes, as the C API returns them (`libi_rc_e` in `libi.h`; the first ten are the
/// paper's, in its order).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok = 0,
    Yes = 1,
    No = 2,
    NotImpl = 3,
    /// Not initialized, initialized twice, or not started by a LIBI front end.
    EInit = 4,
    /// The launch failed (the message says why: a host, the launcher, a member).
    ELaunch = 5,
    /// No such session.
    ESess = 6,
    /// A front-end-only call from a member.
    EFrontEndOnly = 7,
    /// The session was launched already.
    ESessAlreadyLaunched = 8,
    /// A connection failed.
    EIo = 9,
    /// A host distribution is empty, names no host, or gives a host 0 processes.
    EHostDist = 10,
    /// The session failed: a member died or an agent was lost (the message names it).
    ESessFailed = 11,
    /// A bad argument (null pointer, negative length, message too long).
    EArg = 12,
    /// A master-only call from another member.
    ENotMaster = 13,
    /// Nothing came within the time given (a timed or non-blocking call).
    ETimeout = 14,
}

impl Code {
    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "LIBI_OK",
            Code::Yes => "LIBI_YES",
            Code::No => "LIBI_NO",
            Code::NotImpl => "LIBI_NOTIMPL",
            Code::EInit => "LIBI_EINIT",
            Code::ELaunch => "LIBI_ELAUNCH",
            Code::ESess => "LIBI_ESESS",
            Code::EFrontEndOnly => "LIBI_EFRONTENDONLY",
            Code::ESessAlreadyLaunched => "LIBI_ESESSALREADYLAUNCHED",
            Code::EIo => "LIBI_EIO",
            Code::EHostDist => "LIBI_EHOSTDIST",
            Code::ESessFailed => "LIBI_ESESSFAILED",
            Code::EArg => "LIBI_EARG",
            Code::ENotMaster => "LIBI_ENOTMASTER",
            Code::ETimeout => "LIBI_ETIMEOUT",
        }
    }
}

/// An error: its code and one line saying what happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    pub code: Code,
    pub message: String,
}

impl Error {
    pub fn new(code: Code, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The largest user-data message (either direction), in bytes.
pub const MAX_MSG: usize = 64 << 20;

/// The most bytes one member collective moves through a member (256 MiB): a broadcast's
/// payload; a scatter's or gather's size × per-member bytes (the master's buffer); an
/// allgather's likewise (every member's); a gatherv's or scatterv's sum of counts. A call
/// over it returns [`Code::EArg`] on every member, before anything is sent: the session
/// goes on. (The agents serve at most this much per rank and collective.)
pub const MAX_COLL: usize = pmgr::wire::DEFAULT_MAX_BYTES;
