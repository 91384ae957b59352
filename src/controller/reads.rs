//! Reads a decision or a driver call needs: from the API beyond the stores (the live claim or
//! PV, the selected node for topology, secrets, whose contents are never logged), and the
//! lookups in the stores and the journal that several passes share (a claim's StorageClass,
//! the default class, whether its intent is journaled, and the provisioning decision's inputs
//! through `provision::inputs::Lookup`, the rules `explain` shares).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::{Controller, SyncError};
use crate::binder::matching::default_class;
use crate::cluster::objects::SecretError;
use crate::csi::v1 as csi;
use crate::model::ClaimExt;
use crate::provision::claim;
use crate::provision::plan::Plan;
use crate::provision::topology::{self, ClusterNodes, SelectedNode, TopologyError};

impl Controller {
    /// The claim as the API has it now; None if it is gone or was replaced by another UID.
    pub(super) async fn live_claim(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<Option<PersistentVolumeClaim>, SyncError> {
        let live = self
            .cluster
            .claims
            .get(claim.namespace().as_deref(), &claim.name_any())
            .await
            .map_err(|e| SyncError::api("read the claim", e))?;
        Ok(live.filter(|l| l.metadata.uid == claim.metadata.uid))
    }

    /// The PV from the store, or from the API when the store has not seen it yet.
    pub(super) async fn live_volume_if_missing(
        &self,
        name: &str,
    ) -> Result<Option<PersistentVolume>, SyncError> {
        if let Some(pv) = self.volume_in_store(name) {
            return Ok(Some((*pv).clone()));
        }
        self.cluster
            .volumes
            .get(None, name)
            .await
            .map_err(|e| SyncError::api("read the PersistentVolume", e))
    }

    /// Accessibility requirements, when the driver wants them: from the selected node's Node
    /// and CSINode (read live), every node's (from the stores), and the class's
    /// allowedTopologies.
    pub(super) async fn topology(
        &self,
        claim: &PersistentVolumeClaim,
        plan: &Plan,
    ) -> Result<Result<Option<csi::TopologyRequirement>, TopologyError>, SyncError> {
        if !self.features.topology {
            return Ok(Ok(None));
        }
        let (csi_nodes, nodes) = match &self.stores.topology {
            Some(t) => (t.csi_nodes.state(), t.nodes.state()),
            None => (Vec::new(), Vec::new()),
        };
        let cluster = ClusterNodes {
            csi_nodes: csi_nodes.iter().map(|c| &**c).collect(),
            node_labels: nodes
                .iter()
                .filter_map(|n| Some((n.metadata.name.as_deref()?, n.metadata.labels.as_ref()?)))
                .collect(),
        };
        let decide = |selected| {
            topology::requirement(
                &plan.class,
                &self.settings.driver,
                &claim.name_any(),
                selected,
                &cluster,
                self.settings.topology,
            )
        };
        let Some(name) = claim::selected_node(claim) else {
            return Ok(decide(None));
        };
        // Both at once: the node's labels and the driver's topology keys on it.
        let (node, csi_node) = tokio::join!(
            self.cluster.nodes.get(None, name),
            self.cluster.csi_nodes.get(None, name)
        );
        let node = node.map_err(|e| SyncError::api("read the selected node", e))?;
        let csi_node =
            csi_node.map_err(|e| SyncError::api("read the selected node's CSINode", e))?;
        if node.is_none() || csi_node.is_none() {
            return Ok(Err(TopologyError::NodeGone(name.to_string())));
        }
        Ok(decide(Some(SelectedNode { name, node: node.as_ref(), csi_node: csi_node.as_ref() })))
    }

    /// The contents of the class's provisioner secret, or a message for the user. Never logged.
    pub(super) async fn provisioner_secrets(
        &self,
        plan: &Plan,
    ) -> Result<HashMap<String, String>, SecretError> {
        let Some(secret) = &plan.provisioner_secret else {
            return Ok(HashMap::new());
        };
        self.read_secret(&secret.namespace, &secret.name, "the StorageClass").await
    }

    pub(super) async fn read_secret(
        &self,
        namespace: &str,
        name: &str,
        named_by: &str,
    ) -> Result<HashMap<String, String>, SecretError> {
        crate::cluster::objects::read_secret(&*self.cluster.secrets, namespace, name, named_by)
            .await
    }

    /// The claim's intent is in the journal.
    pub(super) fn journaled(&self, claim: &PersistentVolumeClaim) -> bool {
        match (&self.switches.journal, claim.metadata.uid.as_deref()) {
            (Some(journal), Some(uid)) => journal.contains(uid),
            _ => false,
        }
    }

    /// The StorageClass the claim names, from the store.
    pub(super) fn class_of(&self, claim: &PersistentVolumeClaim) -> Option<Arc<StorageClass>> {
        let name = claim.class();
        if name.is_empty() {
            return None;
        }
        self.stores.classes.get(&ObjectRef::new(name))
    }

    /// The cluster's default class, for a claim that names no class (else None: the store is
    /// not read on every pass for it).
    pub(super) fn default_class_for(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Option<Arc<StorageClass>> {
        if !claim.names_no_class() {
            return None;
        }
        let classes = self.stores.classes.state();
        let name = default_class(classes.iter().map(|c| &**c))?.metadata.name.clone();
        classes.into_iter().find(|c| c.metadata.name == name)
    }
}

/// The provisioning decision's inputs, from the stores (`provision::inputs`).
impl crate::provision::inputs::Lookup for Controller {
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.stores.classes.get(&ObjectRef::new(name))
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volume_in_store(name)
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.stores.claims.get(&ObjectRef::new(name).within(namespace))
    }

    fn attributes_class(
        &self,
        name: &str,
    ) -> Option<Arc<k8s_openapi::api::storage::v1::VolumeAttributesClass>> {
        self.stores.attributes_classes.as_ref()?.get(&ObjectRef::new(name))
    }

    fn binder_takes_only(&self, claim: &PersistentVolumeClaim, volume: &str) -> bool {
        crate::binder::matching::ClaimFacts::of(claim)
            .is_ok_and(|facts| self.index().takes_only(&facts, volume))
    }
}
