//! What a system call's error means, in words.

use std::io;

/// The strerror text of an I/O error, without Rust's "(os error N)" suffix.
pub fn describe(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => nix::errno::Errno::from_raw(n).desc().to_string(),
        None => e.to_string(),
    }
}

/// A failure to start a rank that the next ones would meet too: the machine is out of
/// processes, memory or descriptors.
pub fn out_of_resources(errno: i32) -> bool {
    matches!(errno, libc::EAGAIN | libc::ENOMEM | libc::EMFILE | libc::ENFILE)
}
