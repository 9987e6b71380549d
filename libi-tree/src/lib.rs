//! The library half of `libi-tree`: [`calibrate`] fits the launch model to a launch report
//! and compares measured with modeled launch times. It lives here rather than in `libi`
//! because only tools that read reports need it; `libi` stays the pure model that the
//! front end and the NLA link.
#![forbid(unsafe_code)]

pub mod calibrate;
