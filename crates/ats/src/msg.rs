//! `traffic_ctl plugin msg TAG DATA`: ATS's lifecycle message hook.
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
//! management thread, run on a task thread, answer as one JSON object per
//! line in `<plugin>_ctl.log` (the hook has no reply channel) with a
//! one-line summary in diags.log.

use std::ffi::{c_int, c_void, CStr};
use std::sync::Arc;
use std::time::Duration;

use limits::quote::shorten;
use serde_json::{json, Value};

use crate::sched::{Pool, Timer};
use crate::textlog::TextLog;
use crate::{guard, log::to_cstring, sys};

/// Handles plugin messages.
pub trait MsgHandler: Send + Sync + 'static {
    /// One message: its tag (`rate_limit`, `rate_limit.show`, …, for every
    /// plugin's tags alike: ignore others) and its data.
    fn on_msg(&self, tag: &str, data: &[u8]);
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
    let mut idx: c_int = -1;
    // SAFETY: valid C string and out pointer; description out may be null.
    let found = unsafe {
        sys::TSUserArgIndexNameLookup(
            sys::TSUserArgType::TS_USER_ARGS_GLB,
            cname.as_ptr(),
            &mut idx,
            std::ptr::null_mut(),
        )
    };
    if found == sys::TSReturnCode::TS_SUCCESS && idx >= 0 {
        return Ok(false);
    }
    // SAFETY: valid C strings and out pointer.
    let rc = unsafe {
        sys::TSUserArgIndexReserve(
            sys::TSUserArgType::TS_USER_ARGS_GLB,
            cname.as_ptr(),
            cname.as_ptr(),
            &mut idx,
        )
    };
    if rc != sys::TSReturnCode::TS_SUCCESS {
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
            // SAFETY: tag is a NUL-terminated string owned by ATS for the call.
            let tag = (!msg.tag.is_null()).then(|| unsafe { CStr::from_ptr(msg.tag) });
            let Some(tag) = tag.and_then(|t| t.to_str().ok()) else {
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
            handler.on_msg(tag, data);
        },
    );
    0
}

/// A plugin's commands, for [`serve`].
pub trait Commands: Send + Sync + 'static {
    type Command: Send + 'static;
    /// The command in a message; `None` if the tag is not this plugin's.
    /// Runs on the management thread: parse only.
    fn parse(&self, tag: &str, data: &[u8]) -> Option<Result<Self::Command, String>>;
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

impl<C: Commands> MsgHandler for Served<C> {
    fn on_msg(&self, tag: &str, data: &[u8]) {
        let Some(parsed) = self.0.commands.parse(tag, data) else {
            return;
        };
        let text = shorten(&format!("{tag} {}", String::from_utf8_lossy(data)));
        let cmd = match parsed {
            Ok(c) => c,
            Err(e) => return self.0.error(&text, &e),
        };
        let (desk, sent) = (self.0.clone(), text.clone());
        if let Err(e) = Timer::after(Duration::ZERO, Pool::Task, move || desk.run(&sent, cmd)) {
            self.0
                .error(&text, &format!("cannot schedule the command: {e}"));
        }
    }
}

impl<C: Commands> Desk<C> {
    fn run(&self, text: &str, cmd: C::Command) {
        let verb = C::verb(&cmd);
        match self.commands.run(cmd) {
            Ok(Answer { summary, mut body }) => {
                if !body.is_object() {
                    body = json!({ "answer": body });
                }
                body["command"] = json!(text);
                body["ok"] = json!(true);
                self.write(&body);
                log::info!("ctl {verb}: {summary} (answer in {}_ctl.log)", self.plugin);
            }
            Err(e) => self.error(text, &e),
        }
    }

    fn error(&self, text: &str, error: &str) {
        self.write(&json!({ "command": text, "ok": false, "error": error }));
        log::error!("ctl: {error} (command {text})");
    }

    fn write(&self, v: &Value) {
        if let Some(log) = &self.log {
            log.write(&v.to_string());
            log.flush();
        }
    }
}
