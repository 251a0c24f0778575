//! One copy per build. ATS's dynamic reload (9.2 and 10.x) loads a remap
//! .so whose file has a new mtime as a new copy, with statics of its own:
//! its rules would start with empty state while the old copy's rules still
//! serve (a `--group` would count apart in the two, admitting up to twice
//! its limit). A file that is the same build, as when the same package is
//! installed again, gains nothing from a second copy. So the first copy of
//! a build publishes its entry points in a process-wide user argument
//! named by the plugin and the build's GNU build-id, and a later copy of
//! that build forwards every entry point to it: its rules are the first
//! copy's, with that copy's state, hooks and services. Another build
//! (an upgrade) is loaded as its own copy, as before.
//!
//! A copy publishes only if it can never be unmapped (`-z nodelete`),
//! since later copies call into it for as long as they serve.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

use super::ReloadStatus;
use crate::sys;

/// The entry points of the copy that serves a build's rules.
pub(crate) struct Table {
    pub new_instance: unsafe extern "C" fn(
        c_int,
        *mut *mut c_char,
        *mut *mut c_void,
        *mut c_char,
        c_int,
    ) -> sys::TSReturnCode,
    pub delete_instance: unsafe extern "C" fn(*mut c_void),
    pub do_remap: unsafe extern "C" fn(
        *mut c_void,
        sys::TSHttpTxn,
        *mut sys::TSRemapRequestInfo,
    ) -> sys::TSRemapStatus,
    pub pre_reload: extern "C" fn(),
    pub post_reload: extern "C" fn(sys::TSRemapReloadStatus),
    pub done: extern "C" fn(),
}

/// The user argument naming the copy that serves `plugin`'s build, if
/// this copy has a build-id and stays mapped.
fn arg_name(plugin: &str) -> Option<CString> {
    let id = build()?;
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    CString::new(format!("{plugin}.copy.{hex}")).ok()
}

/// The entry points of a copy of this build loaded before this one, if any.
pub(crate) fn earlier(plugin: &str) -> Option<&'static Table> {
    let name = arg_name(plugin)?;
    let p = crate::global_arg::lookup(&name)?;
    // SAFETY: only `publish` sets this argument, to a `&'static Table` of a
    // copy of this very build (the name carries its build-id: the same
    // code, so the same layout), which is never unmapped (nodelete).
    (!p.is_null()).then(|| unsafe { &*p.cast::<Table>() })
}

/// Makes this copy the one later copies of its build forward to.
pub(crate) fn publish(plugin: &str, table: &'static Table) {
    let Some(name) = arg_name(plugin) else {
        crate::log::debug(&format!(
            "{plugin}: no build-id, or the .so can be unloaded: a replaced file of the same \
             build will load as a copy of its own"
        ));
        return;
    };
    // The table is 'static in a copy that stays mapped (nodelete).
    let table = std::ptr::from_ref(table).cast_mut().cast();
    if !crate::global_arg::publish(&name, table) {
        crate::log::warning(&format!(
            "{plugin}: no free global user argument: a replaced file of the same build will \
             load as a copy of its own"
        ));
    }
}

/// This copy's GNU build-id, if it has one and can never be unmapped.
fn build() -> Option<&'static [u8]> {
    static BUILD: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    BUILD
        .get_or_init(|| image().filter(|i| i.nodelete).and_then(|i| i.build_id))
        .as_deref()
}

/// What the loaded image holding this code says of itself.
#[derive(Debug, Default)]
struct Image {
    build_id: Option<Vec<u8>>,
    /// Linked `-z nodelete` (DF_1_NODELETE): never unmapped.
    nodelete: bool,
}

const DT_NULL: isize = 0;
const DT_FLAGS_1: isize = 0x6fff_fffb;
const DF_1_NODELETE: usize = 0x8;
const NT_GNU_BUILD_ID: u32 = 3;

