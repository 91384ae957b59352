//! client-go's LeaderElection events: the Go sidecars' elections record "<identity> became
//! leader" and "<identity> stopped leading" on the Lease (csi-lib-utils gives the lock a
//! recorder whose component is `<lease>/<identity>`), and dashboards and `kubectl get events`
//! filters look for them. Ours says "stopped leading" only when it gives a Lease up: after a
//! Lease may have been lost, the fence allows no write, and an Event is none either. A failure
//! to record one is logged and changes nothing.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tracing::warn;

/// The Event for `what` ("became leader", "stopped leading") on Lease `namespace/lease`.
pub fn leader_event(
    namespace: &str,
    lease: &str,
    identity: &str,
    what: &str,
    now: Timestamp,
) -> Event {
    let component = format!("{lease}/{identity}");
    Event {
        metadata: ObjectMeta {
            // client-go's name: the object's, then the time in hex nanoseconds.
            name: Some(format!("{lease}.{:x}", now.as_nanosecond())),
            namespace: Some(namespace.to_string()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(namespace.to_string()),
            name: Some(lease.to_string()),
            ..Default::default()
        },
        type_: Some("Normal".into()),
        reason: Some("LeaderElection".into()),
        message: Some(format!("{identity} {what}")),
        source: Some(EventSource { component: Some(component.clone()), host: None }),
        reporting_component: Some(component),
        reporting_instance: Some(String::new()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        event_time: None::<MicroTime>,
        count: Some(1),
        ..Default::default()
    }
}

/// Records `what` on the Lease `leases` names, in the background.
pub fn record(leases: &Api<Lease>, lease: &str, identity: &str, what: &str) {
    let namespace = leases.namespace().unwrap_or("default").to_string();
    let event = leader_event(&namespace, lease, identity, what, Timestamp::now());
    let events: Api<Event> = Api::namespaced(leases.clone().into_client(), &namespace);
    tokio::spawn(async move {
        if let Err(error) = events.create(&PostParams::default(), &event).await {
            warn!(%error, "cannot record the LeaderElection event");
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_is_client_gos() {
        let now = Timestamp::from_second(1_700_000_000).unwrap_or_default();
        let e = leader_event("ns", "hostpath-csi-k8s-io", "pod-1", "became leader", now);
        assert_eq!(e.reason.as_deref(), Some("LeaderElection"));
        assert_eq!(e.message.as_deref(), Some("pod-1 became leader"));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        let object = &e.involved_object;
        assert_eq!(
            (object.kind.as_deref(), object.name.as_deref(), object.namespace.as_deref()),
            (Some("Lease"), Some("hostpath-csi-k8s-io"), Some("ns"))
        );
        let component = e.source.and_then(|s| s.component);
        assert_eq!(component.as_deref(), Some("hostpath-csi-k8s-io/pod-1"));
        assert!(e.metadata.name.is_some_and(|n| n.starts_with("hostpath-csi-k8s-io.")));
    }
}
