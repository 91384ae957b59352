//! Fuzz targets: each takes bytes, makes of them what a user, an admin or a driver could send,
//! and runs a decision on it, checking what must hold whatever the input. A panic, or a broken
//! invariant (an `assert!` here), is a finding.
//!
//! The same functions run in two ways: `fuzz/` (cargo-fuzz, coverage-guided libFuzzer, `make
//! fuzz`) and the unit tests of `tests.rs` (the committed corpus, then seconds of random bytes
//! per target, in `make test`). Inputs are built from [`arbitrary::Unstructured`]: text is drawn
//! from `inputs::FRAGMENTS` (the spellings the code looks for) as often as made up.

use arbitrary::Unstructured;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use serde_json::{Value, json};

use crate::model::labels::{is_dns_label, is_dns_subdomain};
use crate::model::quantity;
use crate::provision::answer::{AfterCreate, after_create};
use crate::provision::parameters::SecretTemplate;
use crate::provision::plan::{Features, Plan, PlanFacts, build};
use crate::provision::secrets::{TemplateInput, resolve};
use crate::provision::settings::{Settings, TopologyOptions, VolumeNaming};

mod inputs;
mod migration;

#[cfg(test)]
mod tests;

use inputs::Draw;

/// A fuzz target: bytes in, a panic for a finding.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/` and the short run name them.
pub const TARGETS: [(&str, Target); 7] = [
    ("secret_template", secret_template),
    ("quantity", quantity),
    ("provision_plan", provision_plan),
    ("create_volume_answer", create_volume_answer),
    ("list_volumes", list_volumes),
    ("resize_and_modify", resize_and_modify),
    ("migration", migration),
];

pub use migration::migration;

/// A StorageClass secret template, expanded for a claim with made-up names and annotations:
/// never a panic; what it gives is a valid Secret name and namespace.
pub fn secret_template(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Ok(template) =
        (|| Ok::<_, arbitrary::Error>(SecretTemplate { name: u.text()?, namespace: u.text()? }))()
    else {
        return;
    };
    let annotations = u.map(4).unwrap_or_default();
    let (pv, pvc, ns) =
        (u.text().unwrap_or_default(), u.text().unwrap_or_default(), u.text().unwrap_or_default());
    let input = TemplateInput {
        pv_name: &pv,
        pvc_name: &pvc,
        pvc_namespace: &ns,
        pvc_annotations: &annotations,
    };
    if let Ok(secret) = resolve(&template, &input) {
        assert!(is_dns_subdomain(&secret.name), "{secret:?}");
        assert!(is_dns_label(&secret.namespace), "{secret:?}");
    }
}

/// A size as a claim or a driver writes it: never a panic; a value that parses is at most what
/// CSI can carry, and reads back the same once formatted.
pub fn quantity(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(bytes) = quantity::parse_bytes(&text) {
        assert!(bytes <= quantity::MAX_BYTES, "{text:?} gave {bytes}");
        let formatted = quantity::format_bytes(bytes);
        assert_eq!(quantity::parse_bytes(&formatted), Ok(bytes), "{text:?} as {formatted:?}");
    }
}

/// A claim and its class, every field a user or an admin writes made up (names, annotations,
/// labels, sizes, access and volume modes, data sources, selectors; parameters, secret
/// templates, mount options, allowed topologies): never a panic; a plan asks for at least what
/// the claim requests and names its volume.
pub fn provision_plan(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let (Some(claim), Some(class)) = (inputs::claim(&mut u), inputs::class(&mut u)) else {
        return;
    };
    let features = Features {
        clone: u.arbitrary().unwrap_or_default(),
        snapshot: u.arbitrary().unwrap_or_default(),
        topology: u.arbitrary().unwrap_or_default(),
        single_node_multi_writer: u.arbitrary().unwrap_or_default(),
        ..Features::default()
    };
    if let Ok(plan) = build(&claim, &class, &settings(), features, PlanFacts::default()) {
        assert!(!plan.volume_name.is_empty());
        let range = plan.request.capacity_range.unwrap_or_default();
        assert!(range.required_bytes >= 0 && range.limit_bytes >= 0, "{range:?}");
        assert!(range.limit_bytes == 0 || range.limit_bytes >= range.required_bytes, "{range:?}");
    }
}

