//! What a real Prometheus server stores from us is what it stored from the Go sidecars we
//! replace. The same work (a claim provisioned, grown and deleted, on hostpathplugin beside
//! kube-controller-manager) is done by our process, with csi-driver-host-path's two arg lists
//! each naming its own port, and then by the real csi-provisioner and csi-resizer, each on its
//! port. Every port is scraped with Prometheus 2's and Prometheus 3's own `Accept` headers and
//! read by Prometheus' own parser (peers/promparse). Per role, the series (name, label names,
//! `le`) and the Content-Type must be the same; each series only one side has stands in
//! tests/golden/metrics-allow.txt with its reason.

mod support;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;

use support::cluster::eventually;
use support::control_plane::{free_port, http_get_with};
use support::peers::peer;
use support::relayed::Beside;
use support::upstream::{Extra, Upstream};

const LIMIT: Duration = Duration::from_secs(90);

/// Prometheus 2.55's default scrape `Accept` (scrape.acceptHeader over its default protocols).
const PROMETHEUS_2: &str = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
/// Prometheus 3's, with its UTF-8 escaping parameter.
const PROMETHEUS_3: &str = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.7,application/openmetrics-text;version=0.0.1;q=0.6,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.3";

/// What one scrape gave: its Content-Type and the series keys Prometheus' parser read.
#[derive(Debug)]
struct Scrape {
    content_type: String,
    series: BTreeSet<String>,
}

/// GET /metrics on `host`:`port` with `accept`, read by promparse.
async fn scrape(port: u16, accept: &'static str) -> Scrape {
    let header = format!("Accept: {accept}\r\n");
    let (headers, body) =
        tokio::task::spawn_blocking(move || http_get_with(port, "/metrics", &header))
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("port {port}: no 200 to a scrape"));
    let content_type = headers
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    let series = parse(&content_type, &body);
    Scrape { content_type, series }
}

/// The series keys of `body` as Prometheus reads it: the name, the label names, and the
/// value of `le` (a bucket's bound, part of the series' identity).
fn parse(content_type: &str, body: &str) -> BTreeSet<String> {
    let mut child = Command::new(peer("promparse"))
        .arg(content_type)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promparse (make peers builds it)");
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "Prometheus' parser refuses the scrape: {stderr}\n{body}");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines().filter_map(|l| l.strip_prefix("series ")).map(series_key).collect()
}

/// `{__name__="x", a="1", le="10"}` → `x{a,le="10"}`.
fn series_key(labels: &str) -> String {
    let inner = labels.trim().trim_start_matches('{').trim_end_matches('}');
    let (mut name, mut keys) = (String::new(), Vec::new());
    let mut chars = inner.chars().peekable();
    loop {
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        let key = key.trim().trim_start_matches(',').trim().to_string();
        if key.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'), "{labels}");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => break,
                c => value.push(c),
            }
        }
        match key.as_str() {
            "__name__" => name = value,
            "le" => keys.push(format!("le=\"{value}\"")),
            _ => keys.push(key),
        }
    }
    keys.sort();
    format!("{name}{{{}}}", keys.join(","))
}

/// One line of tests/golden/metrics-allow.txt: `<role> <side> <prefix>`, then `: <reason>`.
struct Allowed {
    role: String,
    side: String,
    prefix: String,
}

fn allow_list() -> Vec<Allowed> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/metrics-allow.txt");
    let text = std::fs::read_to_string(path).expect("tests/golden/metrics-allow.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (what, reason) = l.split_once(" : ").unwrap_or_else(|| panic!("no reason: {l}"));
            assert!(!reason.trim().is_empty(), "no reason: {l}");
            let mut words = what.split_whitespace().map(str::to_string);
            let mut next =
                || words.next().unwrap_or_else(|| panic!("not <role> <side> <prefix>: {l}"));
            Allowed { role: next(), side: next(), prefix: next() }
        })
        .collect()
}

/// The work both stacks do: a claim provisioned, grown, and deleted with its volume. A step
/// that does not happen fails with `story`, the logs of the stack doing the work.
async fn work(world: &Beside, claim: &str, story: &dyn Fn() -> String) {
    world.create_claim(claim, "grow", "1Gi", json!({})).await;
    let bound = eventually(LIMIT, || async {
        let found = world.claims().get_opt(claim).await.ok()??;
        (found.status?.phase? == "Bound").then_some(())?;
        found.spec?.volume_name
    })
    .await;
    let Some(volume) = bound else {
        let events = world.events(claim).await;
        panic!("{claim}: not Bound within {LIMIT:?}; events: {events:?}\n{}", story());
    };
    let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    let params = kube::api::PatchParams::default();
    world.claims().patch(claim, &params, &kube::api::Patch::Merge(patch)).await.unwrap();
    let grown = eventually(LIMIT, || async {
        let pv = world.volumes().get_opt(&volume).await.ok()??;
        (pv.spec?.capacity?.get("storage")?.0 == "2Gi").then_some(())
    })
    .await;
    assert!(grown.is_some(), "{claim}: the volume did not grow\n{}", story());
    world.claims().delete(claim, &Default::default()).await.unwrap();
    let gone = world.volume_gone(&volume, LIMIT).await;
    assert!(gone, "{claim}: the PV stayed\n{}", story());
}

