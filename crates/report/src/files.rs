//! Writing what virtperf outputs: whole files or nothing, and stdout that a closed pipe ends
//! quietly. The orchestrator's own files (keys, images, the ledger) use them too
//! (`virtperf/src/host` re-exports them).

use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same directory and a rename: a
/// reader never sees half a file, a failure leaves nothing behind.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let res = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Writes `bytes` to stdout. A reader that went away (`virtperf report | head`) ends the output
/// quietly, as for any Unix tool, instead of the panic `print!` raises; SIGPIPE stays ignored,
/// because the orchestrator writes to agents' pipes and must survive one closing.
pub fn write_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}
