//! A TCP relay between a client and the apiserver that a test can cut, as a network partition
//! would: open connections are dropped and new ones closed at once until it is restored.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct Proxy {
    pub port: u16,
    open: Arc<AtomicBool>,
    relays: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Relays 127.0.0.1:<port> to `target`.
    pub async fn start(target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let open = Arc::new(AtomicBool::new(true));
        let relays: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (open, relays) = (open.clone(), relays.clone());
            tokio::spawn(async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    if !open.load(Ordering::SeqCst) {
                        continue; // dropped: the client sees the connection closed
                    }
                    let relay = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(target).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    relays.lock().unwrap_or_else(|p| p.into_inner()).push(relay);
                }
            })
        };
        Proxy { port, open, relays, accept }
    }

    /// Drops every open connection and refuses new ones.
    pub fn cut(&self) {
        self.open.store(false, Ordering::SeqCst);
        for relay in self.relays.lock().unwrap_or_else(|p| p.into_inner()).drain(..) {
            relay.abort();
        }
    }

    pub fn restore(&self) {
        self.open.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}
