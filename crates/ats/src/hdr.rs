//! HTTP headers (MIME header + status/URL) with every `TSMLoc` released on `Drop`.
//!
//! TS strings are `(pointer, length)` pairs into the header's heap, not
//! NUL-terminated. Reads return owned bytes: the same message can be reached
//! through two `Header` values (the transaction handle is `Copy`), and a
//! write through one may compact the heap under a slice borrowed from the
//! other.

use std::ffi::{c_char, c_int};
use std::marker::PhantomData;
use std::ptr;

use crate::sys;

const NULL_MLOC: sys::TSMLoc = ptr::null_mut();

/// A message header (request or response) of a live transaction.
pub struct Header<'a> {
    buf: sys::TSMBuffer,
    loc: sys::TSMLoc,
    /// Locs from `TSHttpTxn*Get` must be released; the remap request's are not ours.
    owned: bool,
    _life: PhantomData<&'a ()>,
}

impl Drop for Header<'_> {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: (buf, loc) came from a TSHttpTxn*Get that succeeded; released once.
            unsafe { sys::TSHandleMLocRelease(self.buf, NULL_MLOC, self.loc) };
        }
    }
}

/// A field location, released on `Drop`.
struct Field<'h> {
    buf: sys::TSMBuffer,
    hdr: sys::TSMLoc,
    loc: sys::TSMLoc,
    _life: PhantomData<&'h ()>,
}

impl Drop for Field<'_> {
    fn drop(&mut self) {
        // SAFETY: loc was returned by a TSMimeHdrField* lookup on (buf, hdr); released once.
        unsafe { sys::TSHandleMLocRelease(self.buf, self.hdr, self.loc) };
    }
}

/// Builds a slice from a TS (pointer, length) string.
///
/// # Safety
/// `p` must be null or point to `len` readable bytes valid for `'a`.
pub(crate) unsafe fn ts_bytes<'a>(p: *const c_char, len: c_int) -> &'a [u8] {
    match usize::try_from(len) {
        Ok(n) if !p.is_null() && n > 0 => {
            // SAFETY: per the caller's contract.
            unsafe { std::slice::from_raw_parts(p.cast(), n) }
        }
        _ => &[],
    }
}

fn c_len(s: &[u8]) -> c_int {
    c_int::try_from(s.len()).unwrap_or(c_int::MAX)
}

