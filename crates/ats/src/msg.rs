//! `traffic_ctl plugin msg TARGET DATA`: ATS's lifecycle message hook.
//!
//! In 9.2 traffic_manager forwards the message to traffic_server's
//! management thread, which calls every `TS_LIFECYCLE_MSG_HOOK` continuation
//! in turn. Three facts shape this module:
//! - the hook try-locks the continuation's mutex and aborts the server if
//!   another thread holds it, so the continuation gets a mutex of its own
//!   that nothing else ever takes;
//! - a lifecycle hook cannot be removed, and a replaced .so is loaded as a
//!   second copy: registration is once per process, marked by a global user
//!   argument reserved under the handler's name, which every copy finds;
//! - 9.2 counts the trailing NUL in `data_size`: data is bytes, and one
//!   trailing NUL is dropped.
//!
//! The handler runs on the management thread (an ATS thread, so it may
//! schedule work); it must be quick and defer real work to a task thread.
//!
//! [`serve`] is that pattern for a plugin's commands: parse on the
//! management thread, run on a task thread, answer as JSON objects, one per
//! line, in `<plugin>_ctl.log` (the hook has no reply channel) with a
//! one-line summary in diags.log. A long answer takes several lines (see
//! [`parts`]), tied by a request id: the sender's (`@ID` before the command)
//! or one made here. [`Roster`] lists the rules the commands can name.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use quoting::{shorten, shorten_to};
use serde_json::{json, Value};

use crate::sched::{Pool, Timer};
use crate::textlog::TextLog;
use crate::{guard, log::to_cstring, sys};

mod parts;
mod roster;

pub use roster::Roster;

/// Longest command echoed whole in an answer (`command`).
const ECHO_CHARS: usize = 1024;
/// Longest request id (`@ID`).
const ID_CHARS: usize = 64;

/// Handles plugin messages.
pub trait MsgHandler: Send + Sync + 'static {
    /// One message: its target (`rate_limit`, `rate_limit.show`, …, for every
    /// plugin's targets alike: ignore others) and its data.
    fn on_msg(&self, target: &str, data: &[u8]);
}

/// Registers `handler` for plugin messages, once per process under `name`.
/// `Ok(false)`: a copy of this plugin registered already, and keeps
/// answering (ATS keeps a .so loaded while its continuations live).
pub fn register<H: MsgHandler>(name: &str, handler: H) -> Result<bool, String> {
    register_with(name, || Ok(handler))
}

/// [`register`], building the handler only if this copy registers (so a
/// second copy opens no second answer log).
fn register_with<H: MsgHandler>(
    name: &str,
    make: impl FnOnce() -> Result<H, String>,
) -> Result<bool, String> {
    let cname = to_cstring(name);
    if crate::global_arg::lookup(&cname).is_some() {
        return Ok(false);
    }
    // A mark only: its value stays null.
    if !crate::global_arg::publish(&cname, std::ptr::null_mut()) {
        return Err(format!(
            "cannot mark the {name} message handler (no free global user argument)"
        ));
    }
    let handler = make()?;
    // SAFETY: no preconditions.
    let mutex = unsafe { sys::TSMutexCreate() };
    // SAFETY: valid handler; the continuation owns its private mutex.
    let cont = unsafe { sys::TSContCreate(Some(trampoline::<H>), mutex) };
    if cont.is_null() {
        return Err("TSContCreate failed".into());
    }
    // Never freed: the hook lives as long as the process.
    let data = Box::into_raw(Box::new(handler));
    // SAFETY: live continuation; data outlives it.
    unsafe {
        sys::TSContDataSet(cont, data.cast());
        sys::TSLifecycleHookAdd(sys::TSLifecycleHookID::TS_LIFECYCLE_MSG_HOOK, cont);
    }
    Ok(true)
}

unsafe extern "C" fn trampoline<H: MsgHandler>(
    cont: sys::TSCont,
    ev: sys::TSEvent,
    edata: *mut c_void,
) -> c_int {
    if ev != sys::TSEvent::TS_EVENT_LIFECYCLE_MSG || edata.is_null() {
        return 0;
    }
    guard::catch(
        "plugin message handler",
        || (),
        || {
            // SAFETY: for TS_EVENT_LIFECYCLE_MSG edata is a TSPluginMsg valid for the call.
            let msg = unsafe { &*edata.cast::<sys::TSPluginMsg>() };
            // SAFETY: target is a NUL-terminated string owned by ATS for the call.
            let target = (!msg.tag.is_null()).then(|| unsafe { CStr::from_ptr(msg.tag) });
            let Some(target) = target.and_then(|t| t.to_str().ok()) else {
                return;
            };
            let data: &[u8] = if msg.data.is_null() || msg.data_size == 0 {
                &[]
            } else {
                // SAFETY: data points to data_size bytes owned by ATS for the call.
                unsafe { std::slice::from_raw_parts(msg.data.cast::<u8>(), msg.data_size) }
            };
            let data = data.strip_suffix(&[0]).unwrap_or(data);
            // SAFETY: the data pointer was set in register() to a leaked Box<H>.
            let handler = unsafe { &*sys::TSContDataGet(cont).cast::<H>() };
            handler.on_msg(target, data);
        },
    );
    0
}

/// A plugin's commands, for [`serve`].
pub trait Commands: Send + Sync + 'static {
    type Command: Send + 'static;
    /// The command in a message; `None` if the target is not this plugin's.
    /// Runs on the management thread: parse only.
    fn parse(&self, target: &str, data: &[u8]) -> Option<Result<Self::Command, String>>;
    /// The command's verb, for the diags.log summary.
    fn verb(cmd: &Self::Command) -> &'static str;
    /// Runs a command, on a task thread: the answer, or what was wrong (a
    /// command that fails must have changed nothing).
    fn run(&self, cmd: Self::Command) -> Result<Answer, String>;
}

