//! `csi-pv-controller explain <namespace>/<claim>`.

use anyhow::Context;

use csi_pv_controller::config::Config;
use csi_pv_controller::model::ClaimExt;

/// `explain <namespace>/<claim>`: one look at the cluster, the binder's decision, printed.
pub async fn run(config: &Config, target: &str) -> anyhow::Result<()> {
    use csi_pv_controller::binder::{VolumeIndex, claim::ClaimView, matching};
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::api::{Api, ListParams};

    let (namespace, name) = target
        .split_once('/')
        .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
        .context("expected <namespace>/<claim>")?;
    let client = super::client(config, "explain").await?;
    let claim = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("cannot read claim {target}"))?;
    let classes = Api::<StorageClass>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("cannot list StorageClasses")?
        .items;
    let mut volumes = VolumeIndex::default();
    for pv in Api::<PersistentVolume>::all(client)
        .list(&ListParams::default())
        .await
        .context("cannot list PersistentVolumes")?
        .items
    {
        volumes.upsert(&pv);
    }
    let class_name = claim.class();
    let class = classes.iter().find(|c| c.metadata.name.as_deref() == Some(class_name));
    let default = matching::default_class(classes.iter()).and_then(|c| c.metadata.name.clone());
    let view = ClaimView { class, default_class: default.as_deref(), volumes: &volumes };
    print!("{}", csi_pv_controller::binder::explain::explain(&claim, &view));
    Ok(())
}
