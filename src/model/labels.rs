//! Kubernetes' rules for names (RFC 1123 labels and subdomains, as Secret names and namespaces
//! must be) and for label keys and values, which a PV's node affinity must meet: a
//! driver's topology segments become such keys and values, and the API refuses a PV whose
//! affinity breaks them.

/// A label key: an optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// characters of [A-Za-z0-9-_.], starting and ending alphanumeric.
pub fn is_qualified_name(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    prefix.is_none_or(is_dns_subdomain) && is_name_part(name)
}

/// RFC 1123 label: at most 63 of [a-z0-9-], starting and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: at most 253 characters, dot-separated labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label value: empty, or as a name part.
pub fn is_label_value(value: &str) -> bool {
    value.is_empty() || is_name_part(value)
}

fn is_name_part(s: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    s.len() <= 63
        && edge(s.chars().next())
        && edge(s.chars().last())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_as_the_api_validates_them() {
        let keys = [
            ("topology.kubernetes.io/zone", true),
            ("zone", true),
            ("topology.hostpath.csi/node", true),
            ("", false),
            ("/zone", false),
            ("a/b/c", false),
            ("Upper.example.com/zone", false),
            ("zone-", false),
            ("é", false),
        ];
        for (key, valid) in keys {
            assert_eq!(is_qualified_name(key), valid, "{key:?}");
        }
        let long = "a".repeat(64);
        let values =
            [("", true), ("node-1", true), ("A_b.c", true), ("-a", false), (long.as_str(), false)];
        for (value, valid) in values {
            assert_eq!(is_label_value(value), valid, "{value:?}");
        }
    }
}
