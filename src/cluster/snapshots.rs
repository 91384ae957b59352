//! VolumeSnapshots as a restore reads them: read live (as csi-provisioner reads them: snapshots
//! are few and not watched), with their bound content. Shared by the controller and `explain`.

use kube::api::{Api, ApiResource, DynamicObject};

use crate::provision::snapshot::{self, Snapshot, SnapshotLookup};
use crate::provision::source::SNAPSHOT_GROUP;

/// The snapshot API's resource of `kind` (`plural`), v1.
pub fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: SNAPSHOT_GROUP.into(),
        version: "v1".into(),
        api_version: format!("{SNAPSHOT_GROUP}/v1"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// A VolumeSnapshot as the API answered it, parsed.
pub fn parsed(object: &DynamicObject) -> Snapshot {
    snapshot::parse_snapshot(&serde_json::to_value(object).unwrap_or_default())
}

/// VolumeSnapshot `namespace`/`name` with its bound content. A refused read is `Unreadable`
/// (the user must act: RBAC); a 404 is `Missing`, or `Unserved` when discovery shows the
/// cluster has no snapshot API. Other failures: what was being read, and the error.
pub async fn lookup(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<SnapshotLookup, (&'static str, kube::Error)> {
    let refused = |e: &kube::Error| matches!(e, kube::Error::Api(s) if s.code == 403);
    let snapshots: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &resource("VolumeSnapshot", "volumesnapshots"),
    );
    let found = match snapshots.get_opt(name).await {
        Ok(found) => found,
        Err(e) if refused(&e) => return Ok(SnapshotLookup::Unreadable(e.to_string())),
        Err(e) => return Err(("read the VolumeSnapshot", e)),
    };
    let Some(found) = found else {
        // A 404 is also what a cluster without the CRDs answers: ask discovery which.
        let served = super::serves(client, &format!("{SNAPSHOT_GROUP}/v1"), "VolumeSnapshot")
            .await
            .map_err(|e| ("discover the snapshot API", e))?;
        return Ok(if served { SnapshotLookup::Missing } else { SnapshotLookup::Unserved });
    };
    let mut parsed = parsed(&found);
    if let Some(content_name) = parsed.content_name.clone() {
        let contents: Api<DynamicObject> = Api::all_with(
            client.clone(),
            &resource("VolumeSnapshotContent", "volumesnapshotcontents"),
        );
        parsed.content = match contents.get_opt(&content_name).await {
            Ok(content) => content
                .map(|c| snapshot::parse_content(&serde_json::to_value(&c).unwrap_or_default())),
            Err(e) if refused(&e) => return Ok(SnapshotLookup::Unreadable(e.to_string())),
            Err(e) => return Err(("read the VolumeSnapshotContent", e)),
        };
    }
    Ok(SnapshotLookup::Found(Box::new(parsed)))
}
