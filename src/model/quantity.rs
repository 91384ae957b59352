//! Exact conversion between Kubernetes Quantity strings and byte counts.
//!
//! A storage request means `Quantity.Value()`: the exact decimal value, rounded up to a whole
//! byte. kube_quantity goes through f64 and truncates ("2.5Gi" becomes 2 GiB), so we parse with
//! integers: mantissa digits, a decimal point, and a suffix, all in u128.

use std::fmt;

/// Why a quantity string is not a usable byte count.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("{0:?} is not a quantity (expected a number with an optional suffix such as Gi or G)")]
    Malformed(String),
    #[error("{0:?} is negative")]
    Negative(String),
    #[error("{0:?} is larger than the largest size Kubernetes and CSI can express")]
    TooLarge(String),
}

/// The largest byte count CSI can carry (int64 fields) and Kubernetes can store.
pub const MAX_BYTES: u64 = i64::MAX as u64;

/// Binary suffixes, each 2^10 times the one before, from Ki = 2^10.
const BINARY_SUFFIXES: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
/// Decimal suffixes, each 10^3 times the one before, from n = 10^-9 ("" is 10^0).
const DECIMAL_SUFFIXES: [&str; 10] = ["n", "u", "m", "", "k", "M", "G", "T", "P", "E"];

/// Parses `text` and returns its value in bytes, rounded up ("1.5" is 2, "100m" is 1).
pub fn parse_bytes(text: &str) -> Result<u64, QuantityError> {
    let bytes = parse_exact(text)?;
    let too_large = || QuantityError::TooLarge(text.to_string());
    u64::try_from(bytes).ok().filter(|b| *b <= MAX_BYTES).ok_or_else(too_large)
}

/// A size for comparing two quantities, at any size: bytes, rounded up; a quantity past what
/// 128 bits hold is larger than any other; an unreadable one is 0. Kubernetes 1.38's binder
/// compares a claim named PV's size this way (kubernetes#141618): past int64, a conversion to
/// bytes misorders them.
pub fn comparable_bytes(text: &str) -> u128 {
    match parse_exact(text) {
        Ok(bytes) => bytes,
        Err(QuantityError::TooLarge(_)) => u128::MAX,
        Err(_) => 0,
    }
}

/// The exact byte count, rounded up, as long as 128 bits hold it.
fn parse_exact(text: &str) -> Result<u128, QuantityError> {
    let malformed = || QuantityError::Malformed(text.to_string());
    let too_large = || QuantityError::TooLarge(text.to_string());
    let s = text.trim();
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    // Split number from suffix at the first character that cannot belong to the number.
    let number_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (number, suffix) = s.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(malformed());
    }

    // value = digits * 10^(-fraction.len()) * base^exponent
    let digits: String = format!("{whole}{fraction}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 38 {
        return Err(too_large());
    }
    let mantissa: u128 =
        if digits.is_empty() { 0 } else { digits.parse().map_err(|_| malformed())? };
    let position = |table: &[&str]| table.iter().position(|t| *t == suffix);
    let (base, exponent): (u128, i32) = if let Some(i) = position(&BINARY_SUFFIXES) {
        (2, 10 * (i as i32 + 1))
    } else if let Some(i) = position(&DECIMAL_SUFFIXES) {
        (10, 3 * (i as i32 - 3))
    } else if let Some(e) = suffix.strip_prefix(['e', 'E']) {
        (10, e.parse().map_err(|_| malformed())?)
    } else {
        return Err(malformed());
    };
    if negative && mantissa != 0 {
        return Err(QuantityError::Negative(text.to_string()));
    }

    // numerator / denominator, kept exact.
    let mut numerator = mantissa;
    let mut denominator: u128 = 10u128
        .checked_pow(u32::try_from(fraction.len()).map_err(|_| too_large())?)
        .ok_or_else(too_large)?;
    let power = base.checked_pow(exponent.unsigned_abs()).ok_or_else(too_large)?;
    if exponent >= 0 {
        numerator = numerator.checked_mul(power).ok_or_else(too_large)?;
    } else {
        denominator = denominator.checked_mul(power).ok_or_else(too_large)?;
    }
    Ok(numerator.div_ceil(denominator))
}

