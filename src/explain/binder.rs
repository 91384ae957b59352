//! The binder's part of `explain`: what the binder would do with a claim, and why each PV was
//! or was not chosen, from the same decision code the controller runs.

use crate::model::{ClaimExt, ClaimPhase, VolumeExt};
use std::fmt::Write;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

use crate::binder::claim::{self, ClaimStep, ClaimView};
use crate::binder::matching::{ClaimFacts, Verdict, delay_binding, modes_key};

/// The report, as text for a terminal.
pub fn explain(claim: &PersistentVolumeClaim, view: &ClaimView<'_>) -> String {
    let mut out = String::new();
    let key = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    );
    let phase = claim.phase().unwrap_or(ClaimPhase::Pending).as_str();
    let _ = writeln!(out, "claim {key}: phase {phase}");
    let step = claim::decide(claim, view);
    let _ = writeln!(out, "decision: {}", describe(&step, claim));
    if let Some(named) = claim.named_volume() {
        // The binder looks at the PV the claim names and no other: a search would list PVs
        // that play no part, and judge the claim's own PV by rules only a search applies.
        let _ = writeln!(out, "names PersistentVolume {named}: no other PV is considered");
        return out;
    }

    let facts = match ClaimFacts::of(claim) {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(out, "cannot match: {e}");
            return out;
        }
    };
    let modes: Vec<String> = facts.modes.iter().cloned().collect();
    let class_mode =
        view.class.and_then(|c| c.volume_binding_mode.clone()).unwrap_or_else(|| "-".into());
    let _ = writeln!(
        out,
        "asks for: {} bytes, access modes [{}], volumeMode {}, class {:?} (binding mode {}), volumeAttributesClass {:?}",
        facts.request,
        modes_key(&modes),
        facts.volume_mode,
        facts.class,
        class_mode,
        facts.attributes_class
    );
    let delay = delay_binding(claim, view.class).unwrap_or(false);
    let groups = view.volumes.groups(&facts);
    let _ = writeln!(
        out,
        "access-mode groups searched, in order: {}",
        if groups.is_empty() {
            "none (no PV has these modes)".to_string()
        } else {
            groups.iter().map(|g| format!("[{g}]")).collect::<Vec<_>>().join(" ")
        }
    );
    let chosen = view.volumes.best_match(&facts, delay);
    let chosen_name = chosen.as_ref().and_then(|pv| pv.metadata.name.clone());
    let verdicts = view.volumes.verdicts(&facts, delay);
    let _ = writeln!(out, "persistent volumes ({}):", verdicts.len());
    for (pv, verdict) in verdicts {
        let name = pv.metadata.name.clone().unwrap_or_default();
        let line = match verdict {
            _ if Some(&name) == chosen_name.as_ref() => "chosen".to_string(),
            Verdict::PreBound => "pre-bound to this claim, but another PV was chosen first".into(),
            Verdict::Candidate => {
                "fits, but the chosen PV is smaller or in an earlier access-mode group".into()
            }
            Verdict::Rejected(r) => format!("rejected: {}", r.describe(&facts, &pv)),
        };
        let _ = writeln!(out, "  {name}: {line}");
    }
    out
}

fn describe(step: &ClaimStep, claim: &PersistentVolumeClaim) -> String {
    match step {
        ClaimStep::None => "nothing to do".into(),
        // Bound, and the PV records it: the binder's pass only checks the binding.
        ClaimStep::Bind(pv) if claim.is_bound() && pv.bound_to(claim) => {
            format!("nothing to do: bound to PersistentVolume {}", pv.name())
        }
        ClaimStep::Bind(pv) => format!(
            "bind to PersistentVolume {}",
            pv.metadata.name.as_deref().unwrap_or_default()
        ),
        ClaimStep::Pending(Some(n)) => format!("stay Pending: {} ({})", n.message, n.reason),
        ClaimStep::WaitForConsumer => {
            "stay Pending: WaitForFirstConsumer, until the scheduler picks a node for a pod that uses it".into()
        }
        ClaimStep::Pending(None) => {
            "stay Pending: the PersistentVolume it names does not exist (yet)".into()
        }
        ClaimStep::Lost(n) => format!("Lost: {} ({})", n.message, n.reason),
        ClaimStep::AssignDefaultClass(c) => {
            format!("give it the default StorageClass {c:?}, then look again")
        }
        ClaimStep::Provision { provisioner } => {
            format!("no PersistentVolume matches: provision a new one through {provisioner:?}")
        }
        ClaimStep::CannotProvision(n) => format!("stay Pending: {}", n.message),
        ClaimStep::Refuse(n, e) => format!("refuse: {} ({e})", n.message),
        ClaimStep::Fail(e) => format!("cannot decide: {e}"),
    }
}
