//! One log object per file name in the process, shared by every copy of
//! every build of our plugins. ATS names a second object of a name
//! `NAME_1.log`: a plugin upgraded by a remap reload (a new copy with its
//! own statics, while the old copy's rules still serve) would otherwise
//! move its log to another file, and the old copy's object would stay open
//! for the life of the process. So log objects are counted here, found by
//! name, and destroyed when the last handle of any copy is dropped.
//!
//! Written by hand: nothing else can be shared by copies that may have
//! been built by different compilers. The registry lives in memory the
//! first copy allocates and never frees, is found through a global user
//! argument, and has a `repr(C)` layout checked by a magic number and its
//! size; a copy that finds another layout (or no free argument) keeps a
//! registry of its own, so its rules still share one object per name.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::{c_int, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use crate::sys;

/// The global user argument that points to the registry. A new layout
/// takes a new name (and a new magic).
const ARG: &std::ffi::CStr = c"tsrs.textlogs.v1";
const MAGIC: u64 = u64::from_le_bytes(*b"tsrslog1");
/// Distinct log names open at once (the memory bound: 256 × 280 bytes).
const SLOTS: usize = 256;
/// Longest name shared; a longer one gets an object of its own.
const NAME_BYTES: usize = 255;

#[repr(C)]
struct Registry {
    magic: u64,
    size: u64,
    /// A spin lock (0 free, 1 held): the only lock every build agrees on.
    /// Held for a lookup and at most one create, when a rule or a plugin
    /// starts (ATS's loading thread), and for a count when a rule is
    /// deleted (an event thread, on 10.x); never on a request's path.
    lock: AtomicU32,
    slots: [Slot; SLOTS],
}

/// A name's object; free while `obj` is null.
#[repr(C)]
struct Slot {
    obj: sys::TSTextLogObject,
    refs: u64,
    mode: c_int,
    len: u32,
    name: [u8; NAME_BYTES],
}

/// A zeroed registry from the system allocator (not the global one, which
/// a build might replace), never freed; `None` if out of memory.
fn allocate() -> Option<NonNull<Registry>> {
    let layout = Layout::new::<Registry>();
    // SAFETY: Registry is not zero-sized. Every field of it is valid
    // all-zero (null pointers, zero counts, an unlocked lock).
    let p = NonNull::new(unsafe { System.alloc_zeroed(layout) }.cast::<Registry>())?;
    // SAFETY: just allocated and zeroed, not shared yet.
    unsafe {
        (*p.as_ptr()).magic = MAGIC;
        (*p.as_ptr()).size = std::mem::size_of::<Registry>() as u64;
    }
    Some(p)
}

/// The process's registry, or this copy's own if another copy's has another
/// layout or ATS had no global user argument left; `None` only if out of
/// memory (objects are then per handle).
fn registry() -> Option<NonNull<Registry>> {
    static FOUND: OnceLock<Option<usize>> = OnceLock::new();
    let addr = FOUND.get_or_init(|| {
        // Another layout: a registry of this copy's own.
        let reg = find_or_publish().or_else(allocate)?;
        Some(reg.as_ptr() as usize)
    });
    addr.and_then(|a| NonNull::new(a as *mut Registry))
}

/// The registry another copy published, or a new one (published here if
/// ATS has a global user argument left); `None` if the published one has
/// another layout.
fn find_or_publish() -> Option<NonNull<Registry>> {
    if let Some(p) = crate::global_arg::lookup(ARG) {
        let reg = NonNull::new(p.cast::<Registry>())?;
        // SAFETY: only the code below sets ARG, to a registry that is
        // never freed and whose first two fields never change; they are at
        // the same offsets in every layout (they say which layout it is).
        let (magic, size) = unsafe {
            let r = reg.as_ptr();
            ((*r).magic, (*r).size)
        };
        if magic != MAGIC || size != std::mem::size_of::<Registry>() as u64 {
            crate::log::warning(
                "another build's text log registry has another layout: a log both \
                 builds write gets a second file (NAME_1.log)",
            );
            return None;
        }
        return Some(reg);
    }
    // Never freed: once published, later copies (and this one) use it
    // until exit; if not, this copy keeps it as its own.
    let reg = allocate()?;
    if !crate::global_arg::publish(ARG, reg.as_ptr().cast()) {
        crate::log::warning(
            "no global user argument left for the text log registry: a log that \
             another copy of this plugin writes gets a second file (NAME_1.log)",
        );
    }
    Some(reg)
}

