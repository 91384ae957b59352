//! The executor on an apiserver and a driver in memory, on paused time: the rules that keep a
//! volume from being lost or orphaned, each in a test that runs in milliseconds. The
//! integration suites stay the proof on the wire.

mod executor;
mod fake_api;
mod fake_driver;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{self, ObjectRef, store::Writer};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::{ClaimKey, Controller, Intake, Switches};
use crate::binder::Binder;
use crate::cluster::Stores;
use crate::cluster::client::ApiClients;
use crate::cluster::stores::Held;
use crate::csi::{ControllerCapabilities, DriverInfo, PluginCapabilities};
use crate::fixtures::{DRIVER, settings};
use crate::model::compact::Compact;
use crate::runtime::queue::Backoff;
use fake_api::FakeApi;
use fake_driver::FakeDriver;

pub const CLAIMS: &str = "/api/v1/namespaces/ns/persistentvolumeclaims";
pub const VOLUMES: &str = "/api/v1/persistentvolumes";
pub const CLASSES: &str = "/apis/storage.k8s.io/v1/storageclasses";

/// The controller between the fake API and the fake driver, with stores that see the API only
/// when `sync` says so (the watch, held back at will).
struct Bench {
    api: FakeApi,
    driver: Arc<FakeDriver>,
    controller: Arc<Controller>,
    claims: Writer<Compact<PersistentVolumeClaim>>,
    volumes: Writer<Compact<PersistentVolume>>,
    classes: Writer<StorageClass>,
    /// The VolumeAttachments the controller sees (a driver that attaches).
    attachments: Writer<k8s_openapi::api::storage::v1::VolumeAttachment>,
}

/// Everything of one kind the fake holds, as typed objects.
fn typed<K: DeserializeOwned>(api: &FakeApi, collection: &str) -> Vec<K> {
    let all = api.state.lock().unwrap().all(collection);
    all.into_iter().map(|v| serde_json::from_value(v).expect("a stored object")).collect()
}

fn relist<K>(writer: &mut Writer<K>, objects: Vec<K>)
where
    K: kube::runtime::reflector::Lookup + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    writer.apply_watcher_event(&watcher::Event::Init);
    for object in objects {
        writer.apply_watcher_event(&watcher::Event::InitApply(object));
    }
    writer.apply_watcher_event(&watcher::Event::InitDone);
}

impl Bench {
    /// A controller that binds (`--binder=driver`), for `DRIVER`, with class `gold` of it.
    fn new() -> Bench {
        Bench::with(|_| {})
    }

    /// As `new`, with the switches changed by `change`.
    fn with(change: impl FnOnce(&mut Switches)) -> Bench {
        let api = FakeApi::default();
        api.state
            .lock()
            .unwrap()
            .create(
                CLASSES,
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                       "metadata": {"name": "gold"}, "provisioner": DRIVER,
                       "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}),
            )
            .expect("a new class");
        let driver = Arc::new(FakeDriver::new(api.clone(), (CLAIMS.into(), "c".into())));
        let (claims_store, claims) = reflector::store();
        let (volumes_store, volumes) = reflector::store();
        let (classes_store, classes) = reflector::store();
        let (attachments_store, attachments) = reflector::store();
        let stores = Stores {
            claims: Held::new(claims_store),
            volumes: Held::new(volumes_store),
            classes: classes_store,
            attachments: Some(attachments_store),
            topology: None,
            attributes_classes: None,
            watches: Arc::default(),
        };
        let info = DriverInfo {
            name: DRIVER.into(),
            vendor_version: "1".into(),
            plugin: PluginCapabilities::default(),
            // Grows volumes in its controller service, as most drivers do.
            controller: ControllerCapabilities::from_response(&[
                crate::csi::v1::ControllerServiceCapability {
                    r#type: Some(crate::csi::v1::controller_service_capability::Type::Rpc(
                        crate::csi::v1::controller_service_capability::Rpc {
                            r#type: crate::csi::ControllerCapability::ExpandVolume as i32,
                        },
                    )),
                },
            ]),
            node_expansion: false,
        };
        let backoff = Backoff { start: Duration::from_secs(1), max: Duration::from_secs(300) };
        let mut switches = Switches {
            binder: Binder::Driver,
            handle_volume_inuse_error: true,
            gates: Default::default(),
            handover_grace: Duration::from_secs(60),
            journal: None,
            expansion_workers: 1,
            waiting_condition_after: Duration::from_secs(3600),
        };
        change(&mut switches);
        let controller = Controller::new(
            ApiClients::unlimited(api.client()),
            driver.clone(),
            stores,
            &info,
            settings(),
            Intake::new(backoff),
            switches,
        );
        let mut bench = Bench { api, driver, controller, claims, volumes, classes, attachments };
        relist(&mut bench.attachments, Vec::new());
        bench.sync();
        bench
    }

    /// The watch delivers: the stores and the PV index take the API's state.
    fn sync(&mut self) {
        let claims: Vec<PersistentVolumeClaim> = typed(&self.api, CLAIMS);
        relist(&mut self.claims, claims.iter().map(Compact::of).collect());
        relist(&mut self.classes, typed(&self.api, CLASSES));
        let volumes: Vec<PersistentVolume> = typed(&self.api, VOLUMES);
        for pv in &volumes {
            self.controller.index_volume(pv);
        }
        relist(&mut self.volumes, volumes.iter().map(Compact::of).collect());
    }

    fn create(&self, collection: &str, object: Value) -> Value {
        self.api.state.lock().unwrap().create(collection, object).expect("a new object")
    }

    fn get(&self, collection: &str, name: &str) -> Option<Value> {
        self.api.state.lock().unwrap().get(collection, name)
    }

    /// Every request that changed something so far.
    fn writes(&self) -> Vec<String> {
        self.api.state.lock().unwrap().writes.clone()
    }

    /// Every read of the API so far.
    fn reads(&self) -> Vec<String> {
        self.api.state.lock().unwrap().reads.clone()
    }

    fn events(&self) -> Vec<(String, String)> {
        self.api.state.lock().unwrap().events.clone()
    }

    /// One pass over claim `ns/c`.
    async fn claim_pass(&self) -> super::Outcome {
        let key: ClaimKey = ObjectRef::new("c").within("ns");
        let outcome = self.controller.sync_claim(&key).await.expect("a pass");
        // The events go out from their own tasks.
        tokio::time::sleep(Duration::from_millis(10)).await;
        outcome
    }
}

/// Claim `ns/c` of class gold, 1Gi, changed by `extra`.
fn claim(extra: Value) -> Value {
    let mut c = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    });
    crate::fixtures::merge(&mut c, extra);
    c
}

/// PV `pvc-u1` of `DRIVER`, provisioned for claim `ns/c` (Delete, 1Gi, handle `h-1`), changed
/// by `extra`.
fn volume(extra: Value) -> Value {
    let mut v = json!({"apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": "pvc-u1", "finalizers": [crate::model::names::FINALIZER_VOLUME],
                     "annotations": {"pv.kubernetes.io/provisioned-by": DRIVER}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "gold",
                 "csi": {"driver": DRIVER, "volumeHandle": "h-1"},
                 "claimRef": {"namespace": "ns", "name": "c", "uid": "u1"}}});
    crate::fixtures::merge(&mut v, extra);
    v
}
