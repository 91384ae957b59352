//! deploy/ as a cluster would take it: every manifest accepted by the real apiserver (a
//! server-side dry run of each object, then the RBAC and the StorageClass for real), and the
//! binary run with exactly the csi-pv-controller container's args and environment, its mounts
//! mapped to folders, beside the real hostpathplugin, as the manifest's ServiceAccount (a token
//! from the TokenRequest API, as the pod would get). It leads, provisions a claim the cluster's
//! binder hands over, and leaves its journal empty.

mod support;

use std::path::Path;
use std::time::Duration;

use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::{Discovery, Scope};
use serde_json::json;
use support::cluster::eventually;
use support::control_plane::{OwnedPlane, client_from_kubeconfig};
use support::driver_pod::kubectl;
use support::hostpath::{Hostpath, HostpathConfig};
use support::sidecar::Sidecar;

const LIMIT: Duration = Duration::from_secs(60);

fn documents(file: &str) -> Vec<serde_json::Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    yaml_documents(&text)
}

/// Creates `object` (a dry run when `dry_run`), whatever its kind.
async fn create(
    client: &kube::Client,
    discovery: &Discovery,
    object: &serde_json::Value,
    dry_run: bool,
) {
    let object: DynamicObject = serde_json::from_value(object.clone()).expect("object");
    let types = object.types.clone().expect("apiVersion and kind");
    let gvk = kube::api::GroupVersionKind::try_from(&types).expect("group version kind");
    let (resource, capabilities) = discovery
        .resolve_gvk(&gvk)
        .unwrap_or_else(|| panic!("the apiserver does not serve {gvk:?}"));
    let api: Api<DynamicObject> = match capabilities.scope {
        Scope::Namespaced => Api::namespaced_with(
            client.clone(),
            object.metadata.namespace.as_deref().unwrap_or("default"),
            &resource,
        ),
        Scope::Cluster => Api::all_with(client.clone(), &resource),
    };
    let params = PostParams { dry_run, ..Default::default() };
    if let Err(e) = api.create(&params, &object).await {
        panic!("{} {:?} refused: {e}", types.kind, object.metadata.name);
    }
}

