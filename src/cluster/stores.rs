//! One reflector per watched kind, feeding shared read-only stores.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{
    CSINode, StorageClass, VolumeAttachment, VolumeAttributesClass,
};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::warn;

pub use super::held::Held;
use super::held::{Compactable, object_key};
use crate::model::compact::Compact;
use crate::runtime::failing::Failing;

/// Read-only caches of the objects this sidecar decides on. Reads may be slightly stale; every
/// write is preconditioned on the resourceVersion it was decided from.
#[derive(Clone)]
pub struct Stores {
    /// Claims and PVs are held compact (model::compact) and read back whole.
    pub claims: Held<PersistentVolumeClaim>,
    pub volumes: Held<PersistentVolume>,
    pub classes: Store<StorageClass>,
    /// VolumeAttachments, watched when the driver attaches volumes (PUBLISH_UNPUBLISH_VOLUME):
    /// a volume still attached somewhere is never deleted.
    pub attachments: Option<Store<VolumeAttachment>>,
    /// CSINodes and the Nodes' metadata (labels), watched when the driver has topology
    /// (VOLUME_ACCESSIBILITY_CONSTRAINTS): the segments of every node the driver is on.
    pub topology: Option<TopologyStores>,
    /// VolumeAttributesClasses, watched when the driver modifies volumes (MODIFY_VOLUME).
    pub attributes_classes: Option<Store<VolumeAttributesClass>>,
    /// Whether each watch is keeping its store current.
    pub watches: Arc<WatchHealth>,
}

/// The stores topology-aware provisioning reads.
#[derive(Clone)]
pub struct TopologyStores {
    pub csi_nodes: Store<CSINode>,
    /// Only the metadata: a Node's status (images, conditions) is most of its size.
    pub nodes: Store<PartialObjectMeta<Node>>,
}

/// What the watches should cover beyond claims, PVs and classes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Watched {
    /// VolumeAttachments (the driver attaches volumes).
    pub attachments: bool,
    /// CSINodes and Node metadata (the driver has topology).
    pub topology: bool,
    /// VolumeAttributesClasses (the driver modifies volumes, and the cluster serves them).
    pub attributes_classes: bool,
}

/// Per watched kind: since when its watch has been failing without a success in between.
#[derive(Debug, Default)]
pub struct WatchHealth {
    failing: Failing,
}

impl WatchHealth {
    /// A watch event of `kind` arrived: a success or a failure.
    fn record<T>(&self, kind: &str, event: &watcher::Result<T>) {
        match event {
            Ok(_) => self.failing.passed(kind),
            Err(e) => self.failing.failed(kind, e.to_string()),
        }
    }

    /// The kinds whose watch has failed for at least `grace` with no success since, and for
    /// how long: their stores may be stale.
    pub fn stale(&self, grace: Duration) -> Vec<(String, Duration)> {
        let stale = self.failing.stale(grace).into_iter();
        stale.map(|(kind, failing_for, _)| (kind, failing_for)).collect()
    }
}

