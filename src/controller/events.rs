//! Events on claims and volumes, through kube's recorder (events.k8s.io, with repeats folded
//! into a series). A failure to record an event is logged and never fails the operation.

use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tracing::warn;

pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub fn new(client: Client, driver: &str) -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_default();
        let mut instance = format!("{driver}_{host}");
        instance.truncate(128);
        Events {
            recorder: Recorder::new(
                client,
                Reporter {
                    controller: "csi-pv-controller".into(),
                    instance: Some(instance),
                },
            ),
        }
    }

    pub async fn normal(&self, object: &ObjectReference, reason: &str, note: String) {
        self.publish(object, EventType::Normal, reason, note).await;
    }

    pub async fn warning(&self, object: &ObjectReference, reason: &str, note: String) {
        self.publish(object, EventType::Warning, reason, note).await;
    }

    async fn publish(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        // The recorder folds repeats by (type, reason, action, object) and keeps the first note;
        // a digest of the note in the action keeps a changed message from hiding behind an old one.
        let mut digest = std::collections::hash_map::DefaultHasher::new();
        note.hash(&mut digest);
        let mut note = note;
        if note.len() > 1000 {
            let mut cut = 1000;
            while !note.is_char_boundary(cut) {
                cut -= 1;
            }
            note.truncate(cut);
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(note),
            action: format!("{reason}-{:016x}", digest.finish()),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, object).await {
            warn!(%reason, object = ?object.name, %error, "cannot record event");
        }
    }
}