/// A byte count in Kubernetes' canonical binary form: the largest exact binary suffix ("1Gi",
/// "1536Mi"), or plain bytes when none divides it ("1000").
pub fn format_bytes(bytes: u64) -> String {
    BinaryBytes(bytes).to_string()
}

struct BinaryBytes(u64);

impl fmt::Display for BinaryBytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SUFFIXES: [&str; 6] = ["Ei", "Pi", "Ti", "Gi", "Mi", "Ki"];
        if self.0 == 0 {
            return write!(f, "0");
        }
        for (i, suffix) in SUFFIXES.iter().enumerate() {
            let unit = 1u64 << (10 * (6 - i));
            if self.0.is_multiple_of(unit) {
                return write!(f, "{}{suffix}", self.0 / unit);
            }
        }
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly_and_rounds_up() {
        let table: &[(&str, u64)] = &[
            ("0", 0),
            ("1", 1),
            ("1Ki", 1024),
            ("1Mi", 1 << 20),
            ("1Gi", 1 << 30),
            ("2.5Gi", 2_684_354_560), // kube_quantity says 2Gi here
            ("1.5", 2),
            ("100m", 1),
            ("1000m", 1),
            ("1001m", 2),
            ("1k", 1000),
            ("1G", 1_000_000_000),
            ("1.5G", 1_500_000_000),
            ("1e3", 1000),
            ("1E9", 1_000_000_000),
            ("1e-3", 1),
            ("+5Mi", 5 << 20),
            ("-0", 0),
            (".5Ki", 512),
            ("5.", 5),
            ("0.1Ki", 103), // 102.4 rounded up
            ("7Ei", 7 << 60),
            ("123456789012", 123_456_789_012),
            ("  10Gi ", 10 << 30),
            ("1n", 1),
            ("1u", 1),
            ("9223372036854775807", MAX_BYTES),
        ];
        for (text, want) in table {
            assert_eq!(parse_bytes(text), Ok(*want), "{text}");
        }
    }

    #[test]
    fn sizes_past_int64_still_compare() {
        assert!(matches!(parse_bytes("10E"), Err(QuantityError::TooLarge(_))));
        assert_eq!(comparable_bytes("10E"), 10_000_000_000_000_000_000);
        assert!(comparable_bytes("20E") > comparable_bytes("10E"));
        assert!(comparable_bytes("10E") > comparable_bytes("8Ei"));
        assert_eq!(comparable_bytes("1e400"), u128::MAX);
        assert_eq!(comparable_bytes("nonsense"), 0);
        assert_eq!(comparable_bytes("1Gi"), 1 << 30);
    }

    #[test]
    fn refuses_nonsense() {
        for text in ["", "Gi", "1.2.3", "1Gb", "1 Gi", "abc", "1e", "1ex", "--1", ".", "0x10"] {
            assert!(matches!(parse_bytes(text), Err(QuantityError::Malformed(_))), "{text:?}");
        }
        for text in ["-1", "-1Gi", "-0.5"] {
            assert!(matches!(parse_bytes(text), Err(QuantityError::Negative(_))), "{text:?}");
        }
        for text in [
            "9223372036854775808",
            "8Ei",
            "1e19",
            "1e400",
            "100000000000000000000000000000000000000000Gi",
        ] {
            assert!(matches!(parse_bytes(text), Err(QuantityError::TooLarge(_))), "{text:?}");
        }
    }

    #[test]
    fn formats_canonically_and_round_trips() {
        for (bytes, want) in [
            (0, "0"),
            (1000, "1000"),
            (1024, "1Ki"),
            (1536 << 20, "1536Mi"),
            (1 << 30, "1Gi"),
            (3 << 40, "3Ti"),
            (1 << 62, "4Ei"),
            (MAX_BYTES, "9223372036854775807"),
        ] {
            assert_eq!(format_bytes(bytes), want);
            assert_eq!(parse_bytes(want), Ok(bytes));
        }
    }
}