/// Waits until something listens on loopback `port`: a Go sidecar that cannot serve its
/// `--http-endpoint` exits, and the claim would then wait for nobody.
async fn listening(port: u16, story: &dyn Fn() -> String) {
    let up = eventually(Duration::from_secs(30), || async {
        std::net::TcpStream::connect(("127.0.0.1", port)).ok().map(drop)
    })
    .await;
    assert!(up.is_some(), "nothing listens on 127.0.0.1:{port}\n{}", story());
}

/// The two lists of csi-driver-host-path's manifest, each marked, with the port given.
fn our_args(provisioner: &str, resizer: &str) -> Vec<String> {
    let list = |name: &str, endpoint: &str| -> Vec<String> {
        let (args, _) = support::hostpath::container_args(name);
        let args = args.iter().map(|a| a.replace("/csi/csi.sock", "{dir}/relay.sock"));
        std::iter::once(format!("--args-of={name}"))
            .chain(args.filter(|a| !a.starts_with("--http-endpoint")))
            .chain([format!("--http-endpoint={endpoint}")])
            .collect()
    };
    let mut args = list("csi-provisioner", provisioner);
    args.extend(list("csi-resizer", resizer));
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_roles_port_reads_as_its_go_sidecar_to_prometheus_2_and_3() {
    let [ours_p, ours_r, up_p, up_r] = [free_port(), free_port(), free_port(), free_port()];
    // `:port` for the provisioner's, as the manifests write it; loopback for the resizer's.
    let args = our_args(&format!(":{ours_p}"), &format!("127.0.0.1:{ours_r}"));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut world = Beside::start("golden", &["--disable-node-expansion"], &args).await;
    world.create_class("grow", json!({"allowVolumeExpansion": true})).await;
    work(&world, "ours", &|| format!("sidecar log:\n{}", world.sidecar.log_text())).await;

    // `:port` listens on IPv6 too, as Go's listener does.
    let v6 = std::net::TcpStream::connect(("::1", ours_p));
    assert!(v6.is_ok(), "[::1]:{ours_p} refused: {v6:?}");

    let mut scrapes = Vec::new();
    for (role, port) in [("provisioner", ours_p), ("resizer", ours_r)] {
        for accept in [PROMETHEUS_2, PROMETHEUS_3] {
            scrapes.push((role, accept, scrape(port, accept).await));
        }
    }
    assert_eq!(world.sidecar.terminate(Duration::from_secs(20)).await, Some(0));

    let socket = world.hostpath().socket.clone();
    let extra = Extra {
        provisioner_args: vec![format!("--http-endpoint=127.0.0.1:{up_p}")],
        resizer_args: vec![format!("--http-endpoint=127.0.0.1:{up_r}")],
        ..Extra::default()
    };
    let upstream = Upstream::start_with(
        &world.plane.admin_kubeconfig,
        &socket,
        world.dir.path(),
        "up",
        &[],
        &extra,
    );
    let story = || format!("upstream's logs:\n{}", upstream.log_text());
    listening(up_p, &story).await;
    listening(up_r, &story).await;
    work(&world, "upstream", &story).await;

    let allowed = allow_list();
    let mut used = vec![false; allowed.len()];
    let mut unexplained = Vec::new();
    for (i, (role, port)) in [("provisioner", up_p), ("resizer", up_r)].into_iter().enumerate() {
        for (j, accept) in [PROMETHEUS_2, PROMETHEUS_3].into_iter().enumerate() {
            let theirs = scrape(port, accept).await;
            let ours = &scrapes[i * 2 + j].2;
            let which = if j == 0 { "Prometheus 2" } else { "Prometheus 3" };
            assert_eq!(
                ours.content_type, theirs.content_type,
                "{role}, {which}'s Accept: the Content-Type differs"
            );
            for (side, only) in [
                ("upstream", theirs.series.difference(&ours.series)),
                ("ours", ours.series.difference(&theirs.series)),
            ] {
                for series in only {
                    let hit = allowed.iter().position(|a| {
                        (a.role == role || a.role == "both")
                            && a.side == side
                            && series.starts_with(&a.prefix)
                    });
                    match hit {
                        Some(k) => used[k] = true,
                        None => {
                            unexplained.push(format!("{role} ({which}): only {side} has {series}"));
                        }
                    }
                }
            }
        }
    }
    unexplained.sort();
    unexplained.dedup();
    for (a, used) in allowed.iter().zip(&used) {
        if !used {
            println!(
                "allow-list entry matched nothing this run: {} {} {}",
                a.role, a.side, a.prefix
            );
        }
    }
    assert!(
        unexplained.is_empty(),
        "series not in tests/golden/metrics-allow.txt:\n{}\n\nupstream's logs:\n{}",
        unexplained.join("\n"),
        upstream.log_text()
    );
}
