//! The pure state machines of a node: no I/O, no clock, no `unsafe`. Events come in (with
//! the time, told by the driver: `set_now`, `handle_timeout`), effects go out, and each says
//! when it next wants to be woken (`poll_timeout`). The agents, the front end and `libi-sim`
//! run exactly these, through the one effect interpreter ([`effect`]).
//!
//! * [`node`]: the node core (KVS, fences, PMI, PMGR, exit classification, children's
//!   backpressure, every timer of a node);
//! * [`root`]: the front end's job policy (exit status, teardown, spawn groups, output);
//! * [`launch`]: the child-launch lifecycle (order, batches, deadlines, give-ups);
//! * [`kvs`]: the key-value space and its cache;
//! * [`pmgr`]: PMGR collectives over the tree;
//! * [`streams`]: the deadlines of the ranks' PMI sockets and output streams (stall, partial
//!   line, drain, the gathering hold);
//! * [`upqueue`]: the rules of the link to the parent (order, credit, overtaking, merging,
//!   linger);
//! * [`tree`]: the tree connections' policies (connection retries, the first message of a
//!   connection not authenticated yet);
//! * [`signals`]: which signals the drivers watch, and what each means to an agent;
//! * [`ending`]: how an agent's ranks and loop end (ranks held unreaped, the last PMGR
//!   sweep);
//! * [`effect`]: the effects' meaning, over the I/O primitives a driver offers.

#![deny(unsafe_code)]

pub mod effect;
pub mod ending;
pub mod kvs;
pub mod launch;
pub mod node;
pub mod pmgr;
pub mod pmix;
pub mod root;
pub mod signals;
pub mod streams;
pub mod tree;
pub mod upqueue;