#[test]
fn deploy_manifests_apply_and_the_container_runs_as_written() {
    let owned = OwnedPlane::for_test(false);
    let runtime = support::control_plane::runtime();
    runtime.block_on(async {
        let admin = client_from_kubeconfig(&owned.plane.admin_kubeconfig).await;
        let discovery = Discovery::new(admin.clone()).run().await.expect("discovery");
        let rbac = documents("rbac/rbac.yaml");
        let plugin = documents("hostpath/csi-hostpath-plugin.yaml");
        let classes = documents("storageclass.yaml");
        for object in rbac.iter().chain(&plugin).chain(&classes) {
            create(&admin, &discovery, object, true).await;
        }
        for object in rbac.iter().chain(&classes) {
            create(&admin, &discovery, object, false).await;
        }

        // The container, as the StatefulSet runs it.
        let set = plugin
            .iter()
            .find(|o| o["kind"] == "StatefulSet")
            .expect("a StatefulSet");
        let pod = &set["spec"]["template"]["spec"];
        let container = pod["containers"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["name"] == "csi-pv-controller"))
            .expect("the csi-pv-controller container");
        let account = pod["serviceAccountName"].as_str().expect("serviceAccountName");
        let namespace = set["metadata"]["namespace"].as_str().unwrap_or("default");

        // Mounts become folders; the driver's socket is where the container expects it.
        let dir = tempfile::tempdir().unwrap();
        let driver = Hostpath::start(dir.path(), HostpathConfig::named("hostpath.csi.k8s.io")).await;
        let mut mounts = Vec::new();
        for mount in container["volumeMounts"].as_array().expect("volumeMounts") {
            let path = mount["mountPath"].as_str().expect("mountPath");
            let local = dir.path().join(mount["name"].as_str().expect("name"));
            std::fs::create_dir_all(&local).unwrap();
            mounts.push((path.to_string(), local.display().to_string()));
        }
        let (csi_mount, csi_dir) = mounts
            .iter()
            .find(|(path, _)| path == "/csi")
            .expect("the socket mount");
        std::os::unix::fs::symlink(&driver.socket, Path::new(csi_dir).join("csi.sock")).unwrap();
        let args: Vec<String> = container["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str())
            // The probes' port is the test's own (Sidecar adds it).
            .filter(|a| !a.starts_with("--http-endpoint"))
            .map(|a| {
                mounts.iter().fold(a.to_string(), |a, (path, local)| {
                    a.replace(&format!("={path}/"), &format!("={local}/"))
                        .replace(&format!("={path}"), &format!("={local}"))
                })
            })
            .collect();
        assert!(args.iter().any(|a| a.contains(csi_mount.as_str()) || a.contains(csi_dir.as_str())));
        let token = owned.plane.service_account_token(namespace, account).await;
        let kubeconfig = owned.plane.token_kubeconfig("deployed", &token);
        let mut all = args.clone();
        all.push(format!("--kubeconfig={}", kubeconfig.display()));
        let mut env = vec![("HOSTNAME".to_string(), "csi-hostpathplugin-0".to_string())];
        for variable in container["env"].as_array().into_iter().flatten() {
            let name = variable["name"].as_str().expect("env name").to_string();
            let value = match &variable["valueFrom"]["fieldRef"]["fieldPath"] {
                serde_json::Value::String(f) if f == "metadata.namespace" => namespace.to_string(),
                serde_json::Value::Null => variable["value"].as_str().unwrap_or_default().to_string(),
                other => panic!("env {name} from {other}: map it here"),
            };
            env.push((name, value));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let mut sidecar = Sidecar::start_with_env(dir.path(), &all, &env);
        assert!(
            sidecar.wait_ready(LIMIT).await,
            "not ready with the container's args {args:?}:\n{}",
            sidecar.log_text()
        );
        let leads = eventually(LIMIT, || async {
            sidecar.log_text().contains("became leader").then_some(())
        })
        .await;
        assert!(leads.is_some(), "it never led:\n{}", sidecar.log_text());

        // The node plugin registers as kubelet would (the class is Immediate: CreateVolume asks
        // for the segments of the nodes the driver is on). The cluster's binder hands a claim
        // of the deployed class over; we provision it.
        driver
            .register_node(&admin)
            .await
            .unwrap_or_else(|e| panic!("cannot register the driver's node: {e}"));
        support::control_plane::create_namespace(&admin, "apps").await;
        let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
            Api::namespaced(admin.clone(), "apps");
        let claim = serde_json::from_value(json!({
            "metadata": {"name": "data", "annotations": {
                "volume.kubernetes.io/storage-provisioner": "hostpath.csi.k8s.io"}},
            "spec": {"storageClassName": "csi-hostpath-sc", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))
        .unwrap();
        let uid = claims
            .create(&PostParams::default(), &claim)
            .await
            .expect("claim")
            .metadata
            .uid
            .expect("uid");
        let volumes: Api<k8s_openapi::api::core::v1::PersistentVolume> = Api::all(admin.clone());
        let pv = eventually(LIMIT, || async { volumes.get_opt(&format!("pvc-{uid}")).await.ok()? }).await;
        let pv = pv.unwrap_or_else(|| panic!("no PV for the claim:\n{}", sidecar.log_text()));
        let claim_ref = pv.spec.and_then(|s| s.claim_ref).expect("claimRef");
        assert_eq!(claim_ref.uid.as_deref(), Some(uid.as_str()), "pre-bound to the claim");
        assert_eq!(driver.volume_ids().await.len(), 1, "one volume in the driver");
        let journal = mounts
            .iter()
            .find(|(path, _)| path == "/var/lib/csi-pv-controller")
            .map(|(_, local)| Path::new(local).join("intents"))
            .expect("the journal mount");
        let left = eventually(LIMIT, || async {
            let open = csi_pv_controller::journal::intents_in(&journal).ok()?;
            open.is_empty().then_some(())
        })
        .await;
        assert!(left.is_some(), "the journal keeps an entry:\n{}", sidecar.log_text());
        println!("deploy/ applied; the container ran with {args:?} as {namespace}/{account} and provisioned pvc-{uid}");

        // --enable-capacity without rbac-capacity.yaml (commented out in deploy/rbac/): the
        // leader's capacity rounds are refused, and /readyz says so rather than stay green.
        assert_eq!(sidecar.terminate(LIMIT).await, Some(0), "{}", sidecar.log_text());
        let mut capacity = all.clone();
        capacity.extend(["--enable-capacity".into(), "--capacity-ownerref-level=-1".into()]);
        capacity.push("--capacity-poll-interval=2s".into());
        let mut env = env.clone();
        env.push(("NAMESPACE", namespace));
        let sidecar = Sidecar::start_with_env(dir.path(), &capacity, &env);
        let port = sidecar.http_port;
        let said = eventually(LIMIT, || async move {
            let answer = tokio::task::spawn_blocking(move || {
                support::control_plane::http_get_status(port, "/readyz")
            });
            let (code, body) = answer.await.ok()??;
            (code == 503 && body.contains("capacity publishing has failed")).then_some(body)
        })
        .await;
        let said = said.unwrap_or_else(|| panic!("/readyz stayed green:\n{}", sidecar.log_text()));
        assert!(said.contains("forbidden"), "{said}");
        assert!(sidecar.log_text().contains("cannot list CSIStorageCapacity objects"));
        println!("--enable-capacity without its RBAC: {said}");
    });
}

/// Copies deploy/ into `dir`, the swap's remote resource replaced by the same file read from the
/// release archive the peers are built from (the test host reaches no web server).
fn deploy_copy(dir: &Path) -> std::path::PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(root.join("deploy"))
        .arg(dir)
        .status()
        .expect("cp");
    assert!(status.success(), "cannot copy deploy/");
    let copy = dir.join("deploy");
    support::driver_pod::offline_swap(&copy.join("swap"));
    copy
}

fn yaml_documents(text: &str) -> Vec<serde_json::Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| {
            let value = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(d).expect("YAML");
            serde_json::to_value(value).expect("JSON")
        })
        .filter(|v| !v.is_null())
        .collect()
}

