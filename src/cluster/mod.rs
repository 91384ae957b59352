//! The Kubernetes side: the client, the watched stores, and (later) writes and events.

pub mod client;
pub mod gate;
pub mod quantity;
pub mod ratelimit;
pub mod stores;

pub use stores::Stores;
