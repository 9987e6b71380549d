//! C-boundary helpers (shared by libpmi and libpmi2): panics never cross into C, pointers
//! are checked for null, strings are copied with their NUL within the caller's capacity.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

/// Run `f`, turning a panic into `fail`.
pub fn guard(fail: c_int, f: impl FnOnce() -> c_int) -> c_int {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fail)
}

/// Lock ignoring poisoning (a panic caught by [`guard`] must not disable the library).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The C string at `p` (lossy UTF-8), `None` for a null pointer.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
pub unsafe fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The bytes of the C string at `p` (as they are: a KVS value need not be UTF-8), `None`
/// for a null pointer.
///
/// # Safety
/// As [`cstr`].
pub unsafe fn cbytes(p: *const c_char) -> Option<Vec<u8>> {
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per the caller's contract.
    Some(unsafe { CStr::from_ptr(p) }.to_bytes().to_vec())
}

/// Copy `s` (text or bytes without NUL) and a NUL into `dst` if it fits in `cap` bytes;
/// `false` (and nothing written except an empty string when `cap > 0`) if it does not.
///
/// # Safety
/// `dst` is null or points to at least `cap` writable bytes.
pub unsafe fn put_cstr(dst: *mut c_char, cap: usize, s: impl AsRef<[u8]>) -> bool {
    if dst.is_null() {
        return false;
    }
    let b = s.as_ref();
    if b.len() + 1 > cap {
        if cap > 0 {
            // SAFETY: cap ≥ 1 writable bytes.
            unsafe { *dst = 0 };
        }
        return false;
    }
    // SAFETY: b.len() + 1 ≤ cap bytes are writable; the regions cannot overlap (s is ours).
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr().cast::<c_char>(), dst, b.len());
        *dst.add(b.len()) = 0;
    }
    true
}

/// Copy as much of `s` as fits (NUL-terminated) into `dst`; the number of bytes copied.
///
/// # Safety
/// As [`put_cstr`].
pub unsafe fn put_cstr_trunc(dst: *mut c_char, cap: usize, s: &str) -> usize {
    if dst.is_null() || cap == 0 {
        return 0;
    }
    let n = s.len().min(cap - 1);
    // SAFETY: n + 1 ≤ cap writable bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), dst, n);
        *dst.add(n) = 0;
    }
    n
}

/// Store `v` at `p` if `p` is not null.
///
/// # Safety
/// `p` is null or valid for a write of one `c_int`.
pub unsafe fn put_int(p: *mut c_int, v: c_int) -> bool {
    if p.is_null() {
        return false;
    }
    // SAFETY: non-null and writable per the caller's contract.
    unsafe { *p = v };
    true
}

/// The integer in environment variable `name` (surrounding blanks allowed); `None` when it
/// is unset or not a number, so a caller falls back to its default instead of failing.
pub fn env_int(name: &str) -> Option<i32> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    #[test]
    fn put_cstr_fits_or_writes_nothing_but_an_empty_string() {
        let mut buf = [b'x' as c_char; 4];
        // SAFETY: 4 writable bytes.
        assert!(unsafe { put_cstr(buf.as_mut_ptr(), 4, "abc") });
        // SAFETY: NUL-terminated above.
        assert_eq!(unsafe { cstr(buf.as_ptr()) }.as_deref(), Some("abc"));
        // "abcd" + NUL needs 5 bytes: refused, and the buffer holds "".
        // SAFETY: 4 writable bytes.
        assert!(!unsafe { put_cstr(buf.as_mut_ptr(), 4, "abcd") });
        assert_eq!(buf[0], 0);
        // SAFETY: null is allowed.
        assert!(!unsafe { put_cstr(std::ptr::null_mut(), 4, "a") });
        // SAFETY: cap 0 writes nothing.
        assert!(!unsafe { put_cstr(buf.as_mut_ptr(), 0, "") });
    }

    #[test]
    fn put_cstr_trunc_keeps_what_fits() {
        let mut buf = [b'x' as c_char; 4];
        // SAFETY: 4 writable bytes.
        assert_eq!(unsafe { put_cstr_trunc(buf.as_mut_ptr(), 4, "abcdef") }, 3);
        // SAFETY: NUL-terminated above.
        assert_eq!(unsafe { cstr(buf.as_ptr()) }.as_deref(), Some("abc"));
        // SAFETY: null writes nothing.
        assert_eq!(unsafe { put_cstr_trunc(std::ptr::null_mut(), 4, "a") }, 0);
        // SAFETY: cap 0 writes nothing.
        assert_eq!(unsafe { put_cstr_trunc(buf.as_mut_ptr(), 0, "a") }, 0);
    }

    #[test]
    fn null_pointers_and_panics_do_not_escape() {
        // SAFETY: null is part of the contract.
        assert_eq!(unsafe { cstr(std::ptr::null()) }, None);
        let s = CString::new(vec![b'a', 0xff]).expect("no NUL inside");
        // SAFETY: a valid C string; invalid UTF-8 is replaced, not an error.
        assert_eq!(unsafe { cstr(s.as_ptr()) }.as_deref(), Some("a\u{fffd}"));
        let mut v = 0;
        // SAFETY: null is allowed.
        assert!(!unsafe { put_int(std::ptr::null_mut(), 1) });
        // SAFETY: &mut v is a valid int.
        assert!(unsafe { put_int(&mut v, 7) });
        assert_eq!(v, 7);
        assert_eq!(guard(-1, || panic!("inside a C call")), -1);
        assert_eq!(guard(-1, || 5), 5);
        // A panic while holding the lock poisons it; `lock` still hands the value out.
        let m = Mutex::new(1);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let _g = m.lock();
            panic!("poison");
        }));
        assert!(m.is_poisoned());
        assert_eq!(*lock(&m), 1);
    }
}
