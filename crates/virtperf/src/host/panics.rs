//! What virtperf does with a panic of its own (a bug): the thread's panic is caught where a trial
//! or a run can end cleanly (`trial::run`, `run::execute`), and this hook keeps where it happened
//! so that the failure stored and printed names the place, not only the message.
//!
//! And the faults tests set off on purpose: `VIRTPERF_FAILPOINTS=NAME=ACTION;…` configures the
//! `fail` crate's failpoints (`trial-body=panic`: a panic inside a trial, as a bug would make).
//! Unset, a failpoint costs one atomic load.

use std::sync::Mutex;

static LAST: Mutex<Option<String>> = Mutex::new(None);

/// Installs the hook: the default report on stderr (RUST_BACKTRACE applies), and the message
/// with its location kept for [`take_last`].
pub fn install_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        if let Ok(mut last) = LAST.lock() {
            *last = Some(format!("{msg}{at}"));
        }
        default(info);
    }));
}

/// The last panic's message and location (taken: the next call gets the next one), else the
/// payload's message alone.
pub fn take_last(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = LAST.lock().ok().and_then(|mut l| l.take()) {
        return s;
    }
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "(no message)".into())
}

/// The variable that sets failpoints (`trial-body=panic`; `fail`'s actions: panic, sleep(MS), off…).
pub const FAILPOINTS_VAR: &str = "VIRTPERF_FAILPOINTS";

/// Configures the failpoints [`FAILPOINTS_VAR`] names; what is wrong with it, else.
pub fn failpoints_from_env() -> Result<(), String> {
    let Ok(spec) = std::env::var(FAILPOINTS_VAR) else { return Ok(()) };
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, action) = item.split_once('=').ok_or_else(|| {
            format!("{FAILPOINTS_VAR}: `{item}` is not NAME=ACTION (e.g. trial-body=panic)")
        })?;
        fail::cfg(name.trim(), action.trim()).map_err(|e| format!("{FAILPOINTS_VAR}: `{item}`: {e}"))?;
    }
    Ok(())
}
