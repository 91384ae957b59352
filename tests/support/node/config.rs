//! The node's configuration files: containerd's, the pods' network and kubelet's.

use std::path::Path;

use super::super::control_plane::SERVICE_RANGE;

/// The host-side bridge of the pods' network. It gets no address: pods can reach each other
/// on it, and nothing else.
pub const BRIDGE: &str = "csipv-node0";

/// containerd with its state under `dir`, serving CRI on `socket`. The oom_score_adj clamp is
/// needed where no process has CAP_SYS_RESOURCE: runc could not lower a pod's
/// score below containerd's own.
pub fn containerd(dir: &Path, socket: &Path, sandbox: &str) -> String {
    let dir = dir.display();
    let socket = socket.display();
    format!(
        r#"version = 3
root = "{dir}/containerd/root"
state = "{dir}/containerd/state"

[grpc]
  address = "{socket}"

[ttrpc]
  address = "{socket}.ttrpc"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{sandbox}"

[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "/usr/sbin/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{dir}/cni"
    max_conf_num = 1

[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#
    )
}

/// One bridge network for the pods, with no masquerade. Addresses come from a documentation
/// range that is routed nowhere; the allocator's files stay in `dir`. With `to_services`, the
/// bridge is the pods' gateway to `SERVICE_RANGE` and to nothing else; without it, the bridge
/// has no address on the host side and pods can reach only each other.
pub fn cni(dir: &Path, to_services: bool) -> String {
    let data = dir.join("cni-ipam");
    let routes = if to_services {
        serde_json::json!([{"dst": SERVICE_RANGE}])
    } else {
        serde_json::json!([])
    };
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "csipv-node",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": to_services,
                "isDefaultGateway": false,
                "ipMasq": false,
                "hairpinMode": false,
                "ipam": {
                    "type": "host-local",
                    "dataDir": data.display().to_string(),
                    "ranges": [[{"subnet": "198.51.100.0/24"}]],
                    "routes": routes,
                },
            },
            {"type": "loopback"},
        ],
    })
    .to_string()
}

/// kubelet on cgroup v1 with the cgroupfs driver (for a host whose PID 1 is not systemd), on
/// 127.0.0.1:`port`, trusting client certificates of the plane's CA (the apiserver's, for exec
/// and logs) and no one else, with eviction and image collection thresholds that a shared
/// build machine's disk never reaches.
pub fn kubelet(containerd_socket: &Path, client_ca: &Path, port: u16) -> String {
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://{socket}
address: 127.0.0.1
port: {port}
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
  x509:
    clientCAFile: {ca}
authorization:
  mode: AlwaysAllow
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "100Mi"
  nodefs.available: "1%"
  nodefs.inodesFree: "1%"
  imagefs.available: "1%"
syncFrequency: 10s
fileCheckFrequency: 10s
nodeStatusUpdateFrequency: 5s
"#,
        socket = containerd_socket.display(),
        ca = client_ca.display(),
    )
}
