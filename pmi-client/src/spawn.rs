//! The C side of a spawn request, shared by `PMI_Spawn_multiple` (libpmi) and
//! `PMI2_Job_Spawn` (libpmi2): the caller's arrays read into the wire's
//! [`SpawnCmd`]s within the wire's limits, and the per-process error codes written back.
//! The two APIs differ only in how one command's arguments and info pairs are laid out, which
//! each library reads itself through the closures given to [`read_cmds`].

use std::ffi::{c_char, c_int};

use pmi_wire::v1::{SpawnCmd, MAX_SPAWN_LIST, MAX_SPAWN_NPROCS, MAX_TOTSPAWNS};

use crate::cutil::cstr;

/// Why the caller's arrays were refused (each library maps it to its own error code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A null array, a null command, a negative count or `maxprocs`.
    Arg,
    /// More commands, processes, arguments or pairs than the wire carries.
    Length,
}

/// The `i`-th element of a C array of `n` elements (`None` for a null array or `i ≥ n`).
///
/// # Safety
/// `p` is null or points to at least `n` readable elements.
pub unsafe fn at<T: Copy>(p: *const T, n: usize, i: usize) -> Option<T> {
    if p.is_null() || i >= n {
        return None;
    }
    // SAFETY: i < n readable elements per the caller's contract.
    Some(unsafe { *p.add(i) })
}

/// A count from C as a bounded `usize`.
pub fn count(n: c_int, max: usize) -> Result<usize, Refused> {
    let n = usize::try_from(n).map_err(|_| Refused::Arg)?;
    if n > max {
        return Err(Refused::Length);
    }
    Ok(n)
}

/// The C string at `p`, refusing null.
///
/// # Safety
/// As [`cstr`].
pub unsafe fn text(p: *const c_char) -> Result<String, Refused> {
    // SAFETY: forwarded contract.
    unsafe { cstr(p) }.ok_or(Refused::Arg)
}

/// The pairs of a list of `n` info entries starting at `first` (each library knows its
/// entries' layout).
pub type PairsFn<T> = unsafe fn(*const T, usize) -> Result<Vec<(String, String)>, Refused>;

/// The info pairs of command `i` of `n`: `sizes[i]` entries from `vectors[i]`, read by
/// `pairs`. A null `sizes` means no info for any command.
///
/// # Safety
/// `sizes` and `vectors` are null or hold `n` entries; entry `i` of `vectors` is what
/// `pairs` reads `sizes[i]` entries from.
pub unsafe fn info_at<T>(
    sizes: *const c_int,
    vectors: *const *const T,
    n: usize,
    i: usize,
    pairs: PairsFn<T>,
) -> Result<Vec<(String, String)>, Refused> {
    // SAFETY: per the caller's contract.
    let size = unsafe { at(sizes, n, i) }.unwrap_or(0);
    let ni = count(size, MAX_SPAWN_LIST)?;
    // SAFETY: as above.
    let v = unsafe { at(vectors, n, i) }.unwrap_or(std::ptr::null());
    // SAFETY: as above.
    unsafe { pairs(v, ni) }
}

/// `count` commands from the arrays `cmds` and `maxprocs` (each `count` long), the
/// arguments and info pairs of command `i` from `args(i)` and `info(i)`, and the pre-put
/// pairs (which the wire carries once, in the first command). Every limit of the wire is
/// checked here, so the request cannot be refused for its size by a server of ours.
///
/// # Safety
/// `cmds` and `maxprocs` are null or hold `count` elements; each command is a C string.
pub unsafe fn read_cmds(
    count_in: c_int,
    cmds: *const *const c_char,
    maxprocs: *const c_int,
    mut args: impl FnMut(usize) -> Result<Vec<String>, Refused>,
    mut info: impl FnMut(usize) -> Result<Vec<(String, String)>, Refused>,
    preput: Vec<(String, String)>,
) -> Result<Vec<SpawnCmd>, Refused> {
    let n = count(count_in, MAX_TOTSPAWNS as usize)?;
    if n == 0 || cmds.is_null() || maxprocs.is_null() || preput.len() > MAX_SPAWN_LIST {
        return Err(if n == 0 || preput.len() <= MAX_SPAWN_LIST {
            Refused::Arg
        } else {
            Refused::Length
        });
    }
    let mut out = Vec::with_capacity(n);
    let mut total: u64 = 0;
    for i in 0..n {
        // SAFETY: i < count elements per the caller's contract.
        let execname = unsafe { text(at(cmds, n, i).ok_or(Refused::Arg)?) }?;
        // SAFETY: as above.
        let procs = unsafe { at(maxprocs, n, i) }.ok_or(Refused::Arg)?;
        let nprocs = u32::try_from(procs).map_err(|_| Refused::Arg)?;
        total += u64::from(nprocs);
        if total > u64::from(MAX_SPAWN_NPROCS) {
            return Err(Refused::Length);
        }
        let (args, info) = (args(i)?, info(i)?);
        if args.len() > MAX_SPAWN_LIST || info.len() > MAX_SPAWN_LIST {
            return Err(Refused::Length);
        }
        out.push(SpawnCmd { nprocs, execname, args, preput: Vec::new(), info });
    }
    if let Some(first) = out.first_mut() {
        first.preput = preput;
    }
    Ok(out)
}

