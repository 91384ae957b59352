//! `csi-pv-controller reconcile <driver>`: one volume reconciler pass, printed. Changes nothing:
//! deleting an orphan takes two passes a grace apart, which only the running controller makes.

use anyhow::Context;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams};

use csi_pv_controller::config::Config;
use csi_pv_controller::csi::{ControllerCapability, CsiClient};
use csi_pv_controller::inventory::{self, State, reconciler};

pub async fn run(config: &Config, driver: &str, output: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        matches!(output, "table" | "json"),
        "--output is table or json, not {output:?}"
    );
    let csi = CsiClient::new(&config.csi_address, config.timeout)?;
    csi.wait_ready(config.connect_limit()).await?;
    let info = csi.discover().await.context("cannot read the CSI driver's identity")?;
    anyhow::ensure!(
        info.name == driver,
        "the driver at --csi-address is {}, not {driver}",
        info.name
    );
    anyhow::ensure!(
        info.controller.has(ControllerCapability::ListVolumes),
        "the driver {driver} does not list its volumes (no LIST_VOLUMES capability): there is nothing to reconcile against"
    );
    let client = super::client(config, "reconcile").await?;
    let began = Time(k8s_openapi::jiff::Timestamp::now());
    let listing =
        reconciler::list(&csi, config.reconcile_page_size, config.reconcile_page_interval)
            .await
            .context("ListVolumes failed")?;
    let pvs = Api::<PersistentVolume>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list PersistentVolumes")?
        .items;
    let claims = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list PersistentVolumeClaims")?
        .items;
    let journaled = match &config.intent_journal {
        Some(dir) => csi_pv_controller::journal::intents_in(dir)
            .context("cannot read the directory of --intent-journal")?,
        None => Vec::new(),
    };
    let classes = Api::<StorageClass>::all(client)
        .list(&ListParams::default())
        .await
        .context("cannot list StorageClasses")?
        .items;
    let naming = config.volume_naming();
    let journaled = journaled.iter().map(|c| c.as_ref());
    let known = inventory::known(&pvs, &claims, journaled, &classes, (driver, &naming));
    let census = inventory::census(
        &listing.volumes,
        listing.complete,
        &pvs,
        driver,
        &known,
        &naming,
        &began,
    );
    if output == "json" {
        println!("{}", serde_json::to_string_pretty(&as_json(&census))?);
        return Ok(());
    }
    println!("{:<10} {:<48} {:>14}  NOTE", "STATE", "VOLUME", "BYTES");
    for (listed, verdict) in &census.verdicts {
        let note = match (verdict.state, &verdict.pv, &verdict.name) {
            (State::Adopted, Some(pv), _) => format!("PV {pv}"),
            (State::InFlight, _, Some(name)) => format!("{name}: its claim or intent exists"),
            (State::Orphaned, _, Some(name)) => format!(
                "{name}: no claim, PV or intent; deleted with --reconcile-delete-orphans after --reconcile-grace"
            ),
            (State::Retained, _, _) => {
                "no PV records it now, but a Retain PV did, or may have (a class of the driver retains); never deleted".to_string()
            }
            _ => "not named by this controller's prefix; never deleted".to_string(),
        };
        println!(
            "{:<10} {:<48} {:>14}  {note}",
            verdict.state.as_str(),
            listed.id,
            listed.capacity_bytes
        );
    }
    match &census.lost {
        Some(lost) => {
            for pv in lost {
                println!(
                    "{:<10} {:<48} {:>14}  PV whose volume the driver does not list",
                    "lost", pv, "-"
                );
            }
        }
        None => println!("(the driver's listing may be incomplete: lost PVs not judged)"),
    }
    let counts: Vec<String> = State::ALL
        .iter()
        .map(|s| format!("{} {}", census.count(*s), s.as_str()))
        .chain(census.lost.as_ref().map(|l| format!("{} lost", l.len())))
        .collect();
    println!("{} volumes in {} pages: {}", census.verdicts.len(), listing.pages, counts.join(", "));
    Ok(())
}

fn as_json(census: &inventory::Census) -> serde_json::Value {
    let volumes: Vec<serde_json::Value> = census
        .verdicts
        .iter()
        .map(|(listed, v)| {
            serde_json::json!({
                "volumeId": listed.id,
                "capacityBytes": listed.capacity_bytes,
                "state": v.state.as_str(),
                "name": v.name,
                "persistentVolume": v.pv,
            })
        })
        .collect();
    // Lost PVs are judged only on a complete listing.
    serde_json::json!({"complete": census.lost.is_some(), "volumes": volumes, "lostPersistentVolumes": census.lost})
}
