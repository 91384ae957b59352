//! The panic policy: a panic inside one pass is that pass's failure, not the process's.
//!
//! A pass runs inside [`contain`]: a panic there becomes [`Panicked`], which the worker treats as
//! a failed pass (a Warning Event on the object, an error line, `csi_pv_controller_panics_total`,
//! a retry with backoff) and then takes the next key. Without it, tokio ends the task that
//! panicked, its key stays "being worked on" for good and the process has one worker less, with
//! nothing on its probes. docs/operations.md says why containing beats exiting.

use std::cell::RefCell;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;

thread_local! {
    /// Where the last panic on this thread happened, set by the hook and taken by [`contain`]:
    /// the payload carries the message only.
    static LOCATION: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// What is kept of a panic message: enough to find the bug, never a wall of input.
const MESSAGE_LIMIT: usize = 300;

/// A panic caught inside one pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("internal error (a panic at {location}): {message}")]
pub struct Panicked {
    pub message: String,
    /// `file:line` of the panic, or "unknown".
    pub location: String,
}

/// Installs the process's panic hook: every panic is one error line, in the span of the pass it
/// happened in (so it names the object), and its place is kept for [`contain`]. Replaces the
/// default hook, whose plain stderr text the log format would not carry.
pub fn install_hook() {
    // The unit tests' harness shows a failed test's message through the hook it installed.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if cfg!(test) {
            previous(info);
        }
        let location = info
            .location()
            .map_or_else(|| "unknown".to_string(), |l| format!("{}:{}", l.file(), l.line()));
        let message = bounded(payload_text(info.payload()));
        tracing::error!(%location, %message, "panic");
        LOCATION.with(|l| *l.borrow_mut() = Some(location));
    }));
}

/// Runs `pass`, turning a panic inside it into [`Panicked`].
pub async fn contain<F: Future>(pass: F) -> Result<F::Output, Panicked> {
    AssertUnwindSafe(pass).catch_unwind().await.map_err(|payload| Panicked {
        message: bounded(payload_text(payload.as_ref())),
        location: LOCATION.with(|l| l.borrow_mut().take()).unwrap_or_else(|| "unknown".into()),
    })
}

/// As [`contain`], for a pass with no object to tell: a panic is counted
/// (`csi_pv_controller_panics_total{pass}`) and logged, and gives None; the pass comes again at
/// its next turn.
pub async fn contain_or_log<F: Future>(pass: &'static str, work: F) -> Option<F::Output> {
    match contain(work).await {
        Ok(output) => Some(output),
        Err(panicked) => {
            crate::metrics::metrics().panicked(pass);
            tracing::error!(pass, error = %panicked, "a pass panicked; it comes again at its next turn");
            None
        }
    }
}

fn payload_text(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a panic with no message")
}

/// At most [`MESSAGE_LIMIT`] bytes, cut on a character boundary.
fn bounded(text: &str) -> String {
    if text.len() <= MESSAGE_LIMIT {
        return text.to_string();
    }
    let cut = (0..=MESSAGE_LIMIT).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    format!("{}…", text.get(..cut).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_is_an_error_with_its_message_and_place() {
        install_hook();
        let caught = contain(async { panic!("slice {} out of range", 16) }).await.unwrap_err();
        assert_eq!(caught.message, "slice 16 out of range");
        assert!(caught.location.starts_with("src/runtime/panics.rs:"), "{}", caught.location);
        let plain = contain(async { std::panic::panic_any(7_u8) }).await.unwrap_err();
        assert_eq!(plain.message, "a panic with no message");
        assert_eq!(contain(async { 5 }).await, Ok(5));
    }

    #[tokio::test]
    async fn a_pass_with_no_object_is_counted_and_gives_none() {
        install_hook();
        let counted = || {
            let text = crate::metrics::metrics().encode();
            text.lines()
                .find(|l| l.starts_with("csi_pv_controller_panics_total{pass=\"test-pass\"}"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let before = counted();
        assert_eq!(contain_or_log("test-pass", async { panic!("planted") }).await, None::<()>);
        assert_eq!(counted(), before + 1.0);
        assert_eq!(contain_or_log("test-pass", async { 3 }).await, Some(3));
        assert_eq!(counted(), before + 1.0);
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let long = "é".repeat(400);
        let cut = bounded(&long);
        assert!(cut.len() <= MESSAGE_LIMIT + "…".len(), "{}", cut.len());
        assert!(cut.ends_with('…'));
        assert_eq!(bounded("short"), "short");
    }
}