/// The registry, locked for the life of the value.
struct Locked(NonNull<Registry>);

impl Locked {
    fn new(reg: NonNull<Registry>) -> Locked {
        // SAFETY: the registry is never freed; `lock` is an atomic.
        let lock = unsafe { &(*reg.as_ptr()).lock };
        while lock
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            std::thread::yield_now();
        }
        Locked(reg)
    }

    fn slots(&mut self) -> &mut [Slot; SLOTS] {
        // SAFETY: the lock is held, so no other copy or thread touches the
        // slots; the borrow ends before `drop` unlocks.
        unsafe { &mut (*self.0.as_ptr()).slots }
    }
}

impl Drop for Locked {
    fn drop(&mut self) {
        // SAFETY: the registry is never freed.
        unsafe { &(*self.0.as_ptr()).lock }.store(0, Ordering::Release);
    }
}

/// Finds or sets up the registry (see [`super::prepare`]).
pub(super) fn prepare() {
    let _ = registry();
}

/// A handle on `NAME.log` in `mode`: the process's object for that name if
/// there is one, else a new one.
pub(super) fn acquire(
    name: &str,
    mode: c_int,
) -> Result<NonNull<sys::tsapi_textlogobject>, String> {
    let shared = registry().filter(|_| name.len() <= NAME_BYTES);
    let Some(reg) = shared else {
        return create(name, mode);
    };
    let mut locked = Locked::new(reg);
    let slots = locked.slots();
    if let Some(s) = slots
        .iter_mut()
        .find(|s| !s.obj.is_null() && s.name.get(..s.len as usize) == Some(name.as_bytes()))
    {
        if s.mode != mode {
            let with = |m: c_int| if m == 0 { "without" } else { "with" };
            return Err(format!(
                "cannot open text log {name}.log {} ATS's timestamps: it is open {} them",
                with(mode),
                with(s.mode)
            ));
        }
        s.refs += 1;
        return NonNull::new(s.obj).ok_or_else(|| format!("text log {name}.log"));
    }
    let Some(free) = slots.iter_mut().find(|s| s.obj.is_null()) else {
        drop(locked);
        crate::log::warning(&format!(
            "{SLOTS} text logs are open: {name}.log is not shared with other rules \
             (a second rule naming it writes NAME_1.log)"
        ));
        return create(name, mode);
    };
    let obj = create(name, mode)?;
    free.obj = obj.as_ptr();
    free.refs = 1;
    free.mode = mode;
    free.len = name.len() as u32;
    free.name[..name.len()].copy_from_slice(name.as_bytes());
    Ok(obj)
}

/// Drops a handle from [`acquire`]: the object is destroyed with its last.
pub(super) fn release(obj: NonNull<sys::tsapi_textlogobject>) {
    if let Some(reg) = registry() {
        let mut locked = Locked::new(reg);
        if let Some(s) = locked.slots().iter_mut().find(|s| s.obj == obj.as_ptr()) {
            s.refs = s.refs.saturating_sub(1);
            if s.refs > 0 {
                return;
            }
            s.obj = std::ptr::null_mut();
            s.len = 0;
            // Still locked: an acquire of the name in between would find
            // ATS's object listed and get NAME_1.log. (Same lock order as
            // acquire: ours, then ATS's API mutex.)
            destroy(obj);
            return;
        }
    }
    // An object outside the registry.
    destroy(obj);
}

fn create(name: &str, mode: c_int) -> Result<NonNull<sys::tsapi_textlogobject>, String> {
    let cname = CString::new(name).map_err(|_| format!("text log name {name:?} has a NUL"))?;
    let mut obj: sys::TSTextLogObject = std::ptr::null_mut();
    // SAFETY: valid C string and out pointer.
    let rc = unsafe { sys::TSTextLogObjectCreate(cname.as_ptr(), mode, &mut obj) };
    match NonNull::new(obj) {
        Some(obj) if rc == sys::TSReturnCode::TS_SUCCESS => Ok(obj),
        _ => Err(format!("cannot create text log {name}.log")),
    }
}

fn destroy(obj: NonNull<sys::tsapi_textlogobject>) {
    // SAFETY: a live object whose last handle is being dropped: no write
    // can be running (a write borrows its handle).
    unsafe { sys::TSTextLogObjectDestroy(obj.as_ptr()) };
}
