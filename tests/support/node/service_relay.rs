//! Test-only stand-in for kube-proxy, for the one Service a driver's pods use: `kubernetes`.
//! Pods reach the apiserver as in any cluster, with their in-cluster configuration
//! (`KUBERNETES_SERVICE_HOST`, the Service's ClusterIP, and their ServiceAccount's token); the
//! ClusterIP is an address of the pods' bridge on the host, and this relay copies each TCP
//! connection made to it on port 443 to the apiserver on loopback. TLS stays end to end (the
//! apiserver's certificate names the ClusterIP). No packet leaves the machine: the pods' only
//! route beyond their bridge is to the Services' range, through the bridge.

use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use super::super::control_plane::KUBERNETES_SERVICE_IP;

/// A running relay; it stops taking connections when dropped.
pub struct ServiceRelay {
    stop: Arc<AtomicBool>,
}

impl ServiceRelay {
    /// Puts the ClusterIP on the loopback device and relays ClusterIP:443 to `apiserver`
    /// ("127.0.0.1:port").
    pub fn start(apiserver: &str) -> io::Result<ServiceRelay> {
        remove_address();
        ip(&["addr", "add", &format!("{KUBERNETES_SERVICE_IP}/32"), "dev", "lo"])?;
        let listener = TcpListener::bind((KUBERNETES_SERVICE_IP, 443))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let target = apiserver.to_string();
        thread::Builder::new().name("service-relay".into()).spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = stream else { continue };
                let target = target.clone();
                thread::spawn(move || {
                    if let Ok(server) = TcpStream::connect(&target) {
                        pipe(client, server);
                    }
                });
            }
        })?;
        Ok(ServiceRelay { stop })
    }
}

impl Drop for ServiceRelay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees the flag.
        let _ = TcpStream::connect((KUBERNETES_SERVICE_IP, 443));
        remove_address();
    }
}

/// Takes the ClusterIP off the loopback device, if it is there (also after a killed run).
pub fn remove_address() {
    let _ = Command::new("ip")
        .args(["addr", "del", &format!("{KUBERNETES_SERVICE_IP}/32"), "dev", "lo"])
        .output();
}

/// Copies both ways until either side closes.
fn pipe(client: TcpStream, server: TcpStream) {
    let (Ok(mut client_read), Ok(mut server_read)) = (client.try_clone(), server.try_clone())
    else {
        return;
    };
    let (mut client_write, mut server_write) = (client, server);
    let upstream = thread::spawn(move || {
        let _ = io::copy(&mut client_read, &mut server_write);
        let _ = server_write.shutdown(Shutdown::Write);
    });
    let _ = io::copy(&mut server_read, &mut client_write);
    let _ = client_write.shutdown(Shutdown::Write);
    let _ = upstream.join();
}

fn ip(args: &[&str]) -> io::Result<()> {
    let out = Command::new("ip").args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
