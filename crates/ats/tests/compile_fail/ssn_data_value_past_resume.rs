// An `SsnData` value must not outlive `SsnHook::resume`: at SSN_CLOSE,
// resuming frees the session and drops the value (issue 8's use-after-free).
use ats::{Done, SsnHook, SsnData};

fn on_ssn(data: &SsnData<u32>, hook: SsnHook<'_>) -> (Option<u32>, Done) {
    let v = data.get(hook.ssn());
    let done = hook.resume();
    (v.copied(), done)
}

fn main() {}
