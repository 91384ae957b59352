//! Events on claims and volumes, written as client-go's recorder writes them (core/v1 Events,
//! a repeat of the same event folded into the first one's `count`), so that they look as the
//! upstream components' do to `kubectl describe` and to filters on event sources. A failure to
//! record an event is logged and never fails the operation.
//!
//! Each Event names the upstream component that would have sent it (`source.component` and
//! `reportingComponent`): csi-provisioner's `<driver>_<host>_<id>` for provisioning and
//! deletion, csi-resizer's `external-resizer <driver>` for expansion, kube-controller-manager's
//! `persistentvolume-controller` for the binder's events (with `--binder` driver or all).
//!
//! Recording is asynchronous, as client-go's broadcaster: a pass queues its Event and goes on,
//! and background senders write them. Under a client-side QPS limit the Events' client takes
//! only spare tokens, so a burst of claims binds first and its Events trail; a full queue drops
//! the newest, with a log line, as client-go does. Events of one key (component, object, type,
//! reason, message) always go through the same sender, in order, so a repeat right after the
//! first one is folded into it instead of making a second Event.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;
use tracing::{Instrument, Span, warn};

pub use crate::model::reason::{Reason, Role};

/// Events waiting to be sent. client-go's broadcaster holds 1000; a burst of 1,000 claims makes
/// 2,000 under a QPS limit, so ours holds more (an Event here is about 1 KiB).
const QUEUE_LENGTH: usize = 4096;
/// Senders, each with its share of the keys.
const SENDERS: usize = 8;
/// How long a repeat is folded into the Event it repeats (client-go: 10 minutes).
const FOLD_WINDOW_SECONDS: i64 = 600;
/// Keys remembered for folding (client-go's cache: 4096).
const REMEMBERED: usize = 4096;
/// The API's limit on an Event's message.
const MESSAGE_LIMIT: usize = 1024;

/// The component name of each role, as upstream names it. `unique` stands for the random part
/// of csi-provisioner's name, new with every start.
pub fn component(role: Role, driver: &str, host: &str, unique: &str) -> String {
    match role {
        Role::Provisioner => format!("{driver}_{host}_{unique}"),
        Role::Resizer => format!("external-resizer {driver}"),
        Role::Binder => "persistentvolume-controller".to_string(),
    }
}

/// What makes two events the same event (client-go's aggregation key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    component: String,
    object: (String, String, String, String),
    type_: &'static str,
    reason: String,
    message: String,
}

/// The Event a key was first written as, and how often it happened.
#[derive(Debug, Clone)]
struct Seen {
    name: String,
    count: i32,
    first: Timestamp,
}

/// One event to write.
struct Queued {
    key: Key,
    object: ObjectReference,
    span: Span,
}

/// A step of folding: create the Event, or raise the count of the one written before.
#[derive(Debug, PartialEq, Eq)]
enum Fold {
    Create,
    Repeat { name: String, count: i32 },
}

/// Decides, for an event at `now`, whether it folds into `seen`.
fn fold(seen: Option<&Seen>, now: Timestamp) -> Fold {
    match seen {
        Some(s) if now.as_second() - s.first.as_second() < FOLD_WINDOW_SECONDS => {
            Fold::Repeat { name: s.name.clone(), count: s.count + 1 }
        }
        _ => Fold::Create,
    }
}

pub struct Events {
    queues: Vec<mpsc::Sender<Queued>>,
    components: [String; 3],
}

impl Events {
    /// `identity` is this process's provisioner identity (`<ms>-<salt>-<driver>`); its time
    /// and salt stand for the random part of csi-provisioner's event source.
    pub fn new(client: Client, driver: &str, identity: &str) -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_default();
        let unique = identity.split('-').take(2).collect::<Vec<_>>().join("-");
        let components = [Role::Provisioner, Role::Resizer, Role::Binder]
            .map(|role| component(role, driver, &host, &unique));
        let seen: Arc<Mutex<HashMap<Key, Seen>>> = Arc::default();
        let mut queues = Vec::with_capacity(SENDERS);
        for _ in 0..SENDERS {
            let (queue, mut queued) = mpsc::channel::<Queued>(QUEUE_LENGTH / SENDERS);
            let client = client.clone();
            let seen = seen.clone();
            let host = host.clone();
            tokio::spawn(async move {
                while let Some(q) = queued.recv().await {
                    let span = q.span.clone();
                    write(&client, &seen, &host, q).instrument(span).await;
                }
            });
            queues.push(queue);
        }
        Events { queues, components }
    }

    pub async fn normal(&self, object: &ObjectReference, reason: Reason, note: String) {
        self.publish(object, "Normal", reason, note);
    }

    pub async fn warning(&self, object: &ObjectReference, reason: Reason, note: String) {
        self.publish(object, "Warning", reason, note);
    }

    fn publish(&self, object: &ObjectReference, type_: &'static str, reason: Reason, note: String) {
        let mut message = note;
        if message.len() > MESSAGE_LIMIT {
            let mut cut = MESSAGE_LIMIT;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let role = reason.role();
        let key = Key {
            component: self.components[role as usize].clone(),
            object: (
                object.kind.clone().unwrap_or_default(),
                object.namespace.clone().unwrap_or_default(),
                object.name.clone().unwrap_or_default(),
                object.uid.clone().unwrap_or_default(),
            ),
            type_,
            reason: reason.as_str().to_string(),
            message,
        };
        let mut hash = DefaultHasher::new();
        key.hash(&mut hash);
        let queue = &self.queues[(hash.finish() % SENDERS as u64) as usize];
        let queued = Queued { key, object: object.clone(), span: Span::current() };
        if let Err(e) = queue.try_send(queued) {
            warn!(%reason, object = ?object.name, error = %e, "event dropped: the event queue is full");
        }
    }
}

