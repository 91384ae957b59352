//! Named places where a crash leaves state that a restart must recognise: the tests stop the
//! process exactly there, instead of hoping a random kill lands there.
//!
//! Built with the `failpoints` feature (tests only), `CSI_PV_CONTROLLER_CRASH_AT=<name>` makes
//! the process abort when it reaches that point: no destructor runs and nothing is flushed, as
//! after kill -9. Without the feature a crash point is nothing at all.

/// After the decision to provision, before the intent is recorded.
pub const BEFORE_INTENT: &str = "provision-before-intent";
/// Intent recorded, CreateVolume not sent.
pub const BEFORE_CREATE: &str = "provision-before-create-volume";
/// CreateVolume answered, the PV not created.
pub const AFTER_CREATE: &str = "provision-after-create-volume";
/// PV created, the intent not removed (nor the binding written).
pub const AFTER_PV: &str = "provision-after-pv";
/// DeleteVolume not sent.
pub const BEFORE_DELETE: &str = "delete-before-delete-volume";
/// DeleteVolume answered, the PV not deleted.
pub const AFTER_DELETE: &str = "delete-after-delete-volume";
/// ControllerExpandVolume answered, the PV's capacity not recorded.
pub const AFTER_EXPAND: &str = "expand-after-expand-volume";
/// The PV's new capacity recorded, the claim's status not.
pub const AFTER_EXPAND_PV: &str = "expand-after-pv";

/// Every crash point, for the tests to go through.
pub const ALL: [&str; 8] = [
    BEFORE_INTENT,
    BEFORE_CREATE,
    AFTER_CREATE,
    AFTER_PV,
    BEFORE_DELETE,
    AFTER_DELETE,
    AFTER_EXPAND,
    AFTER_EXPAND_PV,
];

/// The environment variable that names the point to crash at.
pub const ENV: &str = "CSI_PV_CONTROLLER_CRASH_AT";

#[cfg(feature = "failpoints")]
pub fn here(point: &str) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if AT.get_or_init(|| std::env::var(ENV).ok()).as_deref() == Some(point) {
        eprintln!("crash point {point}: aborting");
        std::process::abort();
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn here(_: &str) {}

/// The environment variable that names claims whose pass panics: a claim pass over a claim whose
/// name contains its value panics, as a bug that a claim's input trips would (the tests of the
/// panic policy, runtime/panics.rs).
pub const PANIC_ENV: &str = "CSI_PV_CONTROLLER_PANIC_ON_CLAIM";

#[cfg(feature = "failpoints")]
pub fn panic_on_claim(name: &str) {
    static PART: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    if let Some(part) = PART.get_or_init(|| std::env::var(PANIC_ENV).ok()) {
        assert!(!name.contains(part.as_str()), "planted panic on claim {name}");
    }
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn panic_on_claim(_: &str) {}