impl<'a> Header<'a> {
    /// # Safety
    /// `get` must be a `TSHttpTxn*Get`-style call on a live transaction.
    pub(crate) unsafe fn from_getter(
        get: impl FnOnce(*mut sys::TSMBuffer, *mut sys::TSMLoc) -> sys::TSReturnCode,
    ) -> Option<Header<'a>> {
        let mut buf: sys::TSMBuffer = ptr::null_mut();
        let mut loc: sys::TSMLoc = ptr::null_mut();
        if get(&mut buf, &mut loc) != sys::TSReturnCode::TS_SUCCESS || buf.is_null() {
            return None;
        }
        Some(Header {
            buf,
            loc,
            owned: true,
            _life: PhantomData,
        })
    }

    /// # Safety
    /// (buf, loc) must be a live header owned by someone else for `'a`.
    pub(crate) unsafe fn borrowed(buf: sys::TSMBuffer, loc: sys::TSMLoc) -> Option<Header<'a>> {
        (!buf.is_null()).then_some(Header {
            buf,
            loc,
            owned: false,
            _life: PhantomData,
        })
    }

    /// Wraps a field loc of this header (None for a null loc) so it is released on drop.
    fn field(&self, loc: sys::TSMLoc) -> Option<Field<'_>> {
        (!loc.is_null()).then_some(Field {
            buf: self.buf,
            hdr: self.loc,
            loc,
            _life: PhantomData,
        })
    }

    fn find(&self, name: &str) -> Option<Field<'_>> {
        // SAFETY: live header; name is passed with its length (no NUL needed).
        let loc = unsafe {
            sys::TSMimeHdrFieldFind(
                self.buf,
                self.loc,
                name.as_ptr().cast(),
                c_len(name.as_bytes()),
            )
        };
        self.field(loc)
    }

    fn next_dup(&self, f: &Field<'_>) -> Option<Field<'_>> {
        // SAFETY: live header and field.
        let loc = unsafe { sys::TSMimeHdrFieldNextDup(self.buf, self.loc, f.loc) };
        self.field(loc)
    }

    /// True if a field of that name exists.
    pub fn contains(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// The whole value of the first field called `name` (all its comma
    /// separated values, as received).
    pub fn get(&self, name: &str) -> Option<Vec<u8>> {
        let f = self.find(name)?;
        let mut len: c_int = 0;
        // SAFETY: live field; idx -1 = the whole value; the string lives in the
        // header heap, valid while `self` is borrowed immutably.
        let p =
            unsafe { sys::TSMimeHdrFieldValueStringGet(self.buf, self.loc, f.loc, -1, &mut len) };
        // SAFETY: ATS returned (p, len) for this header.
        Some(unsafe { ts_bytes(p, len) }.to_vec())
    }

    /// The values of every field called `name`, in order, joined with ", "
    /// (the list form RFC 9110 allows for repeated fields); `None` if there
    /// is no such field. Whole: ATS bounds a request header's size
    /// (`proxy.config.http.request_header_max_size`), and which end of a
    /// long list matters is the caller's business (a forwarding chain's
    /// trusted entries are at the end).
    pub fn joined(&self, name: &str) -> Option<Vec<u8>> {
        let mut field = self.find(name);
        field.as_ref()?;
        let mut out = Vec::new();
        while let Some(f) = field {
            let mut len: c_int = 0;
            // SAFETY: live field; idx -1 = the whole value.
            let p = unsafe {
                sys::TSMimeHdrFieldValueStringGet(self.buf, self.loc, f.loc, -1, &mut len)
            };
            if !out.is_empty() {
                out.extend_from_slice(b", ");
            }
            // SAFETY: ATS returned (p, len) for this header.
            out.extend_from_slice(unsafe { ts_bytes(p, len) });
            field = self.next_dup(&f);
        }
        Some(out)
    }

    /// Every comma-separated value of every field called `name`, in order.
    pub fn values(&self, name: &str) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut field = self.find(name);
        while let Some(f) = field {
            // SAFETY: live field.
            let n = unsafe { sys::TSMimeHdrFieldValuesCount(self.buf, self.loc, f.loc) };
            for i in 0..n {
                let mut len: c_int = 0;
                // SAFETY: live field, index in range.
                let p = unsafe {
                    sys::TSMimeHdrFieldValueStringGet(self.buf, self.loc, f.loc, i, &mut len)
                };
                // SAFETY: ATS returned (p, len) for this header.
                out.push(unsafe { ts_bytes(p, len) }.to_vec());
            }
            field = self.next_dup(&f);
        }
        out
    }

    /// Sets `name` to `value`, replacing every existing field of that name.
    pub fn set(&mut self, name: &str, value: &str) -> bool {
        self.remove(name);
        self.append_field(name, value)
    }

    /// Adds `value` to the first field `name` (as a further comma-separated
    /// value), or creates the field.
    pub fn append(&mut self, name: &str, value: &str) -> bool {
        let inserted = self.find(name).map(|f| {
            // SAFETY: live field; -1 inserts after the last value.
            let rc = unsafe {
                sys::TSMimeHdrFieldValueStringInsert(
                    self.buf,
                    self.loc,
                    f.loc,
                    -1,
                    value.as_ptr().cast(),
                    c_len(value.as_bytes()),
                )
            };
            rc == sys::TSReturnCode::TS_SUCCESS
        });
        match inserted {
            Some(ok) => ok,
            None => self.append_field(name, value),
        }
    }

    /// Removes every field called `name`.
    pub fn remove(&mut self, name: &str) {
        while let Some(f) = self.find(name) {
            // SAFETY: live field of this header; its loc is released by Field's Drop.
            let rc = unsafe { sys::TSMimeHdrFieldDestroy(self.buf, self.loc, f.loc) };
            if rc != sys::TSReturnCode::TS_SUCCESS {
                break;
            }
        }
    }

    fn append_field(&mut self, name: &str, value: &str) -> bool {
        let mut loc: sys::TSMLoc = ptr::null_mut();
        // SAFETY: live header; out pointer valid; name passed with its length.
        let rc = unsafe {
            sys::TSMimeHdrFieldCreateNamed(
                self.buf,
                self.loc,
                name.as_ptr().cast(),
                c_len(name.as_bytes()),
                &mut loc,
            )
        };
        let Some(f) = self
            .field(loc)
            .filter(|_| rc == sys::TSReturnCode::TS_SUCCESS)
        else {
            return false;
        };
        // SAFETY: live field just created; value passed with its length.
        let ok = unsafe {
            sys::TSMimeHdrFieldValueStringSet(
                self.buf,
                self.loc,
                f.loc,
                -1,
                value.as_ptr().cast(),
                c_len(value.as_bytes()),
            ) == sys::TSReturnCode::TS_SUCCESS
                && sys::TSMimeHdrFieldAppend(self.buf, self.loc, f.loc)
                    == sys::TSReturnCode::TS_SUCCESS
        };
        ok
    }

    /// The status code of a response header (0 for requests).
    pub fn status(&self) -> u16 {
        // SAFETY: live header.
        let s = unsafe { sys::TSHttpHdrStatusGet(self.buf, self.loc) };
        u16::try_from(s.0).unwrap_or(0)
    }

    /// The request method (`GET`, `POST`, ...); empty for responses.
    pub fn method(&self) -> Vec<u8> {
        let mut len: c_int = 0;
        // SAFETY: live header; out pointer valid. The method lives in the
        // header heap (or ATS's well-known strings) and is copied at once.
        let p = unsafe { sys::TSHttpHdrMethodGet(self.buf, self.loc, &mut len) };
        // SAFETY: (p, len) as returned above, read before any change to the header.
        unsafe { ts_bytes(p, len) }.to_vec()
    }

    /// Sets the reason phrase of a response (`503 Too many connections`).
    pub fn set_reason(&mut self, reason: &str) -> bool {
        // SAFETY: live header; the phrase is passed with its length and copied by ATS.
        unsafe {
            sys::TSHttpHdrReasonSet(
                self.buf,
                self.loc,
                reason.as_ptr().cast(),
                c_len(reason.as_bytes()),
            ) == sys::TSReturnCode::TS_SUCCESS
        }
    }

    /// The request URL's query string (without the '?'); `None` if there is none.
    pub fn url_query(&self) -> Option<Vec<u8>> {
        // SAFETY: a live URL loc of this header, passed by `url_part`.
        let p = self.url_part(|url, len| unsafe { sys::TSUrlHttpQueryGet(self.buf, url, len) })?;
        (!p.0.is_null()).then_some(p.1)
    }

    /// The request URL's path (without the leading '/').
    pub fn url_path(&self) -> Option<Vec<u8>> {
        // SAFETY: a live URL loc of this header, passed by `url_part`.
        self.url_part(|url, len| unsafe { sys::TSUrlPathGet(self.buf, url, len) })
            .map(|p| p.1)
    }

    /// One string of the request URL, through a `TSUrl*Get` getter: the
    /// pointer it returned (null when absent) and a copy of the bytes.
    fn url_part(
        &self,
        get: impl FnOnce(sys::TSMLoc, *mut c_int) -> *const c_char,
    ) -> Option<(*const c_char, Vec<u8>)> {
        let mut url: sys::TSMLoc = ptr::null_mut();
        // SAFETY: live header; out pointer valid.
        if unsafe { sys::TSHttpHdrUrlGet(self.buf, self.loc, &mut url) }
            != sys::TSReturnCode::TS_SUCCESS
        {
            return None;
        }
        let mut len: c_int = 0;
        let p = get(url, &mut len);
        // SAFETY: (p, len) live in the header heap, which outlives the URL
        // loc; copied before the loc is released.
        let bytes = unsafe { ts_bytes(p, len) }.to_vec();
        // SAFETY: url loc came from TSHttpHdrUrlGet on (buf, loc).
        unsafe { sys::TSHandleMLocRelease(self.buf, self.loc, url) };
        Some((p, bytes))
    }
}
