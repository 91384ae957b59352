//! Events on claims and volumes, through kube's recorder (events.k8s.io, with repeats folded
//! into a series). A failure to record an event is logged and never fails the operation.
//!
//! Recording is asynchronous, as client-go's broadcaster: a pass queues its Event and goes on,
//! and a background task sends them. Under a client-side QPS limit the Events' client takes only
//! spare tokens, so a burst of claims binds first and its Events trail; a full queue drops the
//! newest, with a log line, as client-go does.

use std::hash::{Hash, Hasher};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;
use tracing::{Instrument, Span, warn};

/// Events waiting to be sent. client-go's broadcaster holds 1000; a burst of 1,000 claims makes
/// 2,000 under a QPS limit, so ours holds more (an Event here is about 1 KiB).
const QUEUE_LENGTH: usize = 4096;
/// Events sent at once.
const SENDERS: usize = 8;

struct Queued {
    object: ObjectReference,
    event: Event,
    /// The pass that recorded it, so a failure is logged in its span.
    span: Span,
}

pub struct Events {
    queue: mpsc::Sender<Queued>,
}

impl Events {
    pub fn new(client: Client, driver: &str) -> Self {
        let host = std::env::var("HOSTNAME").unwrap_or_default();
        let mut instance = format!("{driver}_{host}");
        instance.truncate(128);
        let recorder = Recorder::new(
            client,
            Reporter {
                controller: "csi-pv-controller".into(),
                instance: Some(instance),
            },
        );
        let (queue, queued) = mpsc::channel::<Queued>(QUEUE_LENGTH);
        tokio::spawn(
            tokio_stream::wrappers::ReceiverStream::new(queued).for_each_concurrent(
                SENDERS,
                move |q| {
                    let recorder = recorder.clone();
                    async move {
                        if let Err(error) = recorder.publish(&q.event, &q.object).await {
                            warn!(reason = %q.event.reason, object = ?q.object.name, %error, "cannot record event");
                        }
                    }
                    .instrument(q.span)
                },
            ),
        );
        Events { queue }
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
        let queued = Queued {
            object: object.clone(),
            event,
            span: Span::current(),
        };
        if let Err(e) = self.queue.try_send(queued) {
            warn!(%reason, object = ?object.name, error = %e, "event dropped: the event queue is full");
        }
    }
}
