//! An apiserver in memory, for the executor's fast tests: the kinds the executor writes, keyed
//! by path, with resourceVersions from one counter. A write naming a resourceVersion other than
//! the object's is refused with 409, as etcd's compare-and-swap makes the real one refuse it.
//! Merge patches follow RFC 7386; of strategic merge patches only the finalizer removal the
//! executor sends is understood. Deleting an object with finalizers marks it instead.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};

use crate::fixtures::merge;

#[derive(Default)]
pub struct State {
    /// By collection path (`/api/v1/namespaces/ns/persistentvolumeclaims`), then name.
    objects: BTreeMap<String, BTreeMap<String, Value>>,
    version: u64,
    /// Every write that changed something, as `VERB path`.
    pub writes: Vec<String>,
    /// Every read, as `GET path` (lists included).
    pub reads: Vec<String>,
    /// Events posted: (reason, note).
    pub events: Vec<(String, String)>,
    /// Paths whose reads are answered 503, as an apiserver that cannot serve them.
    pub unavailable: Vec<String>,
}

#[derive(Clone, Default)]
pub struct FakeApi {
    pub state: Arc<Mutex<State>>,
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": code.as_u16(), "reason": reason, "message": message,
    });
    respond(code, &body)
}

fn respond(code: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Body::from(body.to_string().into_bytes()));
    *response.status_mut() = code;
    response
        .headers_mut()
        .insert("content-type", http::HeaderValue::from_static("application/json"));
    response
}

/// RFC 7386: null removes a key.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Some(target) = target.as_object_mut() else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

/// The executor's one strategic patch: finalizers taken off by name.
fn strategic_patch(target: &mut Value, patch: &Value) {
    let gone: Vec<Value> = patch["metadata"]["$deleteFromPrimitiveList/finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(finalizers) = target["metadata"]["finalizers"].as_array_mut() {
        finalizers.retain(|f| !gone.contains(f));
    }
}

impl State {
    fn bump(&mut self, object: &mut Value) {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
    }

    /// Puts `object` at `collection` as a client would create it; returns it as stored.
    pub fn create(&mut self, collection: &str, mut object: Value) -> Result<Value, String> {
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        if self.objects.get(collection).is_some_and(|c| c.contains_key(&name)) {
            return Err(name);
        }
        if object["metadata"]["uid"].is_null() {
            object["metadata"]["uid"] = json!(format!("uid-{name}"));
        }
        self.bump(&mut object);
        self.objects.entry(collection.to_string()).or_default().insert(name, object.clone());
        Ok(object)
    }

    pub fn get(&self, collection: &str, name: &str) -> Option<Value> {
        self.objects.get(collection)?.get(name).cloned()
    }

    /// Changes an object as another client would (the user, kube-controller-manager).
    pub fn update(&mut self, collection: &str, name: &str, change: Value) -> Value {
        let mut object = self.get(collection, name).unwrap_or_default();
        merge(&mut object, change);
        self.bump(&mut object);
        self.put(collection, name, object.clone());
        object
    }

    pub fn all(&self, collection: &str) -> Vec<Value> {
        self.objects.get(collection).map(|c| c.values().cloned().collect()).unwrap_or_default()
    }

    fn put(&mut self, collection: &str, name: &str, object: Value) {
        let deleting = !object["metadata"]["deletionTimestamp"].is_null();
        let held = object["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
        let objects = self.objects.entry(collection.to_string()).or_default();
        if deleting && !held {
            objects.remove(name);
        } else {
            objects.insert(name.to_string(), object);
        }
    }

    fn answer(
        &mut self,
        method: &Method,
        path: &str,
        content_type: &str,
        body: &[u8],
    ) -> Response<Body> {
        let path = path.split('?').next().unwrap_or_default();
        // The status subresource is the object here: the executor's status patches touch only
        // status, as the real subresource would let them.
        let path = path.strip_suffix("/status").unwrap_or(path);
        let input: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        if *method == Method::GET {
            self.reads.push(format!("GET {path}"));
        }
        if *method == Method::GET && self.unavailable.iter().any(|p| path.ends_with(p.as_str())) {
            return status(StatusCode::SERVICE_UNAVAILABLE, "ServiceUnavailable", "try later");
        }
        if path.ends_with("/events") && *method == Method::POST {
            let reason = input["reason"].as_str().unwrap_or_default().to_string();
            let note = input["note"]
                .as_str()
                .or(input["message"].as_str())
                .unwrap_or_default()
                .to_string();
            self.events.push((reason, note));
            return respond(StatusCode::CREATED, &input);
        }
        if *method == Method::POST {
            return match self.create(path, input) {
                Ok(created) => {
                    self.writes.push(format!("POST {path}"));
                    respond(StatusCode::CREATED, &created)
                }
                Err(name) => {
                    status(StatusCode::CONFLICT, "AlreadyExists", &format!("{name} already exists"))
                }
            };
        }
        let Some((collection, name)) = path.rsplit_once('/') else {
            return status(StatusCode::NOT_FOUND, "NotFound", path);
        };
        let plural =
            ["pods", "persistentvolumeclaims", "persistentvolumes", "secrets", "nodes", "csinodes"];
        if *method == Method::GET && (self.objects.contains_key(path) || plural.contains(&name)) {
            let items = self.all(path);
            return respond(
                StatusCode::OK,
                &json!({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": self.version.to_string()}, "items": items}),
            );
        }
        let Some(mut object) = self.get(collection, name) else {
            return status(StatusCode::NOT_FOUND, "NotFound", &format!("{name} not found"));
        };
        match *method {
            Method::GET => respond(StatusCode::OK, &object),
            Method::PATCH => {
                let wanted = input["metadata"]["resourceVersion"].as_str();
                if wanted.is_some_and(|v| Some(v) != object["metadata"]["resourceVersion"].as_str())
                {
                    return status(
                        StatusCode::CONFLICT,
                        "Conflict",
                        "the object has been modified",
                    );
                }
                let before = object.clone();
                if content_type.contains("strategic") {
                    strategic_patch(&mut object, &input);
                } else {
                    let mut patch = input.clone();
                    // `get_mut`: indexing would add a null `metadata`, which merges as a delete.
                    if let Some(meta) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                        meta.remove("resourceVersion");
                    }
                    merge_patch(&mut object, &patch);
                }
                if object != before {
                    self.bump(&mut object);
                    self.writes.push(format!("PATCH {path}"));
                }
                self.put(collection, name, object.clone());
                respond(StatusCode::OK, &object)
            }
            Method::DELETE => {
                self.writes.push(format!("DELETE {path}"));
                object["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                self.bump(&mut object);
                self.put(collection, name, object.clone());
                respond(StatusCode::OK, &object)
            }
            _ => status(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed", path),
        }
    }
}

impl FakeApi {
    pub fn client(&self) -> kube::Client {
        let state = self.state.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let state = state.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = body.collect_bytes().await.unwrap_or_default();
                let content_type = parts
                    .headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
                let response = state.answer(&parts.method, parts.uri.path(), &content_type, &body);
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        kube::Client::new(service, "default")
    }
}