/// What a command that worked answers.
pub struct Answer {
    /// One line for diags.log.
    pub summary: String,
    /// The answer's fields (a JSON object); `command` and `ok` are added.
    pub body: Value,
}

/// Serves `plugin`'s commands (`traffic_ctl plugin msg PLUGIN …`): answers
/// in `<plugin>_ctl.log`, summaries in diags.log. Registered once per
/// process; a later copy of the .so logs that the first one answers.
pub fn serve<C: Commands>(plugin: &'static str, commands: C) {
    let made = register_with(&format!("{plugin}.ctl"), || {
        let log = match TextLog::create(&format!("{plugin}_ctl"), false) {
            Ok(l) => Some(l),
            Err(e) => {
                log::error!("{e}: traffic_ctl plugin msg {plugin} answers go to diags.log only");
                None
            }
        };
        Ok(Served(Arc::new(Desk {
            plugin,
            log,
            commands,
        })))
    });
    match made {
        Ok(true) => {}
        Ok(false) => log::info!(
            "another copy of {plugin}.so answers traffic_ctl plugin msg {plugin} (this copy's \
             rules are not shown: pin one copy with a plugin.config line)"
        ),
        Err(e) => log::error!("traffic_ctl plugin msg {plugin} will not work: {e}"),
    }
}

/// Where a plugin's commands are answered.
struct Desk<C> {
    plugin: &'static str,
    log: Option<TextLog>,
    commands: C,
}

struct Served<C>(Arc<Desk<C>>);

/// Splits a leading `@ID ` off a message: `(id, rest)`, or `Ok(None)`
/// without one. An id is 1 to 64 of `A-Za-z0-9._:-`.
fn request_id(data: &[u8]) -> Result<Option<(String, &[u8])>, String> {
    let Some(rest) = data.strip_prefix(b"@") else {
        return Ok(None);
    };
    let end = rest
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(rest.len());
    let (id, tail) = rest.split_at(end);
    let ok = |b: &u8| b.is_ascii_alphanumeric() || b".-_:".contains(b);
    if id.is_empty() || id.len() > ID_CHARS || !id.iter().all(ok) {
        return Err(format!(
            "request id {} is invalid: allowed @ID with 1 to {ID_CHARS} of A-Z a-z 0-9 . _ : -",
            quoting::quote(&String::from_utf8_lossy(id))
        ));
    }
    let tail = tail.strip_prefix(b" ").unwrap_or(tail);
    Ok(Some((String::from_utf8_lossy(id).into_owned(), tail)))
}

/// Ids for requests that bring none: `<pid>-<n>`, unique in this process.
fn next_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

impl<C: Commands> MsgHandler for Served<C> {
    fn on_msg(&self, target: &str, data: &[u8]) {
        // Whether the target is ours is known from the target alone.
        if self.0.commands.parse(target, b"").is_none() {
            return;
        }
        let (id, data, bad_id) = match request_id(data) {
            Ok(Some((id, rest))) => (id, rest, None),
            Ok(None) => (next_id(), data, None),
            Err(e) => (next_id(), data, Some(e)),
        };
        let text = shorten_to(
            &format!("{target} {}", String::from_utf8_lossy(data)),
            ECHO_CHARS,
        );
        let req = Request { id, text };
        if let Some(e) = bad_id {
            return self.0.error(&req, &e);
        }
        let Some(parsed) = self.0.commands.parse(target, data) else {
            return;
        };
        let cmd = match parsed {
            Ok(c) => c,
            Err(e) => return self.0.error(&req, &e),
        };
        let desk = self.0.clone();
        let req = Arc::new(req);
        let sent = req.clone();
        if let Err(e) = Timer::after(Duration::ZERO, Pool::Task, move || desk.run(&sent, cmd)) {
            self.0
                .error(&req, &format!("cannot schedule the command: {e}"));
        }
    }
}

/// A command as received: its request id and its text (target and data).
struct Request {
    id: String,
    text: String,
}

impl<C: Commands> Desk<C> {
    fn run(&self, req: &Request, cmd: C::Command) {
        let verb = C::verb(&cmd);
        match self.commands.run(cmd) {
            Ok(Answer { summary, mut body }) => {
                if !body.is_object() {
                    body = json!({ "answer": body });
                }
                body["ok"] = json!(true);
                let parts = self.write(req, body);
                log::info!(
                    "ctl {verb}: {summary} (answer {} in {}_ctl.log{})",
                    req.id,
                    self.plugin,
                    if parts > 1 {
                        format!(", {parts} lines")
                    } else {
                        String::new()
                    }
                );
            }
            Err(e) => self.error(req, &e),
        }
    }

    fn error(&self, req: &Request, error: &str) {
        self.write(req, json!({ "ok": false, "error": error }));
        log::error!(
            "ctl: {error} (command {}, request {})",
            shorten(&req.text),
            req.id
        );
    }

    /// Writes the answer's lines; returns how many there are. A line ATS
    /// refuses is reported in diags.log (the reader would wait for it).
    fn write(&self, req: &Request, body: Value) -> usize {
        let Some(log) = &self.log else { return 0 };
        let lines = parts::lines(&req.id, &req.text, body, crate::textlog::max_line());
        let n = lines.len();
        for (i, line) in lines.iter().enumerate() {
            if let Err(e) = log.write(line) {
                log::error!(
                    "ctl: part {}/{n} of answer {} (command {}) was not written to {}_ctl.log: {e}",
                    i + 1,
                    req.id,
                    shorten(&req.text),
                    self.plugin
                );
            }
        }
        log.flush();
        n
    }
}