/// `kubectl kustomize deploy/` and `deploy/swap/` build, and the API server takes what they
/// build: deploy/ in a server-side dry run, the swap for real. The swap is csi-driver-host-path's
/// manifest with exactly two containers swapped for ours, whose args are theirs verbatim after
/// their markers; every other object and container is as upstream wrote it, and our RBAC is
/// bound to the driver's own ServiceAccount.
#[test]
fn kustomize_builds_deploy_and_the_two_container_swap() {
    let owned = OwnedPlane::for_test(false);
    let admin = &owned.plane.admin_kubeconfig;
    let dir = tempfile::tempdir().expect("temporary folder");
    let copy = deploy_copy(dir.path());
    let main = kubectl(admin, &["kustomize", &copy.display().to_string()], None);
    kubectl(admin, &["apply", "--dry-run=server", "-f", "-"], Some(&main));

    let built = kubectl(admin, &["kustomize", &copy.join("swap").display().to_string()], None);
    let swap = yaml_documents(&built);
    let upstream = yaml_documents(&support::hostpath::source_file(
        "deploy/kubernetes-1.34/hostpath/csi-hostpath-plugin.yaml",
    ));
    let id = |o: &serde_json::Value| format!("{}/{}", o["kind"], o["metadata"]["name"]);
    // Every upstream object is there, unchanged but for the StatefulSet.
    for object in &upstream {
        let ours = swap.iter().find(|o| id(o) == id(object));
        let ours = ours.unwrap_or_else(|| panic!("{} is missing from the swap", id(object)));
        if object["kind"] != "StatefulSet" {
            assert_eq!(ours, object, "{} changed", id(object));
        }
    }
    let set = |objects: &[serde_json::Value]| -> serde_json::Value {
        objects.iter().find(|o| o["kind"] == "StatefulSet").cloned().expect("a StatefulSet")
    };
    let (theirs, ours) = (set(&upstream), set(&swap));
    let containers = |s: &serde_json::Value| -> Vec<serde_json::Value> {
        s["spec"]["template"]["spec"]["containers"].as_array().cloned().unwrap_or_default()
    };
    let swapped = ["csi-provisioner", "csi-resizer"];
    let kept: Vec<serde_json::Value> = containers(&theirs)
        .into_iter()
        .filter(|c| !swapped.contains(&c["name"].as_str().unwrap_or_default()))
        .collect();
    let mine: Vec<serde_json::Value> = containers(&ours);
    let (sidecar, others): (Vec<_>, Vec<_>) =
        mine.into_iter().partition(|c| c["name"] == "csi-pv-controller");
    assert_eq!(others, kept, "the containers that stay are upstream's, unchanged");
    let mut want = vec!["--args-of=csi-provisioner".to_string()];
    want.extend(support::hostpath::container_args("csi-provisioner").0);
    // The one arg beyond the two lists: the endpoint our probes ask.
    want.push("--http-endpoint=:8080".into());
    want.push("--args-of=csi-resizer".into());
    want.extend(support::hostpath::container_args("csi-resizer").0);
    let args: Vec<String> = sidecar[0]["args"]
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    assert_eq!(
        args, want,
        "our args are the two lists verbatim, each after its marker, and a port"
    );
    let mut pod = ours["spec"]["template"]["spec"].clone();
    let mut upstream_pod = theirs["spec"]["template"]["spec"].clone();
    pod["containers"] = serde_json::Value::Null;
    upstream_pod["containers"] = serde_json::Value::Null;
    assert_eq!(pod, upstream_pod, "the pod is upstream's but for its containers");
    // Our RBAC, bound to the driver's ServiceAccount; no ServiceAccount of ours.
    for binding in [
        "ClusterRoleBinding/csi-pv-controller-role",
        "RoleBinding/csi-pv-controller-leader-election",
    ] {
        let object = swap.iter().find(|o| id(o).replace('"', "") == binding).expect(binding);
        assert_eq!(object["subjects"][0]["name"], "csi-hostpathplugin-sa", "{binding}");
    }
    assert!(!swap.iter().any(|o| id(o) == "\"ServiceAccount\"/\"csi-pv-controller\""));

    kubectl(admin, &["apply", "-f", "-"], Some(&built));
    let text = kubectl(
        admin,
        &["get", "statefulset", "csi-hostpathplugin", "-n", "default", "-o", "json"],
        None,
    );
    let stored: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let names: Vec<String> =
        containers(&stored).iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect();
    let has = |name: &str| names.iter().any(|n| n == name);
    assert!(
        has("csi-pv-controller") && !has("csi-provisioner") && !has("csi-resizer"),
        "{names:?}"
    );
    println!("deploy/ and deploy/swap/ built and applied; the swap's containers: {names:?}");
}

/// Every source file a comment in deploy/ names exists: the RBAC's "what each rule is for"
/// points a reader at the code that makes each call.
#[test]
fn every_source_file_deploy_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut missing = Vec::new();
    let mut named = 0;
    let mut folders = vec![root.join("deploy")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                folders.push(path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            for (at, _) in text.match_indices("src/") {
                let tail = &text[at..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || "_/.".contains(c)))
                    .unwrap_or(tail.len());
                let name = tail[..end].trim_end_matches('.');
                let file_or_folder = name.ends_with(".rs") || name.ends_with('/');
                if !file_or_folder {
                    continue;
                }
                named += 1;
                if !root.join(name).exists() {
                    missing.push(format!("{}: {name}", path.display()));
                }
            }
        }
    }
    assert!(named >= 5, "deploy/ names {named} source files: the scan reads nothing");
    assert!(missing.is_empty(), "deploy/ names files that do not exist:\n{}", missing.join("\n"));
}
