//! The expressions weir's filter tests run against libpcap and tcpdump, shared with other crates'
//! end-to-end tests (the CLI's) so every layer is checked on the same list.
//!
//! The list lives in `crates/filter/tests/expressions.txt`, one expression a line; blank lines and
//! lines starting with `#` are comments. Some expressions deliberately fail to compile (for some
//! link types, or always): a test must then see weir and libpcap fail alike.

/// The raw text of `tests/expressions.txt`.
pub const EXPRESSIONS_TXT: &str = include_str!("../tests/expressions.txt");

/// Path of the expression list, for tools that want to read it themselves.
pub const EXPRESSIONS_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/expressions.txt");

/// The expressions, in file order, comments and blank lines left out.
pub fn expressions() -> Vec<&'static str> {
    EXPRESSIONS_TXT
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn list_is_long_enough() {
        let e = super::expressions();
        assert!(e.len() >= 30, "{} expressions", e.len());
        assert!(e.iter().all(|l| !l.starts_with('#')));
    }
}