/// An object that was added, changed or deleted; the store already reflects it when this is
/// reported.
#[derive(Debug, Clone, Copy)]
pub enum Change<'a> {
    Claim(&'a PersistentVolumeClaim),
    ClaimGone(&'a PersistentVolumeClaim),
    /// The PV whole, and the store's compact copy, which the PV index shares rather than
    /// holding a second.
    Volume(&'a PersistentVolume, &'a Arc<Compact<PersistentVolume>>),
    VolumeGone(&'a PersistentVolume),
    Class(&'a StorageClass),
    /// A VolumeAttachment added, changed or deleted.
    Attachment(&'a VolumeAttachment),
    /// A CSINode, Node or VolumeAttributesClass changed: nothing waits on it (a claim that
    /// needed one retries after its backoff).
    Reference,
    /// The watch of this kind listed again, and every object in it was told: one deleted
    /// while the watch was down is simply not there (no delete event).
    Listed(&'a str),
}

/// Told of every change the watches see.
pub type OnChange = Arc<dyn Fn(Change<'_>) + Send + Sync>;

/// Shown each object as the watch delivers it, before its managedFields are dropped.
pub type Inspect<K> = Arc<dyn Fn(&K) + Send + Sync>;

impl Stores {
    /// Creates the stores and the future that keeps them filled; it must be polled (spawned) for
    /// the stores to fill, and runs until dropped. `on_change` hears of every object seen,
    /// including the initial listing.
    pub fn watch(
        client: &Client,
        on_change: OnChange,
    ) -> (Stores, impl Future<Output = ()> + Send + 'static) {
        Self::watch_inspecting(client, on_change, None, Watched::default())
    }

    /// As `watch`; `inspect_volume` sees every PV whole (who wrote it, in managedFields).
    pub fn watch_inspecting(
        client: &Client,
        on_change: OnChange,
        inspect_volume: Option<Inspect<PersistentVolume>>,
        watched: Watched,
    ) -> (Stores, impl Future<Output = ()> + Send + 'static) {
        let watches = Arc::new(WatchHealth::default());
        let r = Reflecting { client, health: watches.clone(), on_change };
        let (claims, claims_run) = r.reflect_held(CLAIM, None);
        let (volumes, volumes_run) = r.reflect_held(VOLUME, inspect_volume);
        let (classes, classes_run) = r.reflect(CLASS, None);
        let (attachments, attachments_run) =
            watched.attachments.then(|| r.reflect(ATTACHMENT, None)).unzip();
        let (topology, topology_run) = watched
            .topology
            .then(|| {
                let (csi_nodes, csi_nodes_run) = r.reflect(reference(), None);
                // An Api of PartialObjectMeta asks for metadata only.
                let (nodes, nodes_run) = r.reflect(reference(), None);
                let run = async move {
                    tokio::join!(csi_nodes_run, nodes_run);
                };
                (TopologyStores { csi_nodes, nodes }, run)
            })
            .unzip();
        let (attributes_classes, attributes_classes_run) =
            watched.attributes_classes.then(|| r.reflect(reference(), None)).unzip();
        let run = async move {
            tokio::join!(
                claims_run,
                volumes_run,
                classes_run,
                if_watched(attachments_run),
                if_watched(topology_run),
                if_watched(attributes_classes_run),
            );
        };
        (
            Stores { claims, volumes, classes, attachments, topology, attributes_classes, watches },
            run,
        )
    }

    /// Waits until every store holds its first complete listing.
    pub async fn synced(&self) -> Result<(), reflector::store::WriterDropped> {
        self.claims.wait_until_ready().await?;
        self.volumes.wait_until_ready().await?;
        self.classes.wait_until_ready().await?;
        if let Some(attachments) = &self.attachments {
            attachments.wait_until_ready().await?;
        }
        if let Some(classes) = &self.attributes_classes {
            classes.wait_until_ready().await?;
        }
        if let Some(topology) = &self.topology {
            topology.csi_nodes.wait_until_ready().await?;
            topology.nodes.wait_until_ready().await?;
        }
        Ok(())
    }
}

/// Runs a watch that is set up only for some drivers.
async fn if_watched(run: Option<impl Future<Output = ()>>) {
    if let Some(run) = run {
        run.await;
    }
}

/// How a kind's objects are told: as seen (applied) and as gone (deleted).
type Told<K> = (Wrap<K>, Wrap<K>);
/// The same for a kind held compact: seen with the store's compact copy.
type HeldTold<K> =
    (for<'a> fn(&'a K, &'a Arc<Compact<K>>) -> Change<'a>, for<'a> fn(&'a K) -> Change<'a>);
const CLAIM: HeldTold<PersistentVolumeClaim> = (|o, _| Change::Claim(o), |o| Change::ClaimGone(o));
const VOLUME: HeldTold<PersistentVolume> = (|o, h| Change::Volume(o, h), |o| Change::VolumeGone(o));
const CLASS: Told<StorageClass> = (|o| Change::Class(o), |o| Change::Class(o));
const ATTACHMENT: Told<VolumeAttachment> = (|o| Change::Attachment(o), |o| Change::Attachment(o));

/// What every watch shares: the client, the health record and the listener.
struct Reflecting<'c> {
    client: &'c Client,
    health: Arc<WatchHealth>,
    on_change: OnChange,
}

impl Reflecting<'_> {
    /// A store of every `K` and the future that fills it.
    fn reflect<K>(
        &self,
        told: Told<K>,
        inspect: Option<Inspect<K>>,
    ) -> (Store<K>, impl Future<Output = ()> + Send + use<K>)
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
        K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    {
        let stream = whole::<K>(self.client);
        reflect(self.health.clone(), stream, self.on_change.clone(), told, inspect)
    }

    /// A store of every `K`, held compact, and the future that fills it.
    fn reflect_held<K: Compactable>(
        &self,
        told: HeldTold<K>,
        inspect: Option<Inspect<K>>,
    ) -> (Held<K>, impl Future<Output = ()> + Send + use<K>) {
        let stream = whole::<K>(self.client);
        reflect_held(self.health.clone(), stream, self.on_change.clone(), told, inspect)
    }
}

/// Told as a reference changed, whatever happened to it.
fn reference<K>() -> Told<K> {
    (|_| Change::Reference, |_| Change::Reference)
}

fn whole<K>(
    client: &Client,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + use<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default,
{
    watcher(Api::<K>::all(client.clone()), watcher::Config::default())
}

/// The `Change` an object seen (applied) or gone (deleted) is told as.
type Wrap<K> = for<'a> fn(&'a Arc<K>) -> Change<'a>;

/// The watch with its backoff, each object shown to `inspect` and then stripped of its
/// managedFields: never read here, and a large share of each object's size.
fn watched<K: Resource + Send + 'static>(
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    inspect: Option<Inspect<K>>,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static {
    stream.default_backoff().modify(move |o| {
        if let Some(inspect) = &inspect {
            inspect(o);
        }
        o.meta_mut().managed_fields = None;
    })
}

/// A store of every `K`, kept whole, and the future that fills it.
fn reflect<K>(
    health: Arc<WatchHealth>,
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    on_change: OnChange,
    told: Told<K>,
    inspect: Option<Inspect<K>>,
) -> (Store<K>, impl Future<Output = ()> + Send + 'static)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store::<K>();
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let keeping = Whole { writer, store: reader.clone(), told };
    (reader, keep(health, watched(stream, inspect), on_change, keeping, kind))
}

/// As `reflect`, for a kind held compact: each object the watch brings is encoded once for the
/// store and told whole, then dropped; a (re)list is told once it is whole, each object decoded
/// from the store in turn.
fn reflect_held<K: Compactable>(
    health: Arc<WatchHealth>,
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    on_change: OnChange,
    told: HeldTold<K>,
    inspect: Option<Inspect<K>>,
) -> (Held<K>, impl Future<Output = ()> + Send + 'static) {
    let writer = reflector::store::Writer::<Compact<K>>::default();
    let store = writer.as_reader();
    let kind = K::kind(&()).to_string();
    let keeping = Compacted { writer, store: store.clone(), told };
    (Held::new(store), keep(health, watched(stream, inspect), on_change, keeping, kind))
}

/// How a watched kind is kept in its store, and how what the watch brings is told.
trait Keeping<K>: Send + 'static {
    /// Puts the event into the store.
    fn apply(&mut self, event: &watcher::Event<K>);
    /// Tells of `object`, just applied.
    fn seen(&self, object: K, on_change: &OnChange);
    /// Tells of `object`, just deleted.
    fn gone(&self, object: K, on_change: &OnChange);
    /// Tells of every object in the store: a (re)list is whole.
    fn all(&self, on_change: &OnChange);
}

/// The one event loop of every watch: each event recorded for the health checks, put into the
/// store, then told. A (re)list is told once it is whole, from the store: while it runs the
/// objects sit in the writer's buffer, and a copy made here would be a second one that the PV
/// index kept (54 MiB of 185 at rest, with 10,000 bound pairs).
fn keep<K, S: Keeping<K>>(
    health: Arc<WatchHealth>,
    stream: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
    on_change: OnChange,
    mut keeping: S,
    kind: String,
) -> impl Future<Output = ()> + Send + 'static
where
    K: Send + 'static,
{
    stream.for_each(move |event| {
        health.record(&kind, &event);
        match event {
            Ok(event) => {
                keeping.apply(&event);
                match event {
                    watcher::Event::Apply(o) => keeping.seen(o, &on_change),
                    watcher::Event::Delete(o) => keeping.gone(o, &on_change),
                    watcher::Event::Init | watcher::Event::InitApply(_) => {}
                    watcher::Event::InitDone => {
                        keeping.all(&on_change);
                        on_change(Change::Listed(&kind));
                    }
                }
            }
            Err(error) => warn!(%kind, %error, "watch failed; retrying with backoff"),
        }
        futures::future::ready(())
    })
}

/// Kept whole, in a reflector store.
struct Whole<K: Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer: reflector::store::Writer<K>,
    store: Store<K>,
    told: Told<K>,
}

impl<K> Keeping<K> for Whole<K>
where
    K: Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    fn apply(&mut self, event: &watcher::Event<K>) {
        self.writer.apply_watcher_event(event);
    }

    fn seen(&self, object: K, on_change: &OnChange) {
        // The store already holds this version: hand its Arc on, not a copy.
        let shared = self
            .store
            .get(&reflector::ObjectRef::from_obj(&object))
            .filter(|s| s.resource_version() == object.resource_version())
            .unwrap_or_else(|| Arc::new(object));
        on_change((self.told.0)(&shared));
    }

    fn gone(&self, object: K, on_change: &OnChange) {
        on_change((self.told.1)(&Arc::new(object)));
    }

    fn all(&self, on_change: &OnChange) {
        for object in self.store.state() {
            on_change((self.told.0)(&object));
        }
    }
}

/// Kept compact (`model::compact`), told whole.
struct Compacted<K: Compactable> {
    writer: reflector::store::Writer<Compact<K>>,
    store: Store<Compact<K>>,
    told: HeldTold<K>,
}

impl<K: Compactable> Keeping<K> for Compacted<K> {
    fn apply(&mut self, event: &watcher::Event<K>) {
        let compact = match event {
            watcher::Event::Apply(o) => watcher::Event::Apply(Compact::of(o)),
            watcher::Event::Delete(o) => watcher::Event::Delete(Compact::of(o)),
            watcher::Event::Init => watcher::Event::Init,
            watcher::Event::InitApply(o) => watcher::Event::InitApply(Compact::of(o)),
            watcher::Event::InitDone => watcher::Event::InitDone,
        };
        self.writer.apply_watcher_event(&compact);
    }

    fn seen(&self, object: K, on_change: &OnChange) {
        let key = object_key(&object.name_any(), object.meta().namespace.as_deref());
        if let Some(shared) = self.store.get(&key) {
            on_change((self.told.0)(&object, &shared));
        }
    }

    fn gone(&self, object: K, on_change: &OnChange) {
        on_change((self.told.1)(&object));
    }

    fn all(&self, on_change: &OnChange) {
        for held in self.store.state() {
            if let Some(object) = held.open() {
                on_change((self.told.0)(&object, &held));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::VolumeExt;
    use std::sync::Mutex;

    fn pv(name: &str, version: &str) -> PersistentVolume {
        crate::fixtures::pv(name).version(version).build()
    }

    /// A list is told once it is whole, each PV with the store's own compact copy (no second
    /// copy for the PV index to keep), then that the list is whole; a later change hands on the
    /// store's copy too, and a deletion leaves the store.
    #[tokio::test]
    async fn listed_objects_are_told_with_the_stores_own_copy() {
        type Told = (String, String, Option<Arc<Compact<PersistentVolume>>>);
        let told: Arc<Mutex<Vec<Told>>> = Arc::default();
        let sink = told.clone();
        let on_change: OnChange = Arc::new(move |change| {
            let entry = match change {
                Change::Volume(v, held) => (
                    v.name().to_string(),
                    v.metadata.resource_version.clone().unwrap_or_default(),
                    Some(held.clone()),
                ),
                Change::VolumeGone(v) => (v.name().to_string(), "gone".into(), None),
                Change::Listed(kind) => (kind.to_string(), "listed".into(), None),
                _ => return,
            };
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(entry);
        });
        let events = vec![
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(pv("a", "1"))),
            Ok(watcher::Event::InitApply(pv("b", "1"))),
            Ok(watcher::Event::InitApply(pv("c", "1"))),
            Ok(watcher::Event::InitDone),
            Ok(watcher::Event::Apply(pv("a", "2"))),
            Ok(watcher::Event::Delete(pv("c", "1"))),
        ];
        let health = Arc::new(WatchHealth::default());
        let (store, run) =
            reflect_held(health, futures::stream::iter(events), on_change, VOLUME, None);
        run.await;
        let told = told.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let names: Vec<(&str, &str)> =
            told.iter().map(|(n, v, _)| (n.as_str(), v.as_str())).collect();
        assert_eq!(names.len(), 6, "{names:?}");
        for listed in [("a", "1"), ("b", "1"), ("c", "1")] {
            assert!(names[..3].contains(&listed), "{names:?}");
        }
        assert_eq!(names[3..], [("PersistentVolume", "listed"), ("a", "2"), ("c", "gone")]);
        let b = store.held(&reflector::ObjectRef::new("b")).expect("b in the store");
        let shared = |name: &str, held: &Arc<Compact<PersistentVolume>>| {
            told.iter()
                .any(|(n, _, t)| n == name && t.as_ref().is_some_and(|t| Arc::ptr_eq(t, held)))
        };
        assert!(shared("b", &b), "b was told with a copy of its own");
        let a = store.held(&reflector::ObjectRef::new("a")).expect("a in the store");
        assert!(
            shared("a", &a) && a.version() == Some(2),
            "the change was told with a copy of its own"
        );
        let whole = store.get(&reflector::ObjectRef::new("a")).expect("a decoded");
        assert_eq!(*whole, pv("a", "2"));
        assert!(store.held(&reflector::ObjectRef::new("c")).is_none(), "c deleted");
    }
}