/// The number of processes a request starts in all.
pub fn total_procs(cmds: &[SpawnCmd]) -> usize {
    cmds.iter().map(|c| c.nprocs as usize).sum()
}

/// Write the per-process error codes of a spawn into `errors` (`n` entries): the server's
/// list when it sent one (it must then have exactly `n` entries: `false` otherwise), zeros
/// when it did not (as MPICH's clients read a reply without `errcodes`). A null `errors`
/// is left alone.
///
/// # Safety
/// `errors` is null or holds `n` writable ints.
pub unsafe fn put_errcodes(errors: *mut c_int, n: usize, codes: Option<&[i32]>) -> bool {
    if let Some(c) = codes {
        if c.len() != n {
            return false;
        }
    }
    if errors.is_null() {
        return true;
    }
    for i in 0..n {
        let v = codes.and_then(|c| c.get(i).copied()).unwrap_or(0);
        // SAFETY: i < n writable ints per the caller's contract.
        unsafe { *errors.add(i) = v };
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn commands_are_read_within_the_limits() {
        let exe = CString::new("/bin/true").expect("no NUL");
        let cmds = [exe.as_ptr(), exe.as_ptr()];
        let procs = [2, 1];
        let pre = vec![("k".to_owned(), "v".to_owned())];
        // SAFETY: two-element arrays.
        let got = unsafe {
            read_cmds(
                2,
                cmds.as_ptr(),
                procs.as_ptr(),
                |i| Ok(vec![i.to_string()]),
                |_| Ok(vec![]),
                pre,
            )
        }
        .expect("valid");
        assert_eq!(total_procs(&got), 3);
        assert_eq!(got[0].preput.len(), 1);
        assert!(got[1].preput.is_empty());
        assert_eq!(got[1].args, ["1"]);
        let none = |_| Ok(vec![]);
        let nokv = |_| Ok(vec![]);
        // SAFETY: as above; the counts are refused before any read past them.
        unsafe {
            let r = read_cmds(0, cmds.as_ptr(), procs.as_ptr(), none, nokv, vec![]);
            assert_eq!(r, Err(Refused::Arg));
            let r = read_cmds(-1, cmds.as_ptr(), procs.as_ptr(), none, nokv, vec![]);
            assert_eq!(r, Err(Refused::Arg));
            let r = read_cmds(1, std::ptr::null(), procs.as_ptr(), none, nokv, vec![]);
            assert_eq!(r, Err(Refused::Arg));
            let neg = [-1];
            let r = read_cmds(1, cmds.as_ptr(), neg.as_ptr(), none, nokv, vec![]);
            assert_eq!(r, Err(Refused::Arg));
            let big = [i32::MAX];
            let r = read_cmds(1, cmds.as_ptr(), big.as_ptr(), none, nokv, vec![]);
            assert_eq!(r, Err(Refused::Length));
            let nul = [std::ptr::null()];
            let r = read_cmds(1, nul.as_ptr(), procs.as_ptr(), none, nokv, vec![]);
            assert_eq!(r, Err(Refused::Arg));
        }
    }

    #[test]
    fn errcodes_fill_or_refuse() {
        let mut e = [7; 3];
        // SAFETY: three writable ints.
        unsafe {
            assert!(put_errcodes(e.as_mut_ptr(), 3, None));
            assert_eq!(e, [0, 0, 0]);
            assert!(put_errcodes(e.as_mut_ptr(), 3, Some(&[1, 2, 3])));
            assert_eq!(e, [1, 2, 3]);
            assert!(!put_errcodes(e.as_mut_ptr(), 3, Some(&[1])));
            assert!(put_errcodes(std::ptr::null_mut(), 3, None));
        }
    }
}
