//! [`FilterSet`]: one tcpdump expression compiled for every interface a file declares, as
//! tcpdump does when it opens each file.

use std::collections::HashMap;

use weir_packet::{Interface, LinkType};

use crate::{effective_snaplen, Filter, FilterError};

/// Why a [`FilterSet`] could not be built or compiled for an interface. Both carry libpcap's
/// message as their source.
#[derive(Clone, PartialEq, Eq, Debug, thiserror::Error)]
pub enum FilterSetError {
    /// The expression is invalid whatever the link type.
    #[error("invalid filter expression")]
    Invalid(#[source] FilterError),
    /// The expression makes no sense for this interface's link type (`vlan` on raw IP, say).
    #[error("cannot compile the filter for link type {link}")]
    ForLink {
        /// The interface's link type.
        link: LinkType,
        /// libpcap's refusal.
        #[source]
        source: FilterError,
    },
}

/// A BPF expression compiled lazily once per (link type, snap length, byte order), as interfaces
/// appear: libpcap's code depends on all three, exactly as when tcpdump opens each file.
///
/// ```no_run
/// use weir_filter::FilterSet;
/// use weir_packet::{Interface, LinkType};
///
/// let mut filters = FilterSet::new("tcp port 80")?;
/// let f = filters.for_interface(&Interface::new(LinkType::ETHERNET, 65535))?;
/// # let (bytes, wire_len): (&[u8], u32) = (&[], 0);
/// if f.matches(bytes, wire_len) { /* keep the packet */ }
/// # Ok::<(), weir_filter::FilterSetError>(())
/// ```
#[derive(Debug)]
pub struct FilterSet {
    expr: String,
    compiled: HashMap<(LinkType, u32, bool), Filter>,
}

impl FilterSet {
    /// Takes the expression (tcpdump joins its words with spaces) and checks that it compiles
    /// for Ethernet, so a syntax error is reported before any input is opened. An error that
    /// only concerns some link types (`vlan` on raw IP) is left to [`FilterSet::for_interface`]:
    /// it is only fatal for inputs of that link.
    pub fn new(expr: &str) -> Result<FilterSet, FilterSetError> {
        let set = FilterSet {
            expr: expr.to_string(),
            compiled: HashMap::new(),
        };
        if !set.is_empty() {
            if let Err(e) = Filter::compile(&set.expr, LinkType::ETHERNET, 0) {
                if !is_link_specific(&e.to_string()) {
                    return Err(FilterSetError::Invalid(e));
                }
            }
        }
        Ok(set)
    }

    /// True when the expression is empty (everything matches).
    pub fn is_empty(&self) -> bool {
        self.expr.trim().is_empty()
    }

    /// The filters of a file's interfaces, in interface-id order.
    pub fn for_interfaces(
        &mut self,
        interfaces: &[Interface],
    ) -> Result<Vec<Filter>, FilterSetError> {
        interfaces
            .iter()
            .map(|i| self.for_interface(i).cloned())
            .collect()
    }

    /// The filter for an interface, compiling it on first use.
    pub fn for_interface(&mut self, i: &Interface) -> Result<&Filter, FilterSetError> {
        let key = (i.link, effective_snaplen(i.snaplen), i.swapped);
        if !self.compiled.contains_key(&key) {
            let f =
                Filter::compile_for_file(&self.expr, key.0, key.1, key.2).map_err(|source| {
                    FilterSetError::ForLink {
                        link: key.0,
                        source,
                    }
                })?;
            self.compiled.insert(key, f);
        }
        Ok(&self.compiled[&key])
    }
}

/// Errors libpcap gives because the expression makes no sense for one link type (its message
/// strings, which are the only thing that tells them apart).
fn is_link_specific(msg: &str) -> bool {
    msg.contains("not supported") || msg.contains("link-layer") || msg.contains("link type")
}

#[cfg(test)]
mod tests {
    use std::error::Error;

    use super::*;

    #[test]
    fn a_syntax_error_is_refused_up_front_with_libpcaps_message() {
        let e = FilterSet::new("tcp port").unwrap_err();
        assert!(matches!(e, FilterSetError::Invalid(_)), "{e:?}");
        assert_eq!(e.to_string(), "invalid filter expression");
        assert!(e.source().is_some_and(|s| !s.to_string().is_empty()));
    }

    #[test]
    fn compiles_once_per_link_snaplen_and_byte_order() {
        let mut set = FilterSet::new("udp").unwrap();
        assert!(!set.is_empty());
        let eth = Interface::new(LinkType::ETHERNET, 0);
        let max = Interface::new(LinkType::ETHERNET, 262_144);
        let raw = Interface::new(LinkType::RAW, 65535);
        let got = set.for_interfaces(&[eth, max, raw]).unwrap();
        assert_eq!(got.len(), 3);
        // 0 and 262144 are the same snap length for libpcap
        assert_eq!(set.compiled.len(), 2);
        assert!(FilterSet::new(" ").unwrap().is_empty());
    }

    #[test]
    fn a_link_specific_error_is_only_fatal_for_that_link() {
        let mut set = FilterSet::new("ether host 02:00:00:00:00:01").unwrap();
        assert!(set
            .for_interface(&Interface::new(LinkType::ETHERNET, 0))
            .is_ok());
        let e = set
            .for_interface(&Interface::new(LinkType::RAW, 0))
            .unwrap_err();
        assert!(
            matches!(
                e,
                FilterSetError::ForLink {
                    link: LinkType::RAW,
                    ..
                }
            ),
            "{e:?}"
        );
        assert_eq!(
            e.to_string(),
            "cannot compile the filter for link type RAW (101)"
        );
    }
}