/// Writes one event: a new Event, or the count of the one it repeats. A repeat whose Event is
/// gone (expired, deleted) is written anew.
async fn write(client: &Client, seen: &Mutex<HashMap<Key, Seen>>, host: &str, q: Queued) {
    let now = Timestamp::now();
    let before = seen.lock().unwrap_or_else(|p| p.into_inner()).get(&q.key).cloned();
    let namespace = match q.object.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => ns.to_string(),
        _ => "default".to_string(),
    };
    let api: Api<Event> = Api::namespaced(client.clone(), &namespace);
    if let Fold::Repeat { name, count } = fold(before.as_ref(), now) {
        let patch = serde_json::json!({"count": count, "lastTimestamp": Time(now)});
        match api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await {
            Ok(_) => {
                if let Some(s) = seen.lock().unwrap_or_else(|p| p.into_inner()).get_mut(&q.key) {
                    s.count = count;
                }
                return;
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => {
                warn!(reason = %q.key.reason, object = ?q.object.name, %error, "cannot record event");
                return;
            }
        }
    }
    let name =
        format!("{}.{:x}", q.object.name.as_deref().unwrap_or("object"), now.as_nanosecond());
    let event = Event {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: q.object.clone(),
        reason: Some(q.key.reason.clone()),
        message: Some(q.key.message.clone()),
        type_: Some(q.key.type_.to_string()),
        source: Some(EventSource {
            component: Some(q.key.component.clone()),
            host: Some(host.to_string()).filter(|h| !h.is_empty()),
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        reporting_component: Some(q.key.component.clone()),
        reporting_instance: Some(host.to_string()),
        event_time: None::<MicroTime>,
        ..Event::default()
    };
    match api.create(&PostParams::default(), &event).await {
        Ok(_) => {
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            if seen.len() >= REMEMBERED {
                // Forget the oldest; it would only fold for a few more minutes anyway.
                if let Some(oldest) =
                    seen.iter().min_by_key(|(_, s)| s.first).map(|(k, _)| k.clone())
                {
                    seen.remove(&oldest);
                }
            }
            seen.insert(q.key, Seen { name, count: 1, first: now });
        }
        Err(error) => {
            warn!(reason = %q.key.reason, object = ?q.object.name, %error, "cannot record event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_names_the_component_upstream_sends_it_from() {
        let table = [
            (Reason::Provisioning, "d.csi_host-1_17-42"),
            (Reason::ProvisioningSucceeded, "d.csi_host-1_17-42"),
            (Reason::ProvisioningFailed, "d.csi_host-1_17-42"),
            (Reason::VolumeFailedDelete, "d.csi_host-1_17-42"),
            (Reason::VolumeDeletionRefused, "d.csi_host-1_17-42"),
            (Reason::Resizing, "external-resizer d.csi"),
            (Reason::VolumeResizeFailed, "external-resizer d.csi"),
            (Reason::FileSystemResizeRequired, "external-resizer d.csi"),
            (Reason::VolumeResizeSuccessful, "external-resizer d.csi"),
            (Reason::VolumeModifyFailed, "external-resizer d.csi"),
            (Reason::FailedBinding, "persistentvolume-controller"),
            (Reason::ExternalProvisioning, "persistentvolume-controller"),
            (Reason::ClaimLost, "persistentvolume-controller"),
        ];
        for (reason, want) in table {
            assert_eq!(component(reason.role(), "d.csi", "host-1", "17-42"), want, "{reason}");
        }
    }

    #[test]
    fn a_repeat_folds_into_the_first_event_for_ten_minutes() {
        let first = Timestamp::from_second(1_000_000).unwrap();
        let seen = Seen { name: "c.1".into(), count: 3, first };
        let at = |s: i64| Timestamp::from_second(1_000_000 + s).unwrap();
        assert_eq!(fold(None, at(0)), Fold::Create);
        assert_eq!(fold(Some(&seen), at(5)), Fold::Repeat { name: "c.1".into(), count: 4 });
        assert_eq!(fold(Some(&seen), at(599)), Fold::Repeat { name: "c.1".into(), count: 4 });
        assert_eq!(fold(Some(&seen), at(600)), Fold::Create);
    }
}
