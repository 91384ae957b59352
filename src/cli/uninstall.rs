//! `csi-pv-controller uninstall <driver>`: the way back to csi-provisioner.

use anyhow::Context;

use csi_pv_controller::config::Config;
use csi_pv_controller::leader;

/// `uninstall <driver>`: our provisioning finalizer off every claim of the driver where that
/// is safe (provision/uninstall.rs), a report line per claim, and an error when any had to stay.
pub async fn run(config: &Config, driver: &str, force: bool, dry_run: bool) -> anyhow::Result<()> {
    use csi_pv_controller::model::names;
    use csi_pv_controller::provision::uninstall::{self, Verdict};
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use kube::ResourceExt;
    use kube::api::{Api, ListParams};

    let client = super::client(config, "uninstall").await?;
    // A replica that still leads could be in the middle of a CreateVolume.
    let namespace = leader::namespace(&config.leader_election_namespace);
    let lease_name = leader::lease_name(driver);
    let lease = Api::<Lease>::namespaced(client.clone(), &namespace)
        .get_opt(&lease_name)
        .await
        .with_context(|| format!("cannot read the Lease {namespace}/{lease_name}"))?;
    match lease.and_then(|l| l.spec) {
        Some(spec) if lease_is_current(&spec) => anyhow::bail!(
            "csi-pv-controller still runs for {driver}: {} holds the Lease {namespace}/{lease_name}; stop it first",
            spec.holder_identity.unwrap_or_default()
        ),
        Some(_) => {}
        None => tracing::warn!(
            "no Lease {namespace}/{lease_name}: make sure no csi-pv-controller runs for {driver} (without --leader-election none is visible)"
        ),
    }
    let objects =
        csi_pv_controller::cluster::objects::Cluster::kube(client.clone(), client.clone());
    let claims = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list PersistentVolumeClaims")?
        .items;
    let volumes = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list PersistentVolumes")?
        .items;
    let naming = config.volume_naming();
    let (mut removed, mut kept) = (0, 0);
    for claim in &claims {
        // Claims of other drivers are not ours to judge.
        if claim.annotations().get(names::ANN_STORAGE_PROVISIONER).map(String::as_str)
            != Some(driver)
        {
            continue;
        }
        let volume_name = naming.for_claim(claim);
        let Some(verdict) = uninstall::judge(claim, &volumes, &volume_name, force) else {
            continue;
        };
        let at = format!("{}/{}", claim.namespace().unwrap_or_default(), claim.name_any());
        match verdict {
            Verdict::Keep(why) => {
                kept += 1;
                println!("kept     {at}: {why}");
            }
            Verdict::Remove(why) => {
                removed += 1;
                println!("{}  {at}: {why}", if dry_run { "would remove" } else { "removed" });
                if dry_run {
                    continue;
                }
                // A claim gone meanwhile has lost the finalizer with it.
                csi_pv_controller::cluster::finalizers::drop_finalizer(
                    &*objects.claims,
                    claim,
                    names::FINALIZER_PROVISIONING,
                )
                .await
                .with_context(|| format!("cannot remove the finalizer from {at}"))?;
            }
        }
    }
    println!(
        "{removed} finalizer(s) {}, {kept} kept",
        if dry_run { "to remove" } else { "removed" }
    );
    anyhow::ensure!(kept == 0, "{kept} claim(s) keep the finalizer: see above");
    Ok(())
}

/// The Lease's holder renewed it less than its duration ago (by the wall clock: the holder's
/// renewTime against ours, the best an outside look can do).
fn lease_is_current(spec: &k8s_openapi::api::coordination::v1::LeaseSpec) -> bool {
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return !holder.is_empty();
    };
    let expires = renewed.0 + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(seconds));
    !holder.is_empty() && expires > k8s_openapi::jiff::Timestamp::now()
}