/// What a driver answers to CreateVolume, every field made up (an empty or enormous ID, any
/// capacity, segments with any keys, a huge context): never a panic; a PV is recorded only
/// with the driver's ID as its handle, at least the requested size, and valid topology keys.
pub fn create_volume_answer(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let Some(answer) = inputs::volume(&mut u) else { return };
    let topology = u.arbitrary().unwrap_or_default();
    let Some(plan) = plain_plan(topology) else { return };
    if let AfterCreate::Record(pv) = after_create(&plan, Ok(&answer), topology, "id") {
        let spec = pv.spec.unwrap_or_default();
        let handle = spec.csi.map(|c| c.volume_handle).unwrap_or_default();
        assert!(!handle.is_empty() && handle == answer.volume_id, "{handle:?}");
        let size = spec.capacity.unwrap_or_default().get("storage").map(|q| q.0.clone());
        let bytes = size.as_deref().map(quantity::parse_bytes);
        assert!(
            matches!(bytes, Some(Ok(b)) if b >= u64::try_from(plan.requested_bytes).unwrap_or(0)),
            "{size:?}"
        );
        let terms = spec.node_affinity.and_then(|a| a.required).map(|r| r.node_selector_terms);
        for term in terms.unwrap_or_default() {
            for requirement in term.match_expressions.unwrap_or_default() {
                assert!(
                    crate::model::labels::is_qualified_name(&requirement.key),
                    "{requirement:?}"
                );
            }
        }
    }
}

/// ListVolumes pages as a driver hands them out (tokens that repeat, cycle, never end; pages
/// of any length): the pager ends within its bound of calls.
pub fn list_volumes(data: &[u8]) {
    use crate::inventory::paging::{MAX_PAGES, PageStep, Pager};
    let mut u = Unstructured::new(data);
    let page_size = u.int_in_range(-1..=20).unwrap_or(0);
    let mut pager = Pager::new(page_size);
    let mut calls = 0;
    loop {
        let returned: usize = u.int_in_range(0..=30).unwrap_or(0);
        // Few distinct tokens, so that repeats and cycles are common; a run of fresh ones when
        // the bytes run out, so that "never ends" is tried too.
        let next = if u.is_empty() {
            format!("fresh-{calls}")
        } else {
            ["", "a", "b", "c"][u.choose_index(4).unwrap_or(0)].to_string()
        };
        calls += 1;
        match pager.after(returned, &next) {
            PageStep::Done { .. } => break,
            PageStep::Next { max_entries, .. } => assert_eq!(max_entries, page_size.max(0)),
            PageStep::Whole => {}
        }
        assert!(calls <= MAX_PAGES + 1, "more than {MAX_PAGES} pages");
    }
}

/// A bound claim whose size and VolumeAttributesClass change, with every field the user, an
/// admin (the class's parameters and driver) or a driver (ControllerExpandVolume's capacity)
/// writes made up: never a panic; a grown size recorded is at least what was asked, and a
/// ControllerModifyVolume request carries the class's parameters and the PV's handle.
pub fn resize_and_modify(data: &[u8]) {
    use crate::model::copy::ClaimCopy;
    let mut u = Unstructured::new(data);
    let asked: u64 = u.arbitrary().unwrap_or_default();
    let capacity: i64 = u.arbitrary().unwrap_or_default();
    if let Ok(recorded) = crate::expand::answer(asked, capacity) {
        assert!(recorded >= asked, "{capacity} for {asked} recorded as {recorded}");
    }
    let Some((claim, pv, class)) = inputs::modify(&mut u) else { return };
    let now = std::time::Instant::now();
    let lookup = |name: &str| (class.metadata.name.as_deref() == Some(name)).then(|| class.clone());
    let _ = crate::modify::decide(
        &claim,
        &pv,
        inputs::DRIVER,
        lookup,
        "2026-01-01T00:00:00Z",
        (None, now),
        ClaimCopy::Live,
    );
    let _ = crate::modify::class_error(&class, inputs::DRIVER);
    let request = crate::modify::request(&claim, &pv, &class, u.arbitrary().unwrap_or_default());
    for (key, value) in class.parameters.iter().flatten() {
        assert_eq!(request.mutable_parameters.get(key), Some(value), "{key}");
    }
    assert_eq!(Some(request.volume_id.as_str()), crate::model::VolumeExt::csi_handle(&pv));
}

/// The settings of a sidecar with the flags' defaults.
fn settings() -> Settings {
    Settings {
        driver: inputs::DRIVER.into(),
        naming: VolumeNaming { prefix: "pvc".into(), uuid_length: None },
        default_fs_type: Some("ext4".into()),
        extra_create_metadata: true,
        controller_publish_readonly: false,
        identity: "id".into(),
        prevent_volume_mode_conversion: true,
        topology: TopologyOptions::default(),
        extra_modify_metadata: false,
    }
}

/// The plan of a plain 1Gi claim, to judge answers against.
fn plain_plan(topology: bool) -> Option<Plan> {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .ok()?;
    let class: StorageClass = serde_json::from_value(
        json!({"metadata": {"name": "gold"}, "provisioner": inputs::DRIVER}),
    )
    .ok()?;
    let features = Features { topology, ..Features::default() };
    build(&claim, &class, &settings(), features, PlanFacts::default()).ok()
}

/// JSON text of any value: how made-up objects reach the serde types the API client uses.
fn object<T: serde::de::DeserializeOwned>(value: Value) -> Option<T> {
    serde_json::from_value(value).ok()
}
