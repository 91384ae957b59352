//! `--http-endpoint`: the addresses to listen on, and which role's series each serves.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use super::{Config, ConfigError, merged};

impl Config {
    /// The distinct --http-endpoint addresses, each as `host:port` for the listener: `:8080`
    /// means every interface, IPv6 and IPv4, as in Go; a host name is looked up when the server
    /// starts.
    pub fn http_addresses(&self) -> Result<Vec<String>, ConfigError> {
        let mut out: Vec<String> = Vec::new();
        for value in self.http_endpoint.iter().map(|v| v.trim()).filter(|v| !v.is_empty()) {
            let address = http_address(value).map_err(|reason| ConfigError {
                flag: "http-endpoint",
                reason: format!("{value:?} is not host:port or :port ({reason})"),
            })?;
            if !out.contains(&address) {
                out.push(address);
            }
        }
        Ok(out)
    }

    /// Each --http-endpoint address with the role whose series it serves: the role whose
    /// marked list alone named it, else None (every series).
    pub fn http_listeners(&self) -> Result<Vec<(String, Option<merged::Role>)>, ConfigError> {
        let roles = |address: &str| -> Vec<Option<merged::Role>> {
            let mut roles: Vec<Option<merged::Role>> = self
                .endpoint_roles
                .iter()
                .filter(|(_, value)| http_address(value.trim()).is_ok_and(|a| a == address))
                .map(|(role, _)| *role)
                .collect();
            roles.sort_unstable();
            roles.dedup();
            roles
        };
        let addresses = self.http_addresses()?;
        Ok(addresses
            .into_iter()
            .map(|address| {
                let role = match roles(&address)[..] {
                    [Some(role)] => Some(role),
                    _ => None,
                };
                (address, role)
            })
            .collect())
    }
}

/// One --http-endpoint value as the listener's address.
fn http_address(value: &str) -> Result<String, String> {
    if let Ok(address) = value.parse::<SocketAddr>() {
        return Ok(address.to_string());
    }
    let (host, port) = value.rsplit_once(':').ok_or("no port")?;
    let port: u16 = port.parse().map_err(|e| format!("port: {e}"))?;
    match host {
        // Every interface, IPv6 and IPv4 (health binds it dual-stack, as Go does).
        "" => Ok(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port).to_string()),
        host if host.contains(':') || host.contains('/') || host.contains(' ') => {
            Err(format!("{host:?} is not a host name"))
        }
        host => Ok(format!("{host}:{port}")),
    }
}