/// Finds, among the loaded objects, the one whose segments hold this
/// function's static, and reads its build-id note and dynamic flags.
fn image() -> Option<Image> {
    static MARK: u8 = 0;
    struct Search {
        addr: usize,
        found: Option<Image>,
    }
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the call, and
        // `data` is the Search that `image` passed it.
        let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
        if info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        let phdrs =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let base = info.dlpi_addr as usize;
        let holds = phdrs.iter().any(|p| {
            let start = base.wrapping_add(p.p_vaddr as usize);
            p.p_type == libc::PT_LOAD
                && (start..start.wrapping_add(p.p_memsz as usize)).contains(&search.addr)
        });
        if !holds {
            return 0;
        }
        let mut image = Image::default();
        for p in phdrs {
            let at = base.wrapping_add(p.p_vaddr as usize);
            match p.p_type {
                libc::PT_NOTE if image.build_id.is_none() => {
                    // SAFETY: a PT_NOTE segment lies in a loaded segment:
                    // p_memsz bytes mapped readable at `at`.
                    let notes =
                        unsafe { std::slice::from_raw_parts(at as *const u8, p.p_memsz as usize) };
                    image.build_id = gnu_build_id(notes, p.p_align as usize).map(<[u8]>::to_vec);
                }
                libc::PT_DYNAMIC => {
                    let n = p.p_memsz as usize / std::mem::size_of::<[usize; 2]>();
                    // SAFETY: the dynamic section, mapped readable: (tag, value)
                    // pairs of the pointer's width, ended by DT_NULL.
                    let dynamic = unsafe { std::slice::from_raw_parts(at as *const [usize; 2], n) };
                    image.nodelete = dynamic
                        .iter()
                        .take_while(|[tag, _]| *tag as isize != DT_NULL)
                        .any(|[tag, value]| {
                            *tag as isize == DT_FLAGS_1 && value & DF_1_NODELETE != 0
                        });
                }
                _ => {}
            }
        }
        search.found = Some(image);
        1
    }
    let mut search = Search {
        addr: std::ptr::addr_of!(MARK) as usize,
        found: None,
    };
    // SAFETY: `visit` only reads what the loader hands it, and `search`
    // outlives the call.
    unsafe { libc::dl_iterate_phdr(Some(visit), std::ptr::from_mut(&mut search).cast()) };
    search.found
}

/// The GNU build-id among the notes of a PT_NOTE segment (`align`: the
/// segment's alignment, 4 or 8; name and descriptor are padded to it).
fn gnu_build_id(mut notes: &[u8], align: usize) -> Option<&[u8]> {
    let align = align.max(4);
    let pad = |n: usize| n.div_ceil(align) * align;
    let word = |b: &[u8], at: usize| -> Option<usize> {
        let w: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
        usize::try_from(u32::from_ne_bytes(w)).ok()
    };
    while notes.len() >= 12 {
        let (name_size, desc_size) = (word(notes, 0)?, word(notes, 4)?);
        let kind = word(notes, 8)?;
        let desc_at = pad(12 + name_size);
        let name = notes.get(12..12 + name_size)?;
        let desc = notes.get(desc_at..desc_at + desc_size)?;
        if kind == NT_GNU_BUILD_ID as usize && name == b"GNU\0" && !desc.is_empty() {
            return Some(desc);
        }
        notes = notes.get(pad(desc_at + desc_size)..)?;
    }
    None
}

/// What a copy has seen of ATS's loads and of its rules, to tell each load
/// to the plugin once and its end (`TSRemapDone`) when its last rule is
/// gone. While two copies of one build are loaded, ATS tells both of each
/// load, and a later copy forwards what it is told; a copy's rules include
/// those it made for later copies.
#[derive(Debug, Default)]
pub(crate) struct Lifecycle {
    /// Between a load's pre-reload and post-reload notices.
    loading: bool,
    /// A post-reload notice was passed on: the copy's first load has none
    /// before it (ATS tells only the copies loaded already).
    posted: bool,
    /// Rules made since the load began.
    made: usize,
    /// Rules not yet deleted.
    live: usize,
}

impl Lifecycle {
    pub(crate) const fn new() -> Lifecycle {
        Lifecycle {
            loading: false,
            posted: false,
            made: 0,
            live: 0,
        }
    }

    /// A load begins: true if the plugin is to be told (not yet told of it).
    pub(crate) fn pre_reload(&mut self) -> bool {
        if self.loading {
            return false;
        }
        self.loading = true;
        self.made = 0;
        true
    }

    pub(crate) fn made(&mut self) {
        self.made += 1;
        self.live += 1;
    }

    pub(crate) fn deleted(&mut self) {
        self.live = self.live.saturating_sub(1);
    }

    /// A load ended: what to tell the plugin, unless it was told already.
    /// The rule count decides `used`: ATS says unused to a copy whose
    /// rules a later copy had it make.
    pub(crate) fn post_reload(&mut self, status: ReloadStatus) -> Option<ReloadStatus> {
        if !self.loading && self.posted {
            return None;
        }
        self.loading = false;
        self.posted = true;
        Some(match status {
            ReloadStatus::Loaded { used } => ReloadStatus::Loaded {
                used: used || self.made > 0,
            },
            ReloadStatus::Failed => ReloadStatus::Failed,
        })
    }

    /// ATS says a copy has no rule left: true if none is left of those
    /// this copy made, for it or for a later copy.
    pub(crate) fn done(&self) -> bool {
        self.live == 0
    }
}

#[cfg(test)]
mod tests;
